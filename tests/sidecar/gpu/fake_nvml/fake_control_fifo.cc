// Out-of-process controls for the fake NVML: when $FAKE_NVML_CONTROL_FIFO names a FIFO, a
// thread reads lines from it and applies them, so a test can inject faults into a
// cohort-sidecar process it started. Lines: "xid INDEX CODE [ACTION]" (ACTION, if given, is
// the GPU's recovery action from then on, set before the XID is queued), "dbe INDEX COUNT",
// "lost INDEX", "sm INDEX FRACTION" (the GPU's SM activity from then on, 0..1; negative: no
// GPM).

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

#include "tests/sidecar/gpu/fake_nvml/fake_nvml_control.h"

namespace fake_nvml {
namespace {

void Apply(const std::string& line) {
  std::istringstream in(line);
  std::string verb;
  unsigned int index = 0;
  in >> verb >> index;
  if (verb == "sm") {
    double activity = 0;
    if (in >> activity) fakeNvmlSetSmActivity(index, activity);
    return;
  }
  unsigned long long value = 0;
  in >> value;
  if (verb == "xid") {
    unsigned int action = 0;
    if (in >> action) fakeNvmlSetRecoveryAction(index, action);
    fakeNvmlInjectXid(index, value);
  } else if (verb == "dbe") {
    fakeNvmlInjectDoubleBitEcc(index, value == 0 ? 1 : value);
  } else if (verb == "lost") {
    fakeNvmlSetGpuLost(index);
  }
}

void ReadControls(const std::string& path) {
  // Opened for writing too, so the FIFO never reports end-of-file between writers.
  int fd = open(path.c_str(), O_RDWR);
  if (fd < 0) return;
  std::string pending;
  char buffer[256];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof buffer)) > 0) {
    pending.append(buffer, static_cast<size_t>(n));
    size_t end;
    while ((end = pending.find('\n')) != std::string::npos) {
      Apply(pending.substr(0, end));
      pending.erase(0, end + 1);
    }
  }
  close(fd);
}

}  // namespace

// Called from every nvmlInit; starts the reader once per process.
void StartControlFifo() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* path = std::getenv("FAKE_NVML_CONTROL_FIFO");
    if (path == nullptr || *path == '\0') return;
    mkfifo(path, 0600);  // may exist already
    std::thread(ReadControls, std::string(path)).detach();
  });
}

}  // namespace fake_nvml
