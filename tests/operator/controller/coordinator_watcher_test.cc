// The operator's polls of a job's coordinator over mutual TLS, with certificates the operator
// issued: a coordinator program run as the operator configures it (its certificate, the job's
// CA for clients, the job's token), a task registered over TLS, and the watcher seeing it with
// the job's client certificate, and seeing nothing with another job's or with none.
#include "operator/controller/coordinator_watcher.h"

#include <sys/stat.h>

#include <atomic>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "agent/coordination_agent.h"
#include "common/failure_reason.h"
#include "common/task_progress.h"
#include "gtest/gtest.h"
#include "operator/controller/certificates.h"
#include "spdlog/sinks/ringbuffer_sink.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"
#include "tests/support/build_paths.h"
#include "tests/support/eventually.h"
#include "tests/support/subprocess.h"

namespace cohort::controller {
namespace {

constexpr char kServerName[] = "train-coordinator.ml.svc";
constexpr char kToken[] = "0123456789abcdef";

JobCertificates Issue() {
  CertificateRequest request;
  request.job = "ml/train";
  request.dns_names = {kServerName};
  request.now = absl::Now();
  auto certs = IssueJobCertificates(request);
  EXPECT_TRUE(certs.ok()) << certs.status();
  return certs.ok() ? *certs : JobCertificates{};
}

using ::cohort::testing::Eventually;
using ::cohort::testing::FreePort;
using ::cohort::testing::Subprocess;

void Write(const std::string& path, const std::string& content) { std::ofstream(path) << content; }

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// While it lives, this process's log is kept down to debug level (standard error still gets
// info and up), so that a test can wait for what the code under test says it did. Made
// before the test starts a thread that logs, destroyed after they ended.
class CapturedLog {
 public:
  CapturedLog()
      : previous_(spdlog::default_logger()),
        kept_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(1000)) {
    auto err = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    err->set_level(spdlog::level::info);
    auto logger = std::make_shared<spdlog::logger>("test", spdlog::sinks_init_list{err, kept_});
    logger->set_level(spdlog::level::debug);
    spdlog::set_default_logger(std::move(logger));
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;

  bool Contains(const std::string& text) {
    for (const std::string& line : kept_->last_formatted()) {
      if (line.find(text) != std::string::npos) return true;
    }
    return false;
  }

 private:
  std::shared_ptr<spdlog::logger> previous_;
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> kept_;
};

class CoordinatorWatcherTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    certs_ = Issue();
    dir_ = absl::StrCat(::testing::TempDir(), "/watcher-tls-", getpid());
    mkdir(dir_.c_str(), 0700);
    Write(dir_ + "/ca.crt", certs_.ca_cert);
    Write(dir_ + "/coordinator.crt", certs_.coordinator_cert);
    Write(dir_ + "/coordinator.key", certs_.coordinator_key);
    Write(dir_ + "/token", kToken);
    port_ = FreePort();
    log_ = dir_ + "/coordinator.log";
    coordinator_ = std::make_unique<Subprocess>(
        std::vector<std::string>{::cohort::testing::BinDir() + "/cohort-coordinator", "--listen",
                                 absl::StrCat("127.0.0.1:", port_), "--http-listen", "", "--job",
                                 "worker=1", "--tls-cert", dir_ + "/coordinator.crt", "--tls-key",
                                 dir_ + "/coordinator.key", "--tls-client-ca", dir_ + "/ca.crt",
                                 "--auth-token-file", dir_ + "/token"},
        std::map<std::string, std::string>{}, log_);
  }

  std::string Address() const { return absl::StrCat("127.0.0.1:", port_); }

  // Connects `agent` as task 0 of the job, over mutual TLS with the job's client certificate.
  void ConnectTask(CoordinationAgent* agent) {
    AgentConfig config;
    config.coordinator_address = Address();
    config.job_name = "worker";
    config.task_id = 0;
    config.auth_token = kToken;
    grpc::SslCredentialsOptions options;
    options.pem_root_certs = certs_.ca_cert;
    options.pem_cert_chain = certs_.client_cert;
    options.pem_private_key = certs_.client_key;
    config.credentials = grpc::SslCredentials(options);
    config.tls_server_name = kServerName;
    // Soon after a SetProgress, the coordinator has it.
    config.heartbeat_interval = absl::Milliseconds(200);
    ASSERT_TRUE(agent->Initialize(config, [](const absl::Status&) {}).ok());
    absl::Status connected = agent->Connect();
    ASSERT_TRUE(connected.ok()) << connected << "\ncoordinator: " << ReadFileOrEmpty(log_);
  }

