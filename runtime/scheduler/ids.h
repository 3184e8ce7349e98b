#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cohort::runtime {

// Ids are sequential from 1 on the wire; 0 means "none".
using WorkerId = uint64_t;
using StoreId = uint64_t;
using ObjectId = uint64_t;
using OperationId = uint64_t;

// One argument of a task: an object id, or a value (a serialized cohort.runtime.v1.Obj).
struct TaskArg {
  ObjectId id = 0;
  std::string value;
};

// A task as the scheduler keeps it. Values travel opaque: the scheduler never reads them.
struct TaskSpec {
  std::string function_name;
  std::vector<TaskArg> args;
  std::vector<ObjectId> results;
};

}  // namespace cohort::runtime
