// The function table and the exports: what workers can run and the code they are sent.
#include "runtime/scheduler/function_table.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cohort::runtime {

const Function* FunctionTable::Find(const std::string& name) const {
  auto it = functions_.find(name);
  return it == functions_.end() ? nullptr : &it->second;
}

absl::Status FunctionTable::Register(const std::string& name, WorkerId worker,
                                     uint64_t num_return_vals) {
  auto it = functions_.find(name);
  if (it == functions_.end()) {
    if (absl::Status s =
            Fits(functions_.size(), 1, limits_.max_functions, "functions", "--max-functions");
        !s.ok()) {
      return s;
    }
  }
  if (it != functions_.end() && it->second.num_return_vals != num_return_vals) {
    return absl::InvalidArgumentError(absl::StrCat(
        "function '", name, "' returns ", it->second.num_return_vals,
        " values where other workers registered it; worker ", worker, " says ", num_return_vals));
  }
  changed_functions_.insert(name);
  Function& function = functions_[name];
  function.num_return_vals = num_return_vals;
  function.workers.insert(worker);
  return absl::OkStatus();
}

void FunctionTable::DropWorker(WorkerId worker) {
  for (auto& [name, function] : functions_) {
    if (function.workers.erase(worker) > 0) changed_functions_.insert(name);
  }
}

absl::Status FunctionTable::Export(ExportKind kind, std::string item) {
  if (absl::Status s =
          Fits(ExportedBytes(), item.size(), limits_.max_export_bytes,
               "bytes of exported functions and reusable variables", "--max-export-bytes");
      !s.ok()) {
    return s;
  }
  (kind == ExportKind::kFunction ? exported_functions_ : exported_variables_)
      .push_back(std::move(item));
  return absl::OkStatus();
}

size_t FunctionTable::ExportedBytes() const {
  size_t bytes = 0;
  for (const std::string& f : exported_functions_) bytes += f.size();
  for (const std::string& v : exported_variables_) bytes += v.size();
  return bytes;
}

void FunctionTable::SendExports(Worker& worker, std::vector<Effect>* effects) const {
  for (; worker.functions_sent < exported_functions_.size(); ++worker.functions_sent) {
    effects->push_back(ImportFunctionEffect{worker.id, worker.address,
                                            exported_functions_[worker.functions_sent]});
  }
  for (; worker.variables_sent < exported_variables_.size(); ++worker.variables_sent) {
    effects->push_back(ImportReusableVariableEffect{worker.id, worker.address,
                                                    exported_variables_[worker.variables_sent]});
  }
}

void FunctionTable::Clear() {
  for (const auto& [name, function] : functions_) changed_functions_.insert(name);
  functions_.clear();
  exported_functions_.clear();
  exported_variables_.clear();
  exports_cleared_ = true;
  journaled_functions_ = 0;
  journaled_variables_ = 0;
}

void FunctionTable::TakeChanges(SchedulerChanges* changes) {
  if (changes != nullptr) {
    for (const std::string& name : changed_functions_) {
      auto it = functions_.find(name);
      changes->functions.emplace_back(
          name, it == functions_.end() ? std::nullopt : std::optional<Function>(it->second));
    }
    changes->exports_cleared = exports_cleared_;
    for (size_t i = journaled_functions_; i < exported_functions_.size(); ++i) {
      changes->exported_functions.emplace_back(i, exported_functions_[i]);
    }
    for (size_t i = journaled_variables_; i < exported_variables_.size(); ++i) {
      changes->exported_variables.emplace_back(i, exported_variables_[i]);
    }
  }
  changed_functions_.clear();
  exports_cleared_ = false;
  journaled_functions_ = exported_functions_.size();
  journaled_variables_ = exported_variables_.size();
}

void FunctionTable::Apply(const SchedulerChanges& changes) {
  for (const auto& [name, function] : changes.functions) {
    if (function.has_value()) {
      functions_[name] = *function;
    } else {
      functions_.erase(name);
    }
  }
  if (changes.exports_cleared) {
    exported_functions_.clear();
    exported_variables_.clear();
  }
  for (const auto& [index, implementation] : changes.exported_functions) {
    if (exported_functions_.size() <= index) exported_functions_.resize(index + 1);
    exported_functions_[index] = implementation;
  }
  for (const auto& [index, variable] : changes.exported_variables) {
    if (exported_variables_.size() <= index) exported_variables_.resize(index + 1);
    exported_variables_[index] = variable;
  }
}

void FunctionTable::Capture(SchedulerChanges* state) const {
  for (const auto& [name, function] : functions_) state->functions.emplace_back(name, function);
  state->exports_cleared = true;
  for (size_t i = 0; i < exported_functions_.size(); ++i) {
    state->exported_functions.emplace_back(i, exported_functions_[i]);
  }
  for (size_t i = 0; i < exported_variables_.size(); ++i) {
    state->exported_variables.emplace_back(i, exported_variables_[i]);
  }
}

}  // namespace cohort::runtime