  JobCertificates certs_;
  std::string dir_, log_;
  int port_ = 0;
  std::unique_ptr<Subprocess> coordinator_;
};

TEST_F(CoordinatorWatcherTlsTest, TheJobsClientCertificateSeesTheTasksAndOthersSeeNothing) {
  CapturedLog captured;
  CoordinationAgent agent;
  ConnectTask(&agent);
  if (HasFatalFailure()) return;

  std::atomic<int> changes{0};
  CoordinatorWatcher watcher(absl::Milliseconds(100), [&](const std::string&) { ++changes; });
  const JobCertificates stranger = Issue();
  watcher.Watch("ml/train", Address(), 0, {kToken, certs_, kServerName});
  watcher.Watch("ml/stranger", Address(), 0, {kToken, stranger, kServerName});
  watcher.Watch("ml/plain", Address(), 0, {kToken, std::nullopt, ""});
  ASSERT_TRUE(Eventually([&] {
    auto view = watcher.View("ml/train", 0);
    return view && view->registered == 1;
  })) << ReadFileOrEmpty(log_);
  EXPECT_GE(changes.load(), 1);
  // Polls that the coordinator refused learned nothing. The watcher says (at debug level) when
  // a coordinator first does not answer it: wait until both were refused.
  ASSERT_TRUE(Eventually([&] {
    return captured.Contains("coordinator of ml/stranger at") &&
           captured.Contains("coordinator of ml/plain at");
  }));
  EXPECT_FALSE(watcher.View("ml/stranger", 0).has_value());
  EXPECT_FALSE(watcher.View("ml/plain", 0).has_value());
  watcher.StopAll();
  EXPECT_TRUE(agent.Shutdown().ok());
}

TEST_F(CoordinatorWatcherTlsTest, ATasksErrorReachesTheViewWithItsReason) {
  CoordinationAgent agent;
  ConnectTask(&agent);
  if (HasFatalFailure()) return;
  ASSERT_TRUE(agent
                  .ReportError(absl::DeadlineExceededError("worker 0 made no progress"),
                               FailureReason::kHang)
                  .ok());

  CoordinatorWatcher watcher(absl::Milliseconds(100), [](const std::string&) {});
  watcher.Watch("ml/train", Address(), 0, {kToken, certs_, kServerName});
  std::optional<CoordinatorView> view;
  ASSERT_TRUE(Eventually([&] {
    view = watcher.View("ml/train", 0);
    return view && !view->errors.empty();
  })) << ReadFileOrEmpty(log_);
  EXPECT_EQ(view->errors[0].task, "/job:worker/task:0");
  EXPECT_EQ(view->errors[0].code, static_cast<int>(absl::StatusCode::kDeadlineExceeded));
  EXPECT_EQ(view->errors[0].reason, FailureReason::kHang);
  watcher.StopAll();
}

TEST_F(CoordinatorWatcherTlsTest, ATasksFirstPaceWakesTheControllerAndLaterProgressDoesNot) {
  CoordinationAgent agent;
  ConnectTask(&agent);
  if (HasFatalFailure()) return;

  std::atomic<int> changes{0};
  CoordinatorWatcher watcher(absl::Milliseconds(100), [&](const std::string&) { ++changes; });
  watcher.Watch("ml/train", Address(), 0, {kToken, certs_, kServerName});
  ASSERT_TRUE(Eventually([&] { return changes.load() >= 1; })) << ReadFileOrEmpty(log_);
  const int woken = changes.load();
  std::optional<CoordinatorView> view = watcher.View("ml/train", 0);
  ASSERT_TRUE(view.has_value());
  EXPECT_TRUE(view->progress.empty());

  agent.SetProgress(TaskProgress{17, 0.5});
  ASSERT_TRUE(Eventually([&] {
    view = watcher.View("ml/train", 0);
    return view && view->progress.count("/job:worker/task:0") == 1;
  })) << ReadFileOrEmpty(log_);
  EXPECT_EQ(view->progress.at("/job:worker/task:0"), (TaskProgress{17, 0.5}));
  // The task's first pace wakes the controller once: the plan starts comparing the gang.
  ASSERT_TRUE(Eventually([&] { return changes.load() == woken + 1; })) << changes.load();
  agent.SetProgress(TaskProgress{18, 0.6});
  ASSERT_TRUE(Eventually([&] {
    view = watcher.View("ml/train", 0);
    return view && view->progress["/job:worker/task:0"].step == 18;
  }));
  // Progress moves with every heartbeat: it is kept in the view, but wakes no one.
  EXPECT_EQ(changes.load(), woken + 1);
  watcher.StopAll();
  EXPECT_TRUE(agent.Shutdown().ok());
}

}  // namespace
}  // namespace cohort::controller
