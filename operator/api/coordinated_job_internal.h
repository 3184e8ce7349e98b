// What the readers of a CoordinatedJob (coordinated_job*.cc, failure_rules.cc, pytorch_spec.cc)
// share: lenient JSON readers and the parts of the spec each reads. Not an API.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "operator/api/coordinated_job.h"

namespace cohort::api::internal {

// The string at `key`; `fallback` when it is absent or not a string.
std::string Str(const json& o, const char* key, const std::string& fallback = "");

// A whole number at `key` within [min, max]: `fallback` when the key is absent or null,
// nullopt when it holds anything else (a fraction, a number out of range, a string). Never a
// conversion of a float or an out-of-range number (the fuzzer found 1e126 as a generation).
std::optional<int64_t> Whole(const json& o, const char* key, int64_t fallback,
                             int64_t min = std::numeric_limits<int64_t>::min(),
                             int64_t max = std::numeric_limits<int64_t>::max());

// Parts of a job's spec, each read from `spec` into `s` (whose framework, replicas and
// coordinator are read already): failurePolicy (failure_rules.cc), spec.pytorch and
// spec.elastic (pytorch_spec.cc). An error names the field.
absl::Status ParseFailurePolicy(const json& spec, JobSpec* s);
absl::Status ParsePytorch(const json& spec, JobSpec* s);
absl::Status ParseElastic(const json& spec, JobSpec* s);

// A job's status as the API server keeps it; restarting workers outside [0, replicas) are
// left out. Throws json::exception on a field of an unexpected type (ParseCoordinatedJob
// turns that into an error).
JobStatus ParseJobStatus(const json& status, int replicas);

}  // namespace cohort::api::internal
