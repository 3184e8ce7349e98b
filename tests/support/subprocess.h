#pragma once
// Real processes for tests: spawn a binary with extra environment, read its output, signal
// it, and collect its exit status. Also a free loopback port and an HTTP GET through curl.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/support/free_port.h"

extern char** environ;

namespace cohort::testing {

struct ProcessResult {
  int exit_code = -1;  // 128 + signal when killed
  std::string out;
  std::string err;
};

// A child process with stdout and stderr on pipes (or stderr to a file, for long runners
// whose logs nobody drains). Killed with SIGKILL when destroyed while still running.
class Subprocess {
 public:
  Subprocess(std::vector<std::string> argv, const std::map<std::string, std::string>& env = {},
             const std::string& stderr_file = "")
      : name_(argv.empty() ? "" : argv[0]) {
    std::vector<std::string> environment;
    for (char** e = environ; *e; ++e) {
      std::string entry(*e);
      if (!env.count(entry.substr(0, entry.find('=')))) environment.push_back(entry);
    }
    for (const auto& [key, value] : env) environment.push_back(key + "=" + value);
    std::vector<char*> args, envp;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    for (std::string& e : environment) envp.push_back(e.data());
    envp.push_back(nullptr);
    int out[2], err[2];
    EXPECT_EQ(pipe(out), 0);
    EXPECT_EQ(pipe(err), 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    if (stderr_file.empty()) {
      posix_spawn_file_actions_adddup2(&actions, err[1], 2);
    } else {
      posix_spawn_file_actions_addopen(&actions, 2, stderr_file.c_str(),
                                       O_WRONLY | O_CREAT | O_TRUNC, 0644);
    }
    posix_spawn_file_actions_addclose(&actions, out[0]);
    posix_spawn_file_actions_addclose(&actions, err[0]);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    int rc = posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), envp.data());
    EXPECT_EQ(rc, 0) << "cannot start " << args[0];
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    close(err[1]);
    out_fd_ = out[0];
    err_fd_ = err[0];
  }
  ~Subprocess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      Wait();
    }
  }
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  void Signal(int sig) { kill(pid_, sig); }

  // Reads stdout until `n` lines arrived, it closed, or `timeout` passed; a line that never
  // comes fails the caller's comparison instead of hanging the test.
  std::vector<std::string> ReadLines(size_t n, absl::Duration timeout = absl::Seconds(20)) {
    const absl::Time deadline = absl::Now() + timeout;
    std::vector<std::string> lines;
    while (lines.size() < n) {
      const size_t end = out_.find('\n');
      if (end != std::string::npos) {
        lines.push_back(out_.substr(0, end));
        out_.erase(0, end + 1);
      } else if (!ReadWithin(out_fd_, &out_, deadline)) {
        break;
      }
    }
    return lines;
  }

  // Reads stderr until it contains `text`; false when it closed or `timeout` passed first.
  // What was read stays part of Wait()'s `err`.
  bool WaitForStderr(const std::string& text, absl::Duration timeout = absl::Seconds(20)) {
    const absl::Time deadline = absl::Now() + timeout;
    while (err_.find(text) == std::string::npos) {
      if (!ReadWithin(err_fd_, &err_, deadline)) return err_.find(text) != std::string::npos;
    }
    return true;
  }

  // Collects the rest of the output and the exit status. A process still running after
  // `timeout` is killed (exit_code 137) and the test fails, rather than hangs.
  ProcessResult Wait(absl::Duration timeout = absl::InfiniteDuration()) {
    absl::Time deadline = absl::Now() + timeout;
    bool out_open = true, err_open = true;
    while (out_open || err_open) {
      if (absl::Now() >= deadline) {
        ADD_FAILURE() << name_ << " still running after " << timeout << "; killed";
        kill(pid_, SIGKILL);
        deadline = absl::InfiniteFuture();
      }
      pollfd fds[2] = {{out_open ? out_fd_ : -1, POLLIN, 0}, {err_open ? err_fd_ : -1, POLLIN, 0}};
      if (poll(fds, 2, PollMillis(deadline)) < 0 && errno != EINTR) break;
      if (fds[0].revents != 0) out_open = ReadSome(out_fd_, &out_);
      if (fds[1].revents != 0) err_open = ReadSome(err_fd_, &err_);
    }
    ProcessResult result;
    result.out = std::move(out_);
    result.err = std::move(err_);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    close(out_fd_);
    close(err_fd_);
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return result;
  }

 private:
  // poll()'s timeout for `deadline`: -1 for none, rounded up so that it is never early.
  static int PollMillis(absl::Time deadline) {
    if (deadline == absl::InfiniteFuture()) return -1;
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return 0;
    return static_cast<int>(absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))));
  }
  // One read into `buffer`; false at end of file (or on an error).
  static bool ReadSome(int fd, std::string* buffer) {
    char chunk[4096];
    const ssize_t n = read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) return true;
    if (n <= 0) return false;
    buffer->append(chunk, static_cast<size_t>(n));
    return true;
  }
  // Waits for `fd` to have data, then reads it; false at end of file or after `deadline`.
  static bool ReadWithin(int fd, std::string* buffer, absl::Time deadline) {
    while (true) {
      pollfd p = {fd, POLLIN, 0};
      const int ready = poll(&p, 1, PollMillis(deadline));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) return false;
      return ReadSome(fd, buffer);
    }
  }

  std::string name_;
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  // Read from the pipes and not handed out yet.
  std::string out_;
  std::string err_;
};

