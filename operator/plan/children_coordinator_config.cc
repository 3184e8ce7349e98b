// The coordinator's configuration: the ConfigMap whose coordinator.yaml it reads (--config).
#include <initializer_list>
#include <string>

#include "absl/strings/str_cat.h"
#include "operator/plan/children.h"
#include "operator/plan/children_internal.h"
#include "yaml-cpp/yaml.h"

namespace cohort::controller {

using internal::Labels;
using internal::Metadata;
using internal::SecretFile;

json CoordinatorConfigMap(const api::CoordinatedJob& job, JobTls tls) {
  const auto& c = job.spec.coordinator;
  const std::string workload = api::WorkloadJobName(job.spec.framework);
  // Read by cohort-coordinator --config (common/yaml_config.cc): a mapping of its flags to a
  // scalar or a flow list of scalars each.
  YAML::Emitter out;
  out << YAML::Comment(absl::StrCat("cohort-coordinator settings for CoordinatedJob ",
                                    job.namespace_name, "/", job.name,
                                    " (written by cohort-operator)"));
  out << YAML::BeginMap;
  const auto flag = [&out](const char* name, const auto& value) {
    out << YAML::Key << name << YAML::Value << value;
  };
  const auto list = [&out](const char* name, std::initializer_list<std::string> values) {
    out << YAML::Key << name << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (const std::string& value : values) out << YAML::DoubleQuoted << value;
    out << YAML::EndSeq;
  };
  flag("listen", absl::StrCat("0.0.0.0:", kCoordinatorGrpcPort));
  flag("http-listen", absl::StrCat("0.0.0.0:", kCoordinatorHttpPort));
  list("job", {absl::StrCat(workload, "=", job.spec.replicas)});
  list("auxiliary-job", {absl::StrCat("sidecar=", job.spec.replicas)});
  flag("default-job", workload);
  flag("heartbeat-timeout", c.heartbeat_timeout);
  flag("register-timeout", c.register_timeout);
  flag("shutdown-barrier-timeout", c.shutdown_barrier_timeout);
  flag("auth-token-file", kTokenFile);
  if (c.recoverable) {
    // Workers restarted alone (RestartWorker) register again, with their sidecars.
    list("recoverable-job", {workload, "sidecar"});
  }
  if (c.state.volume != api::StateVolume::kNone) flag("state-dir", kCoordinatorStateDir);
  if (job.spec.tasks) {
    flag("task-retries", job.spec.tasks->task_retries);
    flag("task-liveness-timeout", job.spec.tasks->task_liveness_timeout);
  }
  if (tls != JobTls::kNone) {
    flag("tls-cert", SecretFile(kCoordinatorCertKey));
    flag("tls-key", SecretFile(kCoordinatorKeyKey));
    flag("tls-client-ca", SecretFile(kCaCertKey));
  }
  if (tls == JobTls::kCertManager) flag("tls-client-name", ClientIdentity(job));
  out << YAML::EndMap;
  json config_map = {{"apiVersion", "v1"},
                     {"kind", "ConfigMap"},
                     {"metadata", Metadata(job, CoordinatorName(job), Labels(job, "coordinator"))},
                     {"data", {{"coordinator.yaml", absl::StrCat(out.c_str(), "\n")}}}};
  StampSpecHash(SpecHash(job), &config_map);
  return config_map;
}

}  // namespace cohort::controller
