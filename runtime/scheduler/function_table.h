// The task scheduler's function table: which workers run each named function and how many
// values it returns; and the exports (function implementations and reusable variables), which
// every worker that runs tasks imports in the order they were exported. Not thread-safe: the
// scheduler holds its lock around every call.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/status/status.h"
#include "runtime/scheduler/effects.h"
#include "runtime/scheduler/ids.h"
#include "runtime/scheduler/scheduler_limits.h"
#include "runtime/scheduler/scheduler_state.h"

namespace cohort::runtime {

class FunctionTable {
 public:
  enum class ExportKind { kFunction, kReusableVariable };

  explicit FunctionTable(const SchedulerLimits& limits) : limits_(limits) {}

  // Null when no worker registered `name`.
  const Function* Find(const std::string& name) const;
  const std::map<std::string, Function>& functions() const { return functions_; }
  // Refuses, changing nothing, a new name past --max-functions, and a known one with another
  // number of return values than other workers registered it with.
  absl::Status Register(const std::string& name, WorkerId worker, uint64_t num_return_vals);
  // `worker` runs nothing any more: it left or was lost.
  void DropWorker(WorkerId worker);

  // Refuses, changing nothing, what would pass --max-export-bytes.
  absl::Status Export(ExportKind kind, std::string item);
  const std::vector<std::string>& exported_functions() const { return exported_functions_; }
  const std::vector<std::string>& exported_variables() const { return exported_variables_; }
  // Records the imports `worker` was not sent yet, in order, and counts them sent.
  void SendExports(Worker& worker, std::vector<Effect>* effects) const;

  // Forgets every function and export: the workers that ran them are gone.
  void Clear();

  // Durability (SchedulerChanges). TakeChanges adds to `changes` (null: there is no journal)
  // what changed since it was last called, and forgets that.
  void TakeChanges(SchedulerChanges* changes);
  void Apply(const SchedulerChanges& changes);
  void Capture(SchedulerChanges* state) const;

 private:
  size_t ExportedBytes() const;

  const SchedulerLimits limits_;
  std::map<std::string, Function> functions_;
  std::vector<std::string> exported_functions_;
  std::vector<std::string> exported_variables_;
  // Since TakeChanges: the functions changed (by name), whether every export was dropped, and
  // the exports from these indexes on.
  absl::btree_set<std::string> changed_functions_;
  bool exports_cleared_ = false;
  size_t journaled_functions_ = 0;
  size_t journaled_variables_ = 0;
};

}  // namespace cohort::runtime
