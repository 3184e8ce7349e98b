#include "common/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

extern char** environ;

namespace cohort {
namespace {

// A file descriptor closed when it goes out of scope.
class SpawnFd {
 public:
  explicit SpawnFd(int fd = -1) : fd_(fd) {}
  ~SpawnFd() { Reset(); }
  SpawnFd(const SpawnFd&) = delete;
  SpawnFd& operator=(const SpawnFd&) = delete;
  int get() const { return fd_; }
  void Reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

// poll()'s timeout until `deadline`, rounded up so that it never wakes early.
int PollMillisUntil(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))));
}

// One read from `fd` into `result` (up to `limit` bytes kept; the rest read and dropped, so
// that the child never blocks on a full pipe). False at end of file.
bool ReadOutput(int fd, size_t limit, SubprocessResult* result) {
  char chunk[65536];
  const ssize_t n = read(fd, chunk, sizeof chunk);
  if (n < 0) return errno == EINTR || errno == EAGAIN;
  if (n == 0) return false;
  const size_t room = limit - std::min(limit, result->output.size());
  const size_t keep = std::min(room, static_cast<size_t>(n));
  result->output.append(chunk, keep);
  if (keep < static_cast<size_t>(n)) result->truncated = true;
  return true;
}

// Exited and not yet reaped (the pid stays its own until Reap).
bool HasExited(pid_t pid) {
  siginfo_t info{};
  return waitid(P_PID, pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid;
}

// The child and its process group; the child by its pid too, in case it left the group
// (setsid), since Reap waits for it.
void KillAll(pid_t pid) {
  kill(pid, SIGKILL);
  killpg(pid, SIGKILL);
}

void Reap(pid_t pid, int* status) {
  while (waitpid(pid, status, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace

std::string SubprocessResult::Describe() const {
  if (signal != 0) return absl::StrCat("killed by signal ", signal, " (", strsignal(signal), ")");
  return absl::StrCat("exit status ", exit_code);
}

std::string CommandLineText(const std::vector<std::string>& argv) {
  return absl::StrJoin(argv, " ", [](std::string* out, const std::string& arg) {
    if (!arg.empty() && arg.find_first_of(" \t\n'\"\\$`") == std::string::npos) {
      out->append(arg);
      return;
    }
    out->push_back('\'');
    for (char c : arg) {
      if (c == '\'') {
        out->append("'\\''");
      } else {
        out->push_back(c);
      }
    }
    out->push_back('\'');
  });
}

absl::StatusOr<SubprocessResult> RunSubprocess(const std::vector<std::string>& argv,
                                               absl::Duration timeout, size_t max_output_bytes) {
  if (argv.empty()) return absl::InvalidArgumentError("no command to run");
  const absl::Time deadline = absl::Now() + timeout;
  const std::string command = CommandLineText(argv);

  // Close-on-exec, so that children other threads start meanwhile do not hold the pipe open.
  int ends[2];
  if (pipe2(ends, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("cannot run `", command, "`: pipe: ", strerror(errno)));
  }
  SpawnFd read_end(ends[0]);
  SpawnFd write_end(ends[1]);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, write_end.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, write_end.get(), 2);

  // A process group of its own, to kill whatever it starts with it; and the signal mask and
  // dispositions of a fresh program, not the caller's (the sidecar blocks SIGTERM and SIGINT
  // in every thread for its own shutdown, and gRPC may ignore SIGPIPE).
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attributes, 0);
  sigset_t none, defaults;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attributes, &none);
  sigemptyset(&defaults);
  for (int sig = 1; sig < 32; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) sigaddset(&defaults, sig);
  }
  posix_spawnattr_setsigdefault(&attributes, &defaults);

  std::vector<std::string> args_copy = argv;
  std::vector<char*> args;
  for (std::string& arg : args_copy) args.push_back(arg.data());
  args.push_back(nullptr);
  pid_t pid = -1;
  const bool search = !absl::StrContains(argv[0], '/');
  const int spawned = search
                          ? posix_spawnp(&pid, args[0], &actions, &attributes, args.data(), environ)
                          : posix_spawn(&pid, args[0], &actions, &attributes, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (spawned != 0) {
    std::string message = absl::StrCat("cannot run `", command, "`: ", strerror(spawned));
    return spawned == ENOENT ? absl::NotFoundError(message) : absl::InternalError(message);
  }
  write_end.Reset();

  // Its exit, seen through a pidfd next to its output. Without one (a kernel before 5.3, or a
  // seccomp profile that refuses it) the exit is looked for after each wake-up instead.
  // (The system call itself: Debian 12's glibc declares pidfd_open without C linkage.)
  SpawnFd exit_fd(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
  SubprocessResult result;
  bool output_open = true;
  bool exited = false;
  int status = 0;
  while (output_open || !exited) {
    if (absl::Now() >= deadline) {
      // Exited, but a process that left its group still holds the output open: what came
      // is all there is.
      if (exited) break;
      KillAll(pid);
      Reap(pid, &status);
      return absl::DeadlineExceededError(absl::StrCat("`", command, "` still running after ",
                                                      absl::FormatDuration(timeout), "; killed"));
    }
    pollfd fds[2] = {{output_open ? read_end.get() : -1, POLLIN, 0},
                     {exited ? -1 : exit_fd.get(), POLLIN, 0}};
    int wait_ms = PollMillisUntil(deadline);
    if (exit_fd.get() < 0 && !exited) wait_ms = std::min(wait_ms, 10);
    if (poll(fds, 2, wait_ms) < 0 && errno != EINTR) {
      const std::string error = strerror(errno);
      KillAll(pid);
      Reap(pid, &status);
      return absl::InternalError(absl::StrCat("running `", command, "`: poll: ", error));
    }
    if (output_open && fds[0].revents != 0) {
      output_open = ReadOutput(read_end.get(), max_output_bytes, &result);
    }
    if (!exited && HasExited(pid)) {
      exited = true;
      // Still unreaped, so its pid (its group's id) cannot be reused: what it left running in
      // its group goes with it, and cannot hold the pipe open past its exit.
      killpg(pid, SIGKILL);
    }
  }
  Reap(pid, &status);
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
  }
  return result;
}

}  // namespace cohort
