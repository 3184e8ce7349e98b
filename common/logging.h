#pragma once

#include <string>

#include "absl/status/status.h"

namespace cohort {

// Sets up the process's default spdlog logger on stderr. format: "text" or "json" (one
// object per line: time, level, logger, msg); level: trace, debug, info, warn, error.
absl::Status SetUpLogging(const std::string& name, const std::string& format,
                          const std::string& level);

}  // namespace cohort
