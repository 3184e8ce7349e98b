#include "sidecar/workload_watch.h"

#include <dirent.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace cohort {
namespace {

// The command line of a process, arguments joined by spaces; empty if it is gone or a kernel
// thread.
std::string CommandLine(const std::string& proc_dir, int pid) {
  std::ifstream in(absl::StrCat(proc_dir, "/", pid, "/cmdline"), std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string raw = ss.str();
  while (!raw.empty() && raw.back() == '\0') raw.pop_back();
  for (char& c : raw) {
    if (c == '\0') c = ' ';
  }
  return raw;
}

// A file descriptor that becomes readable when the process exits (Linux 5.3+); -1 on failure.
int PidFd(int pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

}  // namespace

WorkloadWatch::WorkloadWatch(Options options, ExitCallback on_exit)
    : options_(std::move(options)), on_exit_(std::move(on_exit)) {
  if (options_.mode == Mode::kProcess) pattern_ = std::regex(options_.process_pattern);
}

WorkloadWatch::~WorkloadWatch() { Stop(); }

bool WorkloadWatch::ParseMode(const std::string& text, Mode* mode) {
  if (text == "none") {
    *mode = Mode::kNone;
  } else if (text == "process") {
    *mode = Mode::kProcess;
  } else if (text == "file") {
    *mode = Mode::kFile;
  } else if (text == "http") {
    *mode = Mode::kHttp;
  } else {
    return false;
  }
  return true;
}

void WorkloadWatch::Start() {
  switch (options_.mode) {
    case Mode::kNone:
      return;
    case Mode::kProcess:
      thread_ = std::thread([this] { RunProcess(); });
      return;
    case Mode::kFile:
    case Mode::kHttp:
      thread_ = std::thread([this] { RunStaleness(); });
      return;
  }
}

void WorkloadWatch::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void WorkloadWatch::Ping() {
  absl::MutexLock lock(&mu_);
  last_ping_ = absl::Now();
}

std::string WorkloadWatch::Describe() const {
  absl::MutexLock lock(&mu_);
  return state_;
}

int WorkloadWatch::pid() const {
  absl::MutexLock lock(&mu_);
  return pid_;
}

bool WorkloadWatch::SleepUnlessStopped(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stopped_), d);
  return stopped_;
}

int WorkloadWatch::FindProcess(std::string* command) const {
  DIR* dir = opendir(options_.proc_dir.c_str());
  if (!dir) return -1;
  int self = getpid(), parent = getppid(), found = -1;
  while (dirent* entry = readdir(dir)) {
    int pid = 0;
    if (!absl::SimpleAtoi(entry->d_name, &pid) || pid == self || pid == parent) continue;
    std::string line = CommandLine(options_.proc_dir, pid);
    if (line.empty() || !std::regex_search(line, pattern_)) continue;
    // The lowest pid is the container's main process rather than one of its children.
    if (found == -1 || pid < found) {
      found = pid;
      *command = line;
    }
  }
  closedir(dir);
  return found;
}

void WorkloadWatch::RunProcess() {
  bool said_waiting = false;
  while (true) {
    std::string command;
    int pid = FindProcess(&command);
    if (pid < 0) {
      if (!said_waiting) {
        spdlog::info("waiting for a workload process matching /{}/ (is shareProcessNamespace on?)",
                     options_.process_pattern);
        absl::MutexLock lock(&mu_);
        state_ = absl::StrCat("waiting for a process matching /", options_.process_pattern, "/");
        said_waiting = true;
      }
      if (SleepUnlessStopped(options_.poll_interval)) return;
      continue;
    }
    said_waiting = false;
    int fd = PidFd(pid);
    if (fd < 0) continue;  // it exited between the scan and now: scan again
    spdlog::info("watching workload process {} ({})", pid, command);
    {
      absl::MutexLock lock(&mu_);
      state_ = absl::StrCat("watching process ", pid, " (", command, ")");
      pid_ = pid;
    }
    while (true) {
      pollfd p{fd, POLLIN, 0};
      int ready = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(options_.poll_interval)));
      if (ready > 0) break;
      if (SleepUnlessStopped(absl::ZeroDuration())) {
        close(fd);
        return;
      }
      // Found while still the container runtime's init, before it exec'd the workload: the
      // same process, under the workload's command line now.
      std::string now = CommandLine(options_.proc_dir, pid);
      if (!now.empty() && now != command) {
        command = now;
        spdlog::info("workload process {} now runs ({})", pid, command);
        absl::MutexLock lock(&mu_);
        state_ = absl::StrCat("watching process ", pid, " (", command, ")");
      }
    }
    close(fd);
    {
      absl::MutexLock lock(&mu_);
      pid_ = -1;
      if (stopped_) return;
      state_ = absl::StrCat("process ", pid, " exited");
    }
    on_exit_(absl::StrCat("workload process ", pid, " (", command, ") exited"));
  }
}

void WorkloadWatch::RunStaleness() {
  bool seen = false;
  absl::Time reported = absl::InfinitePast();  // what was last reported as stale
  const bool file = options_.mode == Mode::kFile;
  while (!SleepUnlessStopped(options_.poll_interval)) {
    absl::Time last = absl::InfinitePast();
    bool present = false;
    if (file) {
      struct stat st;
      present = stat(options_.liveness_file.c_str(), &st) == 0;
      if (present) last = absl::TimeFromTimespec(st.st_mtim);
    } else {
      absl::MutexLock lock(&mu_);
      last = last_ping_;
      present = last != absl::InfinitePast();
    }
    if (!seen) {
      // Back only when it shows a sign of life newer than what was reported.
      if (!present || last <= reported) continue;
      seen = true;
      absl::MutexLock lock(&mu_);
      state_ = file ? absl::StrCat("watching ", options_.liveness_file) : "receiving pings";
    }
    std::string what;
    if (file && !present) {
      what = absl::StrCat("the workload removed its liveness file ", options_.liveness_file);
    } else if (absl::Now() - last > options_.stale_after) {
      what = absl::StrCat("the workload's liveness ",
                          file ? absl::StrCat("file ", options_.liveness_file) : "pings",
                          " went stale: nothing for ", absl::FormatDuration(absl::Now() - last));
    }
    if (what.empty()) continue;
    {
      absl::MutexLock lock(&mu_);
      state_ = what;
    }
    on_exit_(what);
    seen = false;  // report again only after it comes back and goes away again
    reported = last;
    if (!file) {
      absl::MutexLock lock(&mu_);
      last_ping_ = absl::InfinitePast();
    }
  }
}

}  // namespace cohort
