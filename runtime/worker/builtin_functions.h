#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cohort/runtime/v1/types.pb.h"

namespace cohort::runtime {

// The C++ worker's functions (DESIGN.md: cohort.noop, cohort.add, cohort.sum,
// cohort.sleep_ms, cohort.fail). Each takes its arguments' values and returns its one
// result, or an error that fails the task with its message.
struct BuiltinFunction {
  std::string name;
  absl::StatusOr<v1::Obj> (*run)(const std::vector<v1::Obj>& args);
};

const std::vector<BuiltinFunction>& BuiltinFunctions();
const BuiltinFunction* FindBuiltin(const std::string& name);

}  // namespace cohort::runtime
