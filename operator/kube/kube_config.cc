#include "operator/kube/kube_config.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "yaml-cpp/yaml.h"

namespace cohort::kube {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Finds the entry named `name` in a kubeconfig list (clusters, users, contexts).
YAML::Node FindNamed(const YAML::Node& list, const std::string& name) {
  if (!list || !list.IsSequence()) return YAML::Node();
  for (const auto& entry : list) {
    if (entry["name"] && entry["name"].as<std::string>() == name) return entry;
  }
  return YAML::Node();
}

std::string Str(const YAML::Node& node, const char* key) {
  return node && node[key] ? node[key].as<std::string>() : std::string();
}

// `<key>-data` (base64) or `<key>` (a file, relative to the kubeconfig's directory).
absl::StatusOr<std::string> DataOrFile(const YAML::Node& node, const std::string& key,
                                       const fs::path& dir, const std::string& what) {
  std::string data = Str(node, (key + "-data").c_str());
  if (!data.empty()) {
    std::string decoded;
    if (!absl::Base64Unescape(data, &decoded)) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", key, "-data is not base64"));
    }
    return decoded;
  }
  std::string file = Str(node, key.c_str());
  if (file.empty()) return std::string();
  fs::path p(file);
  if (p.is_relative()) p = dir / p;
  auto text = ReadFile(p.string());
  if (!text.ok())
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", text.status().message()));
  return *text;
}

}  // namespace

absl::StatusOr<KubeConfig> LoadKubeconfig(const std::string& path, const std::string& context) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    return absl::NotFoundError(absl::StrCat("kubeconfig ", path, " cannot be read"));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("kubeconfig ", path, ": ", e.what()));
  }
  const std::string what = absl::StrCat("kubeconfig ", path);
  try {
    std::string context_name = context.empty() ? Str(root, "current-context") : context;
    if (context_name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(what, " has no current-context"));
    }
    YAML::Node ctx = FindNamed(root["contexts"], context_name);
    if (!ctx.IsMap()) {
      return absl::InvalidArgumentError(absl::StrCat(what, " has no context ", context_name));
    }
    ctx = ctx["context"];
    YAML::Node cluster = FindNamed(root["clusters"], Str(ctx, "cluster"));
    if (!cluster.IsMap() || !cluster["cluster"]) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": context ", context_name, " names no known cluster"));
    }
    cluster = cluster["cluster"];
    YAML::Node user = FindNamed(root["users"], Str(ctx, "user"));
    user = user.IsMap() ? user["user"] : YAML::Node();

    const fs::path dir = fs::path(path).parent_path();
    KubeConfig config;
    config.source = path;
    config.server = std::string(absl::StripSuffix(Str(cluster, "server"), "/"));
    if (config.server.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": the cluster has no server"));
    }
    config.insecure_skip_tls_verify =
        cluster["insecure-skip-tls-verify"] && cluster["insecure-skip-tls-verify"].as<bool>();
    auto ca = DataOrFile(cluster, "certificate-authority", dir, what);
    if (!ca.ok()) return ca.status();
    config.ca_pem = *ca;
    if (user.IsMap()) {
      auto cert = DataOrFile(user, "client-certificate", dir, what);
      if (!cert.ok()) return cert.status();
      auto key = DataOrFile(user, "client-key", dir, what);
      if (!key.ok()) return key.status();
      config.client_cert_pem = *cert;
      config.client_key_pem = *key;
      config.token = Str(user, "token");
      config.token_file = Str(user, "tokenFile");
      if (user["exec"] || user["auth-provider"]) {
        return absl::UnimplementedError(absl::StrCat(
            what, ": user ", Str(ctx, "user"),
            " authenticates through an exec or auth-provider plugin, which cohort-operator "
            "does not run; use a client certificate or token"));
      }
    }
    if (config.client_cert_pem.empty() != config.client_key_pem.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": a client certificate needs its key and the other way round"));
    }
    std::string ns = Str(ctx, "namespace");
    if (!ns.empty()) config.default_namespace = ns;
    return config;
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", e.what()));
  }
}

absl::StatusOr<KubeConfig> LoadInClusterConfig(const std::string& root) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (!host || !*host || !port || !*port) {
    return absl::FailedPreconditionError(
        "not in a pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set");
  }
  KubeConfig config;
  config.source = "in-cluster service account";
  std::string h = host;
  if (absl::StrContains(h, ":")) h = absl::StrCat("[", h, "]");  // IPv6
  config.server = absl::StrCat("https://", h, ":", port);
  config.token_file = root + "/token";
  if (!fs::exists(config.token_file)) {
    return absl::FailedPreconditionError(
        absl::StrCat("no service-account token at ", config.token_file));
  }
  auto ca = ReadFile(root + "/ca.crt");
  if (!ca.ok()) return ca.status();
  config.ca_pem = *ca;
  if (auto ns = ReadFile(root + "/namespace"); ns.ok() && !ns->empty()) {
    config.default_namespace = std::string(absl::StripAsciiWhitespace(*ns));
  }
  return config;
}

absl::StatusOr<KubeConfig> ResolveKubeConfig(const std::string& path) {
  if (!path.empty()) return LoadKubeconfig(path);
  if (const char* env = std::getenv("KUBECONFIG"); env && *env) {
    // A list of files: the first one is used (cohort does not merge kubeconfigs).
    std::string first(env);
    first = first.substr(0, first.find(':'));
    return LoadKubeconfig(first);
  }
  if (const char* host = std::getenv("KUBERNETES_SERVICE_HOST"); host && *host) {
    return LoadInClusterConfig();
  }
  if (const char* home = std::getenv("HOME"); home && *home) {
    std::string p = absl::StrCat(home, "/.kube/config");
    if (fs::exists(p)) return LoadKubeconfig(p);
  }
  return absl::FailedPreconditionError(
      "no Kubernetes configuration: pass --kubeconfig, set KUBECONFIG, or run in a pod");
}

absl::StatusOr<std::string> CurrentToken(const KubeConfig& config) {
  if (config.token_file.empty()) return config.token;
  auto text = ReadFile(config.token_file);
  if (!text.ok()) return text.status();
  return std::string(absl::StripAsciiWhitespace(*text));
}

}  // namespace cohort::kube
