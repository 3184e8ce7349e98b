// The command line every cohort program shares (common/yaml_config.h): help that names what
// each option takes, --version, and one-line usage errors; and the counted nouns of messages.
#include "common/command_line.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/process.h"
#include "common/yaml_config.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

// The options a real program declares, one of each kind the formatter renames.
struct Program {
  CLI::App app{"a test program", "prog"};
  bool register_barrier = false;
  bool leader_elect = true;
  int task = 0;
  int num_tasks = 1;
  std::string heartbeat_timeout = "10s";
  std::string listen = "0.0.0.0:8476";
  std::string state_dir;
  std::string log_level = "info";
  std::string output = "table";
  int workers = 4;

  Program() {
    app.get_formatter()->column_width(60);  // each option and its text on one line
    app.add_flag("--register-barrier,!--no-register-barrier", register_barrier,
                 "wait for every task at registration");
    app.add_option("--leader-elect", leader_elect, "elect one replica")->capture_default_str();
    app.add_option("--task", task, "task id")->capture_default_str();
    app.add_option("--num-tasks", num_tasks, "tasks in the job")->capture_default_str();
    app.add_option("--heartbeat-timeout", heartbeat_timeout, "give up after this long")
        ->capture_default_str();
    app.add_option("--listen", listen, "gRPC address")->capture_default_str();
    app.add_option("--state-dir", state_dir, "where state is kept");
    app.add_option("--log-level", log_level, "how much to log")->capture_default_str();
    app.add_option("--output", output, "how to print")
        ->check(CLI::IsMember({"table", "json"}))
        ->capture_default_str();
    app.add_option("--workers", workers, "in parallel")
        ->check(CLI::Range(1, 64))
        ->capture_default_str();
    AddVersionFlag(app);
  }

  // The help's line for `flag`, e.g. "  --task N=0   task id".
  std::string HelpLine(const std::string& flag) {
    const std::string help = app.help();
    for (size_t start = 0; start < help.size();) {
      size_t end = help.find('\n', start);
      if (end == std::string::npos) end = help.size();
      std::string line = help.substr(start, end - start);
      if (line.find("  " + flag + " ") == 0 || line.find("  " + flag + ",") == 0) return line;
      start = end + 1;
    }
    return "(no line for " + flag + " in:\n" + help + ")";
  }

  // Parses `args` as ParseCommandLine does for main(), with stderr captured in `err`.
  std::optional<int> Parse(std::vector<std::string> args, std::string* err) {
    args.insert(args.begin(), "prog");
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    fflush(stderr);
    FILE* capture = std::tmpfile();
    const int saved = dup(fileno(stderr));
    dup2(fileno(capture), fileno(stderr));
    std::optional<int> code = ParseCommandLine(app, static_cast<int>(argv.size()), argv.data());
    fflush(stderr);
    dup2(saved, fileno(stderr));
    close(saved);
    std::rewind(capture);
    err->clear();
    for (int c; (c = std::fgetc(capture)) != EOF;) err->push_back(static_cast<char>(c));
    std::fclose(capture);
    return code;
  }
};

// Collapses the padding between an option and its description to one space.
std::string Squeezed(const std::string& line) {
  std::string out;
  for (char c : line) {
    if (c == ' ' && !out.empty() && out.back() == ' ') continue;
    out.push_back(c);
  }
  return out;
}

TEST(HelpFormatterTest, ANegatableFlagIsTwoFlagsWithoutCli11sDefaultBraces) {
  Program p;
  EXPECT_EQ(Squeezed(p.HelpLine("--register-barrier")),
            " --register-barrier, --no-register-barrier wait for every task at registration");
}

TEST(HelpFormatterTest, OptionsNameWhatTheyTake) {
  Program p;
  EXPECT_EQ(Squeezed(p.HelpLine("--leader-elect")),
            " --leader-elect true|false=true elect one replica");
  EXPECT_EQ(Squeezed(p.HelpLine("--task")), " --task N=0 task id");
  EXPECT_EQ(Squeezed(p.HelpLine("--num-tasks")), " --num-tasks N=1 tasks in the job");
  EXPECT_EQ(Squeezed(p.HelpLine("--heartbeat-timeout")),
            " --heartbeat-timeout DURATION=10s give up after this long");
  EXPECT_EQ(Squeezed(p.HelpLine("--listen")), " --listen HOST:PORT=0.0.0.0:8476 gRPC address");
  EXPECT_EQ(Squeezed(p.HelpLine("--state-dir")), " --state-dir PATH where state is kept");
  // A checked option says its set or its range in the same words.
  EXPECT_EQ(Squeezed(p.HelpLine("--output")), " --output table|json=table how to print");
  EXPECT_EQ(Squeezed(p.HelpLine("--workers")), " --workers N in [1 - 64]=4 in parallel");
  // A string of no known kind stays TEXT.
  EXPECT_EQ(Squeezed(p.HelpLine("--log-level")), " --log-level TEXT=info how much to log");
  const std::string help = p.app.help();
  EXPECT_EQ(help.find("BOOLEAN"), std::string::npos) << help;
  EXPECT_EQ(help.find("INT"), std::string::npos) << help;
  EXPECT_EQ(help.find('{'), std::string::npos) << help;
  EXPECT_NE(help.find("--version"), std::string::npos) << help;
}

