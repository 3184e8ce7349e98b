#pragma once
// What a blocking call of the coordination core answered, for tests.

#include <functional>
#include <memory>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cohort::testing {

// Records the answer of a parked call. The callback shares its storage with this object, so a
// call that the service finishes after the test body has returned (the service stops in its
// destructor) still writes to live memory. count() shows that a call is finished exactly once.
template <typename T>
class CallbackResult {
 public:
  std::function<void(T)> Callback() const {
    return [state = state_](T result) {
      state->value = std::move(result);
      ++state->count;
    };
  }
  bool fired() const { return state_->count > 0; }
  int count() const { return state_->count; }
  // Throws std::bad_optional_access (and so fails the test) when the call has not finished.
  const T& value() const { return state_->value.value(); }

 private:
  struct State {
    std::optional<T> value;
    int count = 0;
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

using StatusResult = CallbackResult<absl::Status>;
template <typename V>
using ValueResult = CallbackResult<absl::StatusOr<V>>;

}  // namespace cohort::testing
