// libFuzzer target: a CoordinatedJob as the operator reads it from the API server (JSON
// bytes), decoded, planned and rendered into the objects the operator would create; the same
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
  const absl::Time now = absl::FromUnixSeconds(1'790'000'000);
  controller::CoordinatorConfigMap(*job).dump();
  controller::CoordinatorService(*job).dump();
  controller::WorkersService(*job).dump();
  controller::CoordinatorPod(*job, 0, now, settings).dump();
  for (int i = 0; i < job->spec.replicas && i < 4; ++i) {
    controller::WorkerPod(*job, i, 0, settings).dump();
  }
  controller::Observed observed;
  observed.now = now;
  observed.fresh_token = "00";
  controller::PlanJob(*job, observed, settings);
  api::StatusToJson(job->status).dump();
  return 0;
}
