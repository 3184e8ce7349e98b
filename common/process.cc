#include "common/process.h"

#include <pthread.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace cohort {

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

StopSignals::StopSignals(std::initializer_list<int> extra) {
  sigemptyset(&set_);
  sigaddset(&set_, SIGTERM);
  sigaddset(&set_, SIGINT);
  for (int sig : extra) sigaddset(&set_, sig);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
}

int StopSignals::Wait() const {
  int sig = 0;
  sigwait(&set_, &sig);
  return sig;
}

std::string StopSignals::Name(int sig) {
  switch (sig) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGUSR1:
      return "SIGUSR1";
    default:
      return absl::StrCat("signal ", sig);
  }
}

}  // namespace cohort
