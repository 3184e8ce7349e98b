#pragma once

#include <string>
#include <variant>

#include "runtime/scheduler/ids.h"

namespace cohort::runtime {

// What the scheduler asks of workers and stores. The state machine only records these; the
// transport carries them out in order per destination and reports what failed.

// WorkerService.ExecuteTask. Object arguments are given as canonical ids, all present at the
// worker's store.
struct ExecuteTaskEffect {
  WorkerId worker = 0;
  std::string worker_address;
  OperationId operation = 0;
  TaskSpec task;
};

// ObjStore.StartDelivery on `to`: pull `object` from the store at `from_address`.
struct DeliverEffect {
  StoreId to = 0;
  std::string to_address;
  std::string from_address;
  ObjectId object = 0;
  int attempt = 0;  // 0 first; the transport waits a little before a repeated delivery
};

// ObjStore.NotifyAlias: `alias` reads as `canonical` at this store.
struct NotifyAliasEffect {
  StoreId store = 0;
  std::string store_address;
  ObjectId alias = 0;
  ObjectId canonical = 0;
};

// ObjStore.DeallocateObject.
struct DeallocateEffect {
  StoreId store = 0;
  std::string store_address;
  ObjectId canonical = 0;
};

// cohort's ObjStore.PutError: the store holds `object` as an error value (reading it fails
// with `message`) and reports it ready, as for any object it receives.
struct PlaceErrorEffect {
  StoreId store = 0;
  std::string store_address;
  ObjectId object = 0;
  std::string function_name;
  OperationId operation = 0;
  std::string message;
};

// WorkerService.ImportFunction.
struct ImportFunctionEffect {
  WorkerId worker = 0;
  std::string worker_address;
  std::string implementation;
};

// WorkerService.ImportReusableVariable (the message, serialized).
struct ImportReusableVariableEffect {
  WorkerId worker = 0;
  std::string worker_address;
  std::string reusable_variable;
};

// WorkerService.Die.
struct DieEffect {
  WorkerId worker = 0;
  std::string worker_address;
};

using Effect =
    std::variant<ExecuteTaskEffect, DeliverEffect, NotifyAliasEffect, DeallocateEffect,
                 PlaceErrorEffect, ImportFunctionEffect, ImportReusableVariableEffect, DieEffect>;

}  // namespace cohort::runtime