TEST(ParseCommandLineTest, VersionAndHelpExit0AndBadInputIsOneLineExit2) {
  std::string err;
  {
    Program p;
    testing::internal::CaptureStdout();
    EXPECT_EQ(p.Parse({"--version"}, &err), 0);
    EXPECT_EQ(testing::internal::GetCapturedStdout(), std::string("prog ") + Version() + "\n");
  }
  {
    Program p;
    EXPECT_EQ(p.Parse({"--task", "3", "--no-register-barrier"}, &err), std::nullopt) << err;
    EXPECT_EQ(p.task, 3);
    EXPECT_FALSE(p.register_barrier);
    EXPECT_EQ(err, "");
  }
  {
    Program p;
    EXPECT_EQ(p.Parse({"--tsak", "3"}, &err), 2);
    EXPECT_EQ(err.rfind("prog: ", 0), 0u) << err;
    EXPECT_NE(err.find("--tsak"), std::string::npos) << err;
    EXPECT_EQ(err.find('\n'), err.size() - 1) << err;
    EXPECT_EQ(p.task, 0);
  }
  {
    Program p;
    EXPECT_EQ(p.Parse({"--task", "three"}, &err), 2);
    EXPECT_EQ(err.rfind("prog: ", 0), 0u) << err;
    EXPECT_NE(err.find("--task"), std::string::npos) << err;
    EXPECT_EQ(err.find('\n'), err.size() - 1) << err;
  }
}

TEST(PluralTest, OneIsSingular) {
  EXPECT_EQ(Plural(0, "task"), "0 tasks");
  EXPECT_EQ(Plural(1, "task"), "1 task");
  EXPECT_EQ(Plural(2, "GPU"), "2 GPUs");
}

TEST(ProcessTest, DurationFlagsNameTheFlagAndRefuseNegativesAndWhenAskedZero) {
  EXPECT_EQ(*ParseDurationFlag("--heartbeat-timeout", "1m30s"), absl::Seconds(90));
  EXPECT_EQ(*ParseDurationFlag("--retry", "0"), absl::ZeroDuration());
  EXPECT_EQ(ParseDurationFlag("--heartbeat-timeout", "soon").status().message(),
            "--heartbeat-timeout \"soon\" is not a duration such as 10s, 500ms or 5m");
  EXPECT_EQ(ParseDurationFlag("--poll", "-1s").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseDurationFlag("--sample-interval", "0s", /*zero_ok=*/false).status().message(),
            "--sample-interval \"0s\" must be more than 0");
}

TEST(ProcessTest, AnEmptyVariableIsUnset) {
  setenv("COHORT_PROCESS_TEST", "", 1);
  EXPECT_EQ(EnvOr("COHORT_PROCESS_TEST", "worker"), "worker");
  setenv("COHORT_PROCESS_TEST", "sidecar", 1);
  EXPECT_EQ(EnvOr("COHORT_PROCESS_TEST", "worker"), "sidecar");
  unsetenv("COHORT_PROCESS_TEST");
  EXPECT_EQ(EnvOr("COHORT_PROCESS_TEST"), "");
}

TEST(ProcessTest, StopSignalsTakesABlockedSignalAndNamesIt) {
  sigset_t before;
  pthread_sigmask(SIG_SETMASK, nullptr, &before);
  {
    const StopSignals signals({SIGUSR2});
    ASSERT_EQ(raise(SIGUSR2), 0);  // blocked: pending until Wait takes it
    EXPECT_EQ(signals.Wait(), SIGUSR2);
  }
  pthread_sigmask(SIG_SETMASK, &before, nullptr);  // the rest of this binary as it was
  EXPECT_EQ(StopSignals::Name(SIGTERM), "SIGTERM");
  EXPECT_EQ(StopSignals::Name(SIGINT), "SIGINT");
  EXPECT_EQ(StopSignals::Name(SIGUSR2), absl::StrCat("signal ", SIGUSR2));
}

}  // namespace
}  // namespace cohort
