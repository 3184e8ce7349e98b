// What coordinated_job.cc and coordinated_job_status.cc share (lenient JSON readers); not an API.
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

// A job's status as the API server keeps it; restarting workers outside [0, replicas) are
// left out. Throws json::exception on a field of an unexpected type (ParseCoordinatedJob
// turns that into an error).
JobStatus ParseJobStatus(const json& status, int replicas);

}  // namespace cohort::api::internal
