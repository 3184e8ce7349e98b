// libFuzzer target: the files of a coordinator's --state-dir (service/state). The input is
// one snapshot and one log: a 4-byte little-endian length, that many bytes of snapshot-1,
// and the rest as log-1. Whatever the bytes, StateStore::Open either refuses with an error
// or returns a state that a CoordinationService accepts or refuses with an error, and a task
// runtime scheduler that FinishRestore refuses or that then works: it never crashes, hangs or
// reads out of bounds.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "common/clock.h"
#include "runtime/scheduler/task_scheduler.h"
#include "service/core/coordination_service.h"
#include "service/state/state_store.h"
#include "spdlog/spdlog.h"
#include "tests/fuzz/fuzz_files.h"

namespace {

std::string* dir = nullptr;

using cohort::fuzz::WriteFile;

cohort::ServiceConfig Config() {
  cohort::ServiceConfig config;
  config.jobs.push_back({"worker", 2});
  config.jobs.push_back({"sidecar", 2, /*auxiliary=*/true});
  return config;
}

}  // namespace

void RemoveDir() {
  for (const char* name : {"/snapshot-1", "/log-1", "/LOCK"}) ::unlink((*dir + name).c_str());
  ::rmdir(dir->c_str());
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  char pattern[] = "/tmp/cohort-state-fuzz-XXXXXX";
  if (!mkdtemp(pattern)) std::abort();
  dir = new std::string(pattern);
  std::atexit(RemoveDir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  size_t snapshot = data[0] | (data[1] << 8) | (data[2] << 16) | (size_t{data[3]} << 24);
  data += 4;
  size -= 4;
  if (snapshot > size) snapshot = size;
  WriteFile(*dir + "/snapshot-1", data, snapshot);
  WriteFile(*dir + "/log-1", data + snapshot, size - snapshot);

  cohort::StateStoreOptions options;
  options.dir = *dir;
  std::optional<cohort::DurableState> restored;
  cohort::ManualClock clock;
  cohort::runtime::TaskScheduler scheduler(clock, {});
  auto store = cohort::StateStore::Open(options, Config(), &restored, &scheduler);
  if (store.ok() && restored) {
    auto service =
        cohort::CoordinationService::Create(Config(), &clock, nullptr, nullptr, &*restored);
    if (service.ok()) (*service)->CaptureState();
    // The task runtime's part: refused as inconsistent, or a scheduler that works.
    if (scheduler.FinishRestore().ok()) {
      scheduler.CaptureState();
      scheduler.SchedulerInfo();
      scheduler.TaskInfo();
      scheduler.Stats();
      scheduler.TakeEffects();
      scheduler.CheckLiveness();
    }
  }
  // Open may have cut a torn record off the log; the next input writes both files anew.
  return 0;
}
