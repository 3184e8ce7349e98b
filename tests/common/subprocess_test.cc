#include "common/subprocess.h"

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "tests/support/eventually.h"

namespace cohort::subprocess_test {
namespace {

constexpr size_t kNoCap = 1 << 20;

// The calling process has no child left, running or unreaped.
bool NoChildLeft() {
  int status = 0;
  return waitpid(-1, &status, WNOHANG) == -1 && errno == ECHILD;
}

// Process `pid` is gone or a zombie (an orphan's zombie waits for whoever reaps orphans).
bool GoneOrZombie(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (stat.empty()) return true;
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z';
}

TEST(SubprocessTest, CapturesStdoutAndStderrTogether) {
  auto result =
      RunSubprocess({"/bin/sh", "-c", "echo out; echo err >&2"}, absl::Seconds(20), kNoCap);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->output, "out\nerr\n");
  EXPECT_TRUE(result->Succeeded());
  EXPECT_FALSE(result->truncated);
  EXPECT_TRUE(NoChildLeft());
}

TEST(SubprocessTest, LooksUpANameWithoutSlashOnPath) {
  auto result = RunSubprocess({"sh", "-c", "echo found"}, absl::Seconds(20), kNoCap);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->output, "found\n");
}

TEST(SubprocessTest, ReportsTheExitStatus) {
  auto result = RunSubprocess({"/bin/sh", "-c", "exit 3"}, absl::Seconds(20), kNoCap);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 3);
  EXPECT_EQ(result->signal, 0);
  EXPECT_FALSE(result->Succeeded());
  EXPECT_EQ(result->Describe(), "exit status 3");
}

TEST(SubprocessTest, ReportsTheSignalThatEndedIt) {
  auto result = RunSubprocess({"/bin/sh", "-c", "kill -KILL $$"}, absl::Seconds(20), kNoCap);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->signal, SIGKILL);
  EXPECT_FALSE(result->Succeeded());
  EXPECT_TRUE(absl::StartsWith(result->Describe(), "killed by signal 9")) << result->Describe();
}

TEST(SubprocessTest, KillsAndReapsAProgramStillRunningAtTheTimeout) {
  auto result = RunSubprocess({"/bin/sleep", "30"}, absl::Milliseconds(200), kNoCap);
  ASSERT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded) << result.status();
  EXPECT_TRUE(absl::StrContains(result.status().message(), "/bin/sleep 30")) << result.status();
  EXPECT_TRUE(NoChildLeft());
}

TEST(SubprocessTest, KillsWhatItLeftRunningInItsGroupWhenItExits) {
  // The background sleep holds the output open: the call returns only because it is killed.
  auto result = RunSubprocess({"/bin/sh", "-c", "sleep 600 & echo $!"}, absl::Seconds(60), kNoCap);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->Succeeded());
  int leftover = 0;
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(result->output), &leftover))
      << result->output;
  EXPECT_TRUE(cohort::testing::Eventually([&] { return GoneOrZombie(leftover); }));
  EXPECT_TRUE(NoChildLeft());
}

TEST(SubprocessTest, KeepsAtMostTheLimitAndStillReadsToTheEnd) {
  // A million bytes through a 64 KiB pipe: the child finishes only if the rest is drained.
  auto result = RunSubprocess({"/bin/sh", "-c", "head -c 1000000 /dev/zero; echo done >&2; exit 4"},
                              absl::Seconds(20), 1000);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->output.size(), 1000u);
  EXPECT_TRUE(result->truncated);
  EXPECT_EQ(result->exit_code, 4);
}

TEST(SubprocessTest, GivesTheProgramAnEmptyStdin) {
  auto result = RunSubprocess({"/bin/cat"}, absl::Seconds(20), kNoCap);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->Succeeded());
  EXPECT_EQ(result->output, "");
}

TEST(SubprocessTest, StartsTheProgramWithNoSignalBlocked) {
  // As the sidecar's threads block SIGTERM and SIGINT for their own shutdown.
  sigset_t blocked, previous;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGTERM);
  sigaddset(&blocked, SIGINT);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &blocked, &previous), 0);
  auto result =
      RunSubprocess({"/bin/grep", "SigBlk", "/proc/self/status"}, absl::Seconds(20), kNoCap);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->output, "SigBlk:\t0000000000000000\n");
}

TEST(SubprocessTest, AMissingProgramIsNotFound) {
  auto result = RunSubprocess({"/nonexistent/cohort-no-such-tool"}, absl::Seconds(20), kNoCap);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kNotFound) << result.status();
  EXPECT_TRUE(NoChildLeft());
}

TEST(SubprocessTest, AnEmptyCommandIsInvalid) {
  EXPECT_EQ(RunSubprocess({}, absl::Seconds(1), kNoCap).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SubprocessTest, CommandLineTextQuotesWhatAShellWouldSplit) {
  EXPECT_EQ(CommandLineText({"/usr/bin/gdb", "-batch", "-ex", "thread apply all bt"}),
            "/usr/bin/gdb -batch -ex 'thread apply all bt'");
  EXPECT_EQ(CommandLineText({"echo", "it's", ""}), "echo 'it'\\''s' ''");
}

}  // namespace
}  // namespace cohort::subprocess_test
