#pragma once

namespace cohort {

// Makes a crash explain itself: on SIGSEGV, SIGABRT (a failed check, an uncaught exception),
// SIGBUS, SIGILL, SIGFPE or SIGTRAP the process writes the signal and a symbolized stack to
// stderr, then dies of the same signal, so its exit status is unchanged. SIGTERM keeps its
// default: programs handle it themselves or stop quietly. Call first thing in main.
void InstallCrashReport(const char* argv0);

// Turns off abseil's lock-order (deadlock) detection, which Debian's abseil, built without
// NDEBUG, runs on every absl::Mutex lock: a global graph under a global lock, a few percent of a
// busy server's time. The daemons call it after InstallCrashReport; tests keep the detection.
void DisableMutexDeadlockDetection();

}  // namespace cohort
