#pragma once
// Real processes for tests: spawn a binary with extra environment, read its output, signal
// it, and collect its exit status. Also a free loopback port and an HTTP GET through curl.

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <future>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"

extern char** environ;

namespace cohort::testing {

struct ProcessResult {
  int exit_code = -1;  // 128 + signal when killed
  std::string out;
  std::string err;
};

inline std::string ReadAll(int fd) {
  std::string data;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof buffer)) > 0) data.append(buffer, static_cast<size_t>(n));
  return data;
}

// A child process with stdout and stderr on pipes (or stderr to a file, for long runners
// whose logs nobody drains). Killed with SIGKILL when destroyed while still running.
class Subprocess {
 public:
  Subprocess(std::vector<std::string> argv, const std::map<std::string, std::string>& env = {},
             const std::string& stderr_file = "") {
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

  // Reads stdout until `n` lines arrived (or it closed).
  std::vector<std::string> ReadLines(size_t n) {
    std::vector<std::string> lines;
    std::string partial;
    char c;
    while (lines.size() < n && read(out_fd_, &c, 1) == 1) {
      if (c == '\n') {
        lines.push_back(partial);
        partial.clear();
      } else {
        partial += c;
      }
    }
    return lines;
  }

  ProcessResult Wait() {
    ProcessResult result;
    auto err = std::async(std::launch::async, [this] { return ReadAll(err_fd_); });
    result.out = ReadAll(out_fd_);
    result.err = err.get();
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    close(out_fd_);
    close(err_fd_);
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return result;
  }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
};

// A loopback port nobody listens on right now.
inline int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
            getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  close(fd);
  EXPECT_TRUE(ok) << "no free loopback port";
  return ok ? ntohs(addr.sin_port) : 0;
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
