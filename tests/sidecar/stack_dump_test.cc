#include "sidecar/stack_dump.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/support/eventually.h"
#include "tests/support/subprocess.h"

namespace cohort::stack_dump_test {
namespace {

constexpr char kPySpySample[] =
    "Process 123: python3 train.py\n"
    "Python v3.11.2 (/usr/bin/python3.11)\n"
    "\n"
    "Thread 123 (idle): \"MainThread\"\n"
    "    wait (threading.py:320)\n"
    "    barrier (cohort/api.py:88)\n"
    "    step (train.py:40)\n"
    "    <module> (train.py:60)\n"
    "Thread 131 (idle): \"Thread-1 (heartbeat)\"\n"
    "    _sleep (cohort/_client.py:210)\n"
    "    run (threading.py:975)\n"
    "    _bootstrap_inner (threading.py:1038)\n"
    "    _bootstrap (threading.py:995)\n";

constexpr char kGdbSample[] =
    "[New LWP 124]\n"
    "[Thread debugging using libthread_db enabled]\n"
    "Using host libthread_db library \"/lib/x86_64-linux-gnu/libthread_db.so.1\".\n"
    "0x00007f3c8e0e5c7a in clock_nanosleep () from /lib/x86_64-linux-gnu/libc.so.6\n"
    "\n"
    "Thread 2 (Thread 0x7f3c8d9ff6c0 (LWP 124) \"worker\"):\n"
    "#0  0x00007f3c8e08af16 in __futex_abstimed_wait_common () from /lib/libc.so.6\n"
    "#1  0x00007f3c8e08d8bc in pthread_cond_wait () from /lib/libc.so.6\n"
    "#2  0x000055d1c2a3b1e0 in Queue::Pop () at queue.cc:12\n"
    "#3  0x000055d1c2a3b2f0 in Worker::Run () at worker.cc:40\n"
    "\n"
    "Thread 1 (Thread 0x7f3c8e3f2740 (LWP 123) \"trainer\"):\n"
    "#0  0x00007f3c8e0e5c7a in clock_nanosleep () from /lib/libc.so.6\n"
    "#1  main () at trainer.cc:9\n"
    "[Inferior 1 (process 123) detached]\n";

// A directory of fake stack tools: shell scripts that the real spawning path runs.
class StackDumpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "/stack-tools-XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    options_.tools_search_path = {dir_};
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A tool that runs `body` (a shell script's lines).
  void Tool(const std::string& name, const std::string& body) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    ASSERT_EQ(chmod(path.c_str(), 0755), 0);
  }
  void ToolThatPrints(const std::string& name) {
    Tool(name, absl::StrCat("echo \"fake ", name, " $*\""));
  }