// A loopback port nothing listens on, for servers that cannot bind port 0 (the rule is in
// free_port.h); a test without one fails.
// The threads of process `pid` that do not block `sig` (from /proc/PID/task/*/status). A
// daemon that takes SIGTERM with sigwait must block it in every thread: one thread that
// does not (started before the mask was set) takes the signal's default action, and the
// process dies of it instead of shutting down. Empty when every thread blocks it. The thread
// inside sigwait counts as blocking it: the kernel shows the signal unblocked while it waits.
inline std::vector<std::string> ThreadsNotBlocking(pid_t pid, int sig) {
  std::vector<std::string> open;
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    std::ifstream status(entry.path() / "status");
    std::string line, name;
    unsigned long long blocked = 0;
    bool found = false;
    while (std::getline(status, line)) {
      if (line.rfind("Name:", 0) == 0) name = line.substr(line.find_first_not_of(" \t", 5));
      if (line.rfind("SigBlk:", 0) == 0) {
        blocked = std::stoull(line.substr(7), nullptr, 16);
        found = true;
      }
    }
    std::string waiting;
    std::ifstream(entry.path() / "wchan") >> waiting;
    const bool in_sigwait = waiting.find("sigtimedwait") != std::string::npos;
    // A thread that ended between the listing and the read has nothing left to say.
    if (found && !in_sigwait && (blocked & (1ULL << (sig - 1))) == 0) {
      open.push_back(entry.path().filename().string() + " (" + name + ")");
    }
  }
  EXPECT_FALSE(error) << "cannot list " << dir << ": " << error.message();
  return open;
}

inline int FreePort() {
  const int port = cohort::testing::PickFreePort();
  if (port == 0) ADD_FAILURE() << "no free loopback port below the ephemeral range";
  return port;
}

// Output of a shell command; `status` gets its exit code.
inline std::string RunShell(const std::string& command, int* status) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  int rc = pclose(pipe);
  *status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  return out;
}

// The body of GET `url`, and its HTTP status in `code` (0 when nothing answered).
inline std::string HttpGet(const std::string& url, int* code) {
  int status = 0;
  std::string out = RunShell("curl -s -m 5 -w '\\n%{http_code}' '" + url + "'", &status);
  size_t cut = out.rfind('\n');
  *code = cut == std::string::npos ? 0 : std::atoi(out.c_str() + cut + 1);
  return cut == std::string::npos ? "" : out.substr(0, cut);
}

}  // namespace cohort::testing
