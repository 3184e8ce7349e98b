// Where the Kubernetes API is and how to authenticate to it: a kubeconfig file or the
// service-account files a pod gets (in-cluster configuration).
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace cohort::kube {

struct KubeConfig {
  std::string server;  // "https://host:port", without a trailing slash
  std::string ca_pem;  // empty: the system's trust store
  std::string client_cert_pem;
  std::string client_key_pem;
  std::string token;       // bearer token, read once
  std::string token_file;  // bearer token re-read on every request (bound tokens rotate)
  bool insecure_skip_tls_verify = false;
  std::string default_namespace = "default";
  std::string source;  // where this came from, for logs
};

// Reads a kubeconfig; `context` empty means its current-context. File references inside
// it are relative to the file's directory, as kubectl reads them.
absl::StatusOr<KubeConfig> LoadKubeconfig(const std::string& path, const std::string& context = "");

// The pod's service-account token and CA and KUBERNETES_SERVICE_HOST/PORT. `root` replaces
// /var/run/secrets/kubernetes.io/serviceaccount (tests).
absl::StatusOr<KubeConfig> LoadInClusterConfig(
    const std::string& root = "/var/run/secrets/kubernetes.io/serviceaccount");

// `path` if given, else $KUBECONFIG, else in-cluster when KUBERNETES_SERVICE_HOST is set,
// else ~/.kube/config.
absl::StatusOr<KubeConfig> ResolveKubeConfig(const std::string& path);

// The bearer token to send now ("" when none).
absl::StatusOr<std::string> CurrentToken(const KubeConfig& config);

}  // namespace cohort::kube