  // A real process to point the tools at.
  cohort::testing::Subprocess target_{{"/bin/sleep", "600"}};
  std::string dir_;
  StackDumpOptions options_;
};

TEST_F(StackDumpTest, PySpyComesFirstForPython) {
  ToolThatPrints("py-spy");
  ToolThatPrints("eu-stack");
  ToolThatPrints("gdb");
  StackDump dump = DumpStacks(target_.pid(), /*python=*/true, options_);
  ASSERT_TRUE(dump.status.ok()) << dump.status;
  EXPECT_EQ(dump.tool, "py-spy");
  EXPECT_EQ(dump.command, absl::StrCat(dir_, "/py-spy dump --pid ", target_.pid()));
  EXPECT_EQ(dump.output, absl::StrCat("fake py-spy dump --pid ", target_.pid(), "\n"));
  EXPECT_TRUE(dump.failed.empty());
}

TEST_F(StackDumpTest, PySpyIsNotUsedForANativeProcess) {
  ToolThatPrints("py-spy");
  ToolThatPrints("eu-stack");
  ToolThatPrints("gdb");
  StackDump dump = DumpStacks(target_.pid(), /*python=*/false, options_);
  ASSERT_TRUE(dump.status.ok()) << dump.status;
  EXPECT_EQ(dump.tool, "eu-stack");
  EXPECT_EQ(dump.output, absl::StrCat("fake eu-stack -p ", target_.pid(), "\n"));
}

TEST_F(StackDumpTest, GdbRunsEveryThreadsBacktraceInBatchMode) {
  ToolThatPrints("gdb");
  StackDump dump = DumpStacks(target_.pid(), /*python=*/true, options_);
  ASSERT_TRUE(dump.status.ok()) << dump.status;
  EXPECT_EQ(dump.tool, "gdb");
  EXPECT_EQ(dump.output,
            absl::StrCat("fake gdb -batch -nx -p ", target_.pid(), " -ex thread apply all bt\n"));
  EXPECT_EQ(dump.command,
            absl::StrCat(dir_, "/gdb -batch -nx -p ", target_.pid(), " -ex 'thread apply all bt'"));
}

TEST_F(StackDumpTest, AFailingToolGivesWayToTheNext) {
  Tool("py-spy", "echo 'Error: Failed to suspend process'\nexit 1");
  ToolThatPrints("gdb");
  StackDump dump = DumpStacks(target_.pid(), /*python=*/true, options_);
  ASSERT_TRUE(dump.status.ok()) << dump.status;
  EXPECT_EQ(dump.tool, "gdb");
  ASSERT_EQ(dump.failed.size(), 1u);
  EXPECT_EQ(dump.failed[0], "py-spy: exit status 1: Error: Failed to suspend process");
}

TEST_F(StackDumpTest, AToolStillRunningAtTheTimeoutIsKilledAndTheNextTried) {
  Tool("eu-stack", "exec sleep 600");
  ToolThatPrints("gdb");
  options_.timeout = absl::Milliseconds(200);
  StackDump dump = DumpStacks(target_.pid(), /*python=*/false, options_);
  ASSERT_TRUE(dump.status.ok()) << dump.status;
  EXPECT_EQ(dump.tool, "gdb");
  ASSERT_EQ(dump.failed.size(), 1u);
  EXPECT_TRUE(absl::StartsWith(dump.failed[0], "eu-stack: "));
  EXPECT_TRUE(absl::StrContains(dump.failed[0], "still running after 200ms")) << dump.failed[0];
}

TEST_F(StackDumpTest, WhenEveryToolFailsTheStatusSaysWhyEachDid) {
  Tool("py-spy", "echo 'Permission Denied: Try running again with elevated permissions'\nexit 1");
  Tool("gdb", "echo 'ptrace: Operation not permitted.'\nexit 1");
  StackDump dump = DumpStacks(target_.pid(), /*python=*/true, options_);
  EXPECT_FALSE(dump.status.ok());
  EXPECT_EQ(dump.tool, "gdb");
  EXPECT_EQ(dump.output, "ptrace: Operation not permitted.\n");
  const std::string message(dump.status.message());
  EXPECT_TRUE(absl::StrContains(message, "py-spy: exit status 1: Permission Denied")) << message;
  EXPECT_TRUE(absl::StrContains(message, "gdb: exit status 1: ptrace: Operation not permitted"))
      << message;
  EXPECT_TRUE(absl::StrContains(message, "not found: eu-stack")) << message;
}

TEST_F(StackDumpTest, NoToolOnTheSearchPathIsNotFound) {
  StackDump dump = DumpStacks(target_.pid(), /*python=*/true, options_);
  EXPECT_EQ(dump.status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(dump.tool, "");
  EXPECT_EQ(dump.status.message(),
            absl::StrCat("no stack tool found (tried py-spy, eu-stack, gdb on ", dir_, ")"));
  EXPECT_EQ(SummarizeStacks(dump), absl::StrCat("no stacks: ", dump.status.message()));
}

TEST_F(StackDumpTest, TheOutputIsCapped) {
  Tool("gdb", "head -c 100000 /dev/zero | tr '\\0' x");
  options_.max_output_bytes = 1000;
  StackDump dump = DumpStacks(target_.pid(), /*python=*/false, options_);
  ASSERT_TRUE(dump.status.ok()) << dump.status;
  EXPECT_EQ(dump.output, std::string(1000, 'x'));
  EXPECT_TRUE(dump.truncated);
}

// The real thing: gdb (installed at /usr/bin/gdb) attached to a Python process asleep.
TEST_F(StackDumpTest, GdbShowsWhereARealPythonProcessWaits) {
  ASSERT_EQ(access("/usr/bin/gdb", X_OK), 0) << "gdb is not installed";
  ASSERT_EQ(symlink("/usr/bin/gdb", (dir_ + "/gdb").c_str()), 0);
  cohort::testing::Subprocess python(
      {"/usr/bin/python3", "-c", "import time; print('ready', flush=True); time.sleep(600)"});
  ASSERT_EQ(python.ReadLines(1), std::vector<std::string>{"ready"});
  // Asleep, not between its print and its sleep.
  ASSERT_TRUE(cohort::testing::Eventually([&] {
    std::ifstream in(absl::StrCat("/proc/", python.pid(), "/stat"));
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t paren = stat.rfind(')');
    return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'S';
  }));
  EXPECT_TRUE(LooksLikePython(python.pid()));

  StackDump dump = DumpStacks(python.pid(), /*python=*/true, options_);
  ASSERT_TRUE(dump.status.ok()) << dump.status << "\n" << dump.output;
  EXPECT_EQ(dump.tool, "gdb");
  EXPECT_TRUE(absl::StrContains(dump.output, "Thread 1 ")) << dump.output;
  EXPECT_TRUE(absl::StrContains(dump.output, "clock_nanosleep") ||
              absl::StrContains(dump.output, "select"))
      << dump.output;

  const std::string summary = SummarizeStacks(dump);
  EXPECT_LE(summary.size(), 900u);
  EXPECT_TRUE(absl::StartsWith(summary, "gdb (1 thread):\nThread 1 ")) << summary;
  EXPECT_TRUE(absl::StrContains(summary, "nanosleep") || absl::StrContains(summary, "select"))
      << summary;
}

TEST(StackDumpLooksLikePythonTest, ANativeProcessIsNot) {
  cohort::testing::Subprocess sleeper({"/bin/sleep", "600"});
  EXPECT_FALSE(LooksLikePython(sleeper.pid()));
}

StackDump Dumped(const std::string& tool, const std::string& output) {
  StackDump dump;
  dump.tool = tool;
  dump.output = output;
  return dump;
}

TEST(StackDumpSummaryTest, PySpyKeepsEachThreadsHeaderAndInnermostFrames) {
  EXPECT_EQ(SummarizeStacks(Dumped("py-spy", kPySpySample)),
            "py-spy (2 threads):\n"
            "Thread 123 (idle): \"MainThread\"\n"
            "  wait (threading.py:320)\n"
            "  barrier (cohort/api.py:88)\n"
            "  step (train.py:40)\n"
            "Thread 131 (idle): \"Thread-1 (heartbeat)\"\n"
            "  _sleep (cohort/_client.py:210)\n"
            "  run (threading.py:975)\n"
            "  _bootstrap_inner (threading.py:1038)");
}

TEST(StackDumpSummaryTest, GdbFramesLoseTheirProgramCountersAndThread1ComesFirst) {
  EXPECT_EQ(SummarizeStacks(Dumped("gdb", kGdbSample)),
            "gdb (2 threads):\n"
            "Thread 1 (Thread 0x7f3c8e3f2740 (LWP 123) \"trainer\"):\n"
            "  #0 clock_nanosleep () from /lib/libc.so.6\n"
            "  #1 main () at trainer.cc:9\n"
            "Thread 2 (Thread 0x7f3c8d9ff6c0 (LWP 124) \"worker\"):\n"
            "  #0 __futex_abstimed_wait_common () from /lib/libc.so.6\n"
            "  #1 pthread_cond_wait () from /lib/libc.so.6\n"
            "  #2 Queue::Pop () at queue.cc:12");
}

TEST(StackDumpSummaryTest, EuStackThreadsAreTids) {
  EXPECT_EQ(SummarizeStacks(Dumped("eu-stack",
                                   "PID 123 - process\n"
                                   "TID 123:\n"
                                   "#0  0x00007f3c8e0e5c7a __clock_nanosleep\n"
                                   "#1  0x000055d1c2a3b1e0 main\n")),
            "eu-stack (1 thread):\n"
            "TID 123:\n"
            "  #0 __clock_nanosleep\n"
            "  #1 main");
}

TEST(StackDumpSummaryTest, ACutSummaryStaysWithinItsBytesAndEndsWithAnEllipsis) {
  std::string many;
  for (int t = 0; t < 100; ++t) {
    absl::StrAppend(&many, "Thread ", 1000 + t, " (idle): \"Worker-", t, "\"\n",
                    "    _worker_loop (torch/utils/data/_utils/worker.py:308)\n");
  }
  for (size_t max : {900u, 300u, 40u}) {
    const std::string summary = SummarizeStacks(Dumped("py-spy", many), max);
    EXPECT_LE(summary.size(), max);
    EXPECT_GT(summary.size() + 8, max);  // cut near the limit, not at a line before it
    EXPECT_TRUE(absl::EndsWith(summary, "\xE2\x80\xA6")) << summary;
  }
  const std::string summary = SummarizeStacks(Dumped("py-spy", many), 900);
  EXPECT_TRUE(absl::StrContains(summary, "Thread 1000 (idle): \"Worker-0\"")) << summary;
}

TEST(StackDumpSummaryTest, TheMainThreadComesFirstSoThatACutKeepsIt) {
  std::string dump;
  for (int t = 0; t < 100; ++t) {
    absl::StrAppend(&dump, "Thread ", 1000 + t, " (idle): \"Worker-", t, "\"\n",
                    "    _worker_loop (torch/utils/data/_utils/worker.py:308)\n");
  }
  absl::StrAppend(&dump, "Thread 123 (active): \"MainThread\"\n    step (train.py:40)\n");
  EXPECT_TRUE(absl::StartsWith(SummarizeStacks(Dumped("py-spy", dump)),
                               "py-spy (101 threads):\n"
                               "Thread 123 (active): \"MainThread\"\n"
                               "  step (train.py:40)\n"
                               "Thread 1000 (idle): \"Worker-0\"\n"));
}

TEST(StackDumpSummaryTest, NeverSplitsAUtf8Sequence) {
  // "é" is two bytes, "€" three: every cut point lands inside one of them somewhere.
  const std::string text = "Thread 1 (idle): \"é€é€é€é€é€é€é€é€\"\n    f (ü.py:1)\n";
  for (size_t max = 3; max < 60; ++max) {
    const std::string summary = SummarizeStacks(Dumped("py-spy", text), max);
    ASSERT_LE(summary.size(), max);
    // Valid UTF-8: no lead byte without all its continuation bytes.
    for (size_t i = 0; i < summary.size();) {
      const unsigned char c = static_cast<unsigned char>(summary[i]);
      const size_t length = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
      ASSERT_NE(c & 0xC0, 0x80) << "a continuation byte without its lead at " << i << " of "
                                << summary;
      ASSERT_LE(i + length, summary.size()) << "cut inside a sequence: " << summary;
      i += length;
    }
  }
}

TEST(StackDumpSummaryTest, BytesThatAreNotUtf8BecomeQuestionMarks) {
  EXPECT_EQ(SummarizeStacks(Dumped("gdb", "Thread 1 (\xff\xfe):\n#0  f (\xc3)\n")),
            "gdb (1 thread):\nThread 1 (?"
            "?):\n  #0 f (?)");
}

TEST(StackDumpSummaryTest, AnUnknownFormatKeepsItsFirstLines) {
  EXPECT_EQ(SummarizeStacks(Dumped("gdb", "something else\nentirely\n")),
            "gdb:\nsomething else\nentirely");
}

TEST(StackDumpSummaryTest, AFailedDumpSaysWhy) {
  StackDump dump = Dumped("gdb", "ptrace: Operation not permitted.\n");
  dump.status = absl::InternalError("no stack tool succeeded: gdb: exit status 1: ptrace: ...");
  EXPECT_EQ(SummarizeStacks(dump),
            "no stacks: no stack tool succeeded: gdb: exit status 1: ptrace: ...");
}

}  // namespace
}  // namespace cohort::stack_dump_test
