// libFuzzer target: a CoordinatedJob as the operator reads it from the API server (JSON
// bytes), decoded, planned and rendered into the objects the operator would create (in each
// TLS mode, cert-manager's Certificates included; its PodGroup, its Kueue Workload); the same
// bytes read as an observed pod, and as a Kueue Workload and ResourceFlavor (its admission
// read, its conditions set and cleared, and the job planned with it). Whatever the bytes: a clear
// error or a job whose plan and children are built without a crash, an exception escaping, or an
// out-of-bounds read.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "absl/time/clock.h"
#include "nlohmann/json.hpp"
#include "operator/api/coordinated_job.h"
#include "operator/plan/children.h"
#include "operator/plan/job_plan.h"
#include "operator/plan/kueue.h"
#include "spdlog/spdlog.h"

namespace {
namespace api = cohort::api;
namespace controller = cohort::controller;
}  // namespace

// The parsers log what they refuse; a million lines would only slow the fuzzer down.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json object = nlohmann::json::parse(data, data + size, nullptr,
                                                /*allow_exceptions=*/false);
  if (object.is_discarded()) return 0;
  controller::ObservePod(object);
  // The bytes as a Workload (and as the flavor its admission names).
  std::map<std::string, nlohmann::json> flavors = {{"default", object}};
  const absl::Time then = absl::FromUnixSeconds(1'790'000'000);
  controller::kueue::ReadAdmission(object, flavors);
  {
    nlohmann::json workload = object;
    controller::kueue::IsTrue(workload, "Admitted");
    controller::kueue::ClearAdmission(&workload, then);
    controller::kueue::SetCondition(&workload, "PodsReady", true, "Started", "", then);
  }
  auto job = api::ParseCoordinatedJob(object);
  if (!job.ok()) return 0;
  controller::OperatorSettings settings;
  settings.job_tls_issuer = "ClusterIssuer/cohort-ca";
  const absl::Time now = absl::FromUnixSeconds(1'790'000'000);
  controller::CoordinatorService(*job).dump();
  controller::WorkersService(*job).dump();
  // Every TLS mode's children: plain, the operator's certificates, cert-manager's.
  for (auto tls : {controller::JobTls::kNone, controller::JobTls::kOperator,
                   controller::JobTls::kCertManager}) {
    controller::CoordinatorConfigMap(*job, tls).dump();
    controller::CoordinatorPod(*job, 0, now, settings, tls).dump();
    for (int i = 0; i < job->spec.replicas && i < 4; ++i) {
      controller::WorkerPod(*job, i, 0, settings, tls).dump();
    }
    // The sidecar's GPUs as each access mode gives them (the template's limits and claims).
    controller::OperatorSettings visible = settings;
    visible.sidecar_gpu_access = "visible-devices";
    controller::WorkerPod(*job, 0, 0, visible, tls).dump();
  }
  for (const auto& certificate : controller::CertManagerCertificates(*job, settings)) {
    certificate.dump();
  }
  if (auto group = controller::PodGroup(*job)) group->dump();
  nlohmann::json desired = controller::kueue::DesiredWorkload(*job, settings);
  controller::kueue::Equivalent(object, desired);
  for (const char* mode : {"none", "cert-manager"}) {
    settings.job_tls = mode;
    controller::Observed observed;
    observed.now = now;
    observed.fresh_token = "00";
    controller::PlanJob(*job, observed, settings);
    // Queued with Kueue: with no Workload yet, with the one it would make, and with the bytes
    // themselves as its Workload.
    const nlohmann::json* workloads[] = {nullptr, &desired, &object};
    for (const nlohmann::json* workload : workloads) {
      controller::KueueObserved kq;
      if (workload) kq.workload = *workload;
      kq.flavors = flavors;
      observed.kueue = kq;
      controller::PlanJob(*job, observed, settings);
    }
  }
  api::StatusToJson(job->status).dump();
  return 0;
}
