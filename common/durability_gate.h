#pragma once
// DurabilityGate: holds an answer back until the changes it follows are on disk.

#include <functional>
#include <memory>
#include <utility>

#include "absl/functional/any_invocable.h"

namespace cohort {

// Whoever answers a client (a reply, a released wait, a watch event) after a change goes
// through the gate, so that nothing anyone was told can be lost by a crash of the machine:
// the coordinator's durable state (StateStore) runs `then` once every change it was told
// of before the call is synced to the disk, with one fdatasync for all the answers that
// wait together (group commit). Without durable state, or when it is already synced, `then`
// runs at once on the caller's thread. Calls run in the order they were made. The call may
// sync the disk and run answers given by other threads before it returns (the store's group
// commit lets a caller lead): a caller holds no lock that an answer takes.
class DurabilityGate {
 public:
  virtual ~DurabilityGate() = default;
  virtual void AfterDurable(absl::AnyInvocable<void() &&> then) { std::move(then)(); }
};

// `done` (a std::function taking a result) made to answer through `gate` (null: as it is).
// It may be called more than once (a connection's replies), each call through the gate.
template <typename Result>
std::function<void(Result)> AnswerAfterDurable(DurabilityGate* gate,
                                               std::function<void(Result)> done) {
  if (gate == nullptr) return done;
  auto shared = std::make_shared<std::function<void(Result)>>(std::move(done));
  return [gate, shared](Result result) {
    gate->AfterDurable(
        [shared, result = std::move(result)]() mutable { (*shared)(std::move(result)); });
  };
}

}  // namespace cohort
