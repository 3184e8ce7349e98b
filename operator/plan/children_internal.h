// What children*.cc share: a child's labels and metadata, the token volume and its files.
#pragma once

#include <string>

#include "operator/plan/children.h"

namespace cohort::controller::internal {

// The labels of every child of the job; `role` ("coordinator", "worker") unless empty.
json Labels(const api::CoordinatedJob& job, const std::string& role);
// A child's metadata: its name, the job's namespace, `labels`, and the job as its owner.
json Metadata(const api::CoordinatedJob& job, const std::string& name, json labels);

// Where a key of the token Secret (kTokenKey, kCaCertKey, ...) is in a container that mounts it.
std::string SecretFile(const char* key);
// The mount of TokenVolume: read-only, at kTokenDir.
json TokenMount();
// Readable by the coordinator's and the sidecar's user (a secret volume's files belong to root
// unless the pod has an fsGroup, and a worker pod's fsGroup is the template's to choose): only
// the containers that mount it see it, and the workload's containers do not. With TLS the
// coordinator gets its certificate and key, a sidecar the client's, both the job's CA: from
// the token Secret, or from cert-manager's Secret projected next to the token under the same
// names (a projected volume follows its Secrets: a renewal reaches the files).
json TokenVolume(const api::CoordinatedJob& job, bool coordinator, JobTls tls);

}  // namespace cohort::controller::internal
