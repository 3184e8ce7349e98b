// libFuzzer target: a CoordinatedJob as the operator reads it from the API server (JSON
// bytes), decoded, planned and rendered into the objects the operator would create (in each
// TLS mode, cert-manager's Certificates included); the same
// bytes read as an observed pod. Whatever the bytes: a clear error or a job whose plan and
// children are built without a crash, an exception escaping, or an out-of-bounds read.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/time/clock.h"
#include "nlohmann/json.hpp"
#include "operator/api/coordinated_job.h"
#include "operator/controller/children.h"
#include "operator/controller/job_plan.h"
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
  }
  for (const auto& certificate : controller::CertManagerCertificates(*job, settings)) {
    certificate.dump();
  }
  for (const char* mode : {"none", "cert-manager"}) {
    settings.job_tls = mode;
    controller::Observed observed;
    observed.now = now;
    observed.fresh_token = "00";
    controller::PlanJob(*job, observed, settings);
  }
  api::StatusToJson(job->status).dump();
  return 0;
}
