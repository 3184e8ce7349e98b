// Linked into every gtest binary (cohort_test in tests/CMakeLists.txt): creates spdlog's
// registry and default logger before main, on the thread that will start every other one.
//
// The registry is a function-local static inside libspdlog.so, a Debian library compiled
// without ThreadSanitizer. Its one-time construction is ordered by a guard TSan cannot see,
// so when the first log line of a test came from a thread the code under test had started
// (a proxy's link thread) while a gRPC thread logged too, TSan reported the registry's
// construction as racing with the second thread's level check. Constructed here, it
// happens before any test starts a thread, which TSan does see.
#include <spdlog/spdlog.h>

namespace {

[[maybe_unused]] const bool kLoggingReady = [] {
  spdlog::default_logger_raw();
  return true;
}();

}  // namespace
