#pragma once

#include <string>

#include "absl/status/status.h"

namespace cohort {

// Sets up the process's default spdlog logger on stderr. format: "text" or "json" (one
// object per line: time, level, logger, msg); level: trace, debug, info, warn, error.
absl::Status SetUpLogging(const std::string& name, const std::string& format,
                          const std::string& level);

// "1 task", "2 tasks": a count with its noun, for messages (the plural adds an s).
inline std::string Plural(long long n, const std::string& noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

}  // namespace cohort
