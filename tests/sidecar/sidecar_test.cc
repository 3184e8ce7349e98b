// cohort-sidecar, the binary, against a live coordinator, on a node without GPUs and on
// nodes of fake GPUs (a fake libnvidia-ml.so.1 loaded through the real dlopen path).
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "agent/coordination_agent.h"
#include "common/failure_reason.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kubelet/podresources/v1/podresources.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "tests/service/integration/test_server.h"
#include "tests/support/build_paths.h"
#include "tests/support/subprocess.h"

namespace cohort::testing {
namespace {

using Json = nlohmann::json;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The value of the one sample of `name` whose labels include every `labels` pair; NaN when
// there is none.
double Sample(const std::string& metrics, const std::string& name,
              const std::vector<std::pair<std::string, std::string>>& labels = {}) {
  std::istringstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name, 0) != 0) continue;
    if (line.size() > name.size() && line[name.size()] != '{' && line[name.size()] != ' ') {
      continue;
    }
    bool all = true;
    for (const auto& [k, v] : labels) {
      all = all && line.find(absl::StrCat(k, "=\"", v, "\"")) != std::string::npos;
    }
    if (all) return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return std::nan("");
}

// The whole lines of a cohort text log ("<time> <level> <logger>: <message>") that contain
// `text`, counted by level. A last line still being written is left out.
std::map<std::string, int> LinesByLevel(const std::string& log, const std::string& text) {
  std::map<std::string, int> counts;
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line) && !in.eof()) {
    if (line.find(text) == std::string::npos) continue;
    const size_t space = line.find(' ');
    if (space == std::string::npos) continue;
    const size_t end = line.find(' ', space + 1);
    ++counts[line.substr(space + 1, end == std::string::npos ? end : end - space - 1)];
  }
  return counts;
}

bool Eventually(const std::function<bool()>& condition,
                absl::Duration timeout = absl::Seconds(20)) {
  for (absl::Time end = absl::Now() + timeout; absl::Now() < end;) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return condition();
}

struct ErrorLog {
  absl::Mutex mu;
  std::vector<absl::Status> errors;
  CoordinationAgent::ErrorCallback Callback() {
    return [this](const absl::Status& s) {
      absl::MutexLock lock(&mu);
      errors.push_back(s);
    };
  }
  size_t Count() {
    absl::MutexLock lock(&mu);
    return errors.size();
  }
  absl::Status First() {
    absl::MutexLock lock(&mu);
    return errors.empty() ? absl::OkStatus() : errors.front();
  }
};

// One cohort-sidecar process with its own port, hand-off directory and fault FIFO.
struct SidecarProcess {
  int port = 0;
  std::string handoff;
  std::string fifo;
  std::string log;
  std::unique_ptr<Subprocess> process;

  std::string Url(const std::string& path) const {
    return absl::StrCat("http://127.0.0.1:", port, path);
  }
  std::string Get(const std::string& path, int* code = nullptr) const {
    int c = 0;
    std::string body = HttpGet(Url(path), &c);
    if (code) *code = c;
    return body;
  }
  bool Ready() const {
    int code = 0;
    Get("/readyz", &code);
    return code == 200;
  }
  // Writes a fault for the fake NVML inside the sidecar process.
  void Inject(const std::string& line) const {
    std::ofstream out(fifo);
    out << line << "\n";
  }
};

class SidecarTest : public ::testing::Test {
 protected:
  void StartCoordinator(int workers, absl::Duration heartbeat = absl::Seconds(60)) {
    ServiceConfig config = Jobs(workers, heartbeat);
    config.jobs.push_back({"sidecar", workers, /*auxiliary=*/true});
    config.shutdown_barrier_timeout = absl::Seconds(20);
    coordinator_ = std::make_unique<TestCoordinator>(config);
  }

  // `gpus`: a file of testdata/ for the fake NVML, or "" for a node without the driver.
  // `env`: replaces the operator's env of the same names (an empty POD_NAME: run by hand).
  SidecarProcess StartSidecar(int task, int num_tasks, const std::string& gpus,
                              std::vector<std::string> extra = {},
                              const std::map<std::string, std::string>& env_overrides = {},
                              const std::string& handoff = "") {
    SidecarProcess s;
    s.port = FreePort();
    std::string dir = absl::StrCat(::testing::TempDir(), "sidecar-", getpid(), "-", s.port);
    mkdir(dir.c_str(), 0755);
    // `handoff`: the directory of an earlier sidecar of the same pod (a restarted container).
    s.handoff = handoff.empty() ? dir + "/handoff" : handoff;
    mkdir(s.handoff.c_str(), 0755);
    s.fifo = dir + "/nvml-control";
    s.log = dir + "/sidecar.log";
    std::map<std::string, std::string> env = {
        {"COHORT_COORDINATOR_ADDRESS", coordinator_->address()},
        {"COHORT_JOB_NAME", "worker"},
        {"COHORT_TASK_ID", std::to_string(task)},
        {"COHORT_NUM_TASKS", std::to_string(num_tasks)},
        {"POD_NAME", absl::StrCat("train-worker-", task)},
        {"POD_NAMESPACE", "ml"},
        {"POD_IP", absl::StrCat("10.0.0.", task + 1)},
        {"FAKE_NVML_CONTROL_FIFO", s.fifo},
    };
    for (const auto& [key, value] : env_overrides) env[key] = value;
    if (gpus.empty()) {
      env["COHORT_NVML_LIBRARY"] = dir + "/no-driver/libnvidia-ml.so.1";
    } else {
      env["COHORT_NVML_LIBRARY"] = ::cohort::testing::InBuild(COHORT_FAKE_NVML_PATH);
      env["FAKE_NVML_CONFIG"] = ::cohort::testing::InBuild(COHORT_GPU_TEST_DATA_DIR) + "/" + gpus;
    }
    // `extra` may name the HTTP address itself (a port another sidecar holds).
    const bool own_listen = std::find(extra.begin(), extra.end(), "--http-listen") != extra.end();
    std::vector<std::string> argv = {::cohort::testing::BinDir() + "/cohort-sidecar",
                                     own_listen ? "--heartbeat-timeout" : "--http-listen",
                                     own_listen ? "30s" : absl::StrCat("127.0.0.1:", s.port),
                                     "--handoff-dir",
                                     s.handoff,
                                     "--sample-interval",
                                     "200ms",
                                     "--heartbeat-interval",
                                     "200ms"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    s.process = std::make_unique<Subprocess>(argv, env, s.log);
    return s;
  }

  std::unique_ptr<CoordinationAgent> Worker(int task, ErrorLog* log) {
    auto agent = std::make_unique<CoordinationAgent>();
    AgentConfig config;
    config.coordinator_address = coordinator_->address();
    config.job_name = "worker";
    config.task_id = task;
    config.heartbeat_interval = absl::Milliseconds(500);
    config.unreachable_timeout = absl::Seconds(30);
    EXPECT_TRUE(agent->Initialize(config, log->Callback()).ok());
    return agent;
  }

  TaskState StateOf(const std::string& job, int id) {
    for (const TaskStateInfo& info : coordinator_->service().AllTasks()) {
      if (info.task.job == job && info.task.id == id) return info.state;
    }
    return TaskState::kUninitialized;
  }
  FailureReason ReasonOf(const std::string& job, int id) {
    for (const TaskStateInfo& info : coordinator_->service().AllTasks()) {
      if (info.task.job == job && info.task.id == id) return info.reason;
    }
    return FailureReason::kUnspecified;
  }

  std::unique_ptr<TestCoordinator> coordinator_;
};

TEST_F(SidecarTest, NodeWithoutTheDriverRegistersHandsOffAndStopsCleanly) {
  StartCoordinator(1);
  SidecarProcess sidecar = StartSidecar(0, 1, "");
  ASSERT_TRUE(Eventually([&] { return sidecar.Ready(); })) << ReadFile(sidecar.log);
  EXPECT_EQ(StateOf("sidecar", 0), TaskState::kConnected);

  Json cluster = Json::parse(ReadFile(sidecar.handoff + "/cluster.json"));
  EXPECT_EQ(cluster["rank"], 0);
  EXPECT_EQ(cluster["world_size"], 1);
  EXPECT_EQ(cluster["coordinator_address"], coordinator_->address());
  EXPECT_TRUE(cluster["local_gpus"].empty());
  EXPECT_TRUE(cluster["global_gpus"].empty());
  EXPECT_EQ(cluster["peers"][0]["address"], "10.0.0.1");
  EXPECT_EQ(Json::parse(sidecar.Get("/v1/cluster")), cluster);

  std::string metrics = sidecar.Get("/metrics");
  EXPECT_EQ(Sample(metrics, "cohort_gpus", {{"pod", "train-worker-0"}}), 0);
  EXPECT_EQ(Sample(metrics, "cohort_sidecar_agent_state", {{"state", "CONNECTED"}}), 1);
  EXPECT_EQ(Sample(metrics, "cohort_sidecar_ready"), 1);

  sidecar.process->Signal(SIGTERM);
  ProcessResult result = sidecar.process->Wait();
  EXPECT_EQ(result.exit_code, 0);
  std::string log = ReadFile(sidecar.log);
  // One clear line about the missing driver, and nothing reported to the coordinator.
  std::regex gpu_line("gpu: [^\n]*libnvidia-ml");
  EXPECT_EQ(
      std::distance(std::sregex_iterator(log.begin(), log.end(), gpu_line), std::sregex_iterator()),
      1)
      << log;
  EXPECT_EQ(log.find("reporting to the coordinator"), std::string::npos) << log;
  EXPECT_EQ(StateOf("sidecar", 0), TaskState::kDisconnected);
  EXPECT_NE(StateOf("worker", 0), TaskState::kError);
}

TEST_F(SidecarTest, EightFakeGpusAreExportedWithTheFakesExactValues) {
  StartCoordinator(1);
  SidecarProcess sidecar = StartSidecar(0, 1, "eight_gpus.json", {"--dcgm-metrics"});
  ASSERT_TRUE(Eventually([&] { return sidecar.Ready(); })) << ReadFile(sidecar.log);
  Json node = Json::parse(
      ReadFile(::cohort::testing::InBuild(COHORT_GPU_TEST_DATA_DIR) + "/eight_gpus.json"));
  std::string metrics;
  // SM activity is measured from one sample to the next: it shows from the second on.
  ASSERT_TRUE(Eventually([&] {
    metrics = sidecar.Get("/metrics");
    return !std::isnan(Sample(metrics, "cohort_gpu_temperature_celsius", {{"gpu", "7"}})) &&
           !std::isnan(Sample(metrics, "cohort_gpu_sm_activity_ratio", {{"gpu", "7"}}));
  }));
  EXPECT_EQ(Sample(metrics, "cohort_gpus"), 8);
  for (int i = 0; i < 8; ++i) {
    const Json& gpu = node["gpus"][i];
    std::vector<std::pair<std::string, std::string>> labels = {
        {"namespace", "ml"},        {"job", "worker"},     {"pod", "train-worker-0"}, {"task", "0"},
        {"gpu", std::to_string(i)}, {"uuid", gpu["uuid"]}, {"model", gpu["name"]}};
    SCOPED_TRACE(gpu["uuid"].get<std::string>());
    double total = gpu["memory"]["total"], used = gpu["memory"]["used"];
    EXPECT_EQ(Sample(metrics, "cohort_gpu_memory_total_bytes", labels), total);
    EXPECT_EQ(Sample(metrics, "cohort_gpu_memory_used_bytes", labels), used);
    EXPECT_EQ(Sample(metrics, "cohort_gpu_temperature_celsius", labels),
              gpu["temperature"].get<double>());
    EXPECT_DOUBLE_EQ(Sample(metrics, "cohort_gpu_power_watts", labels),
                     gpu["power_mw"].get<double>() / 1000);
    EXPECT_DOUBLE_EQ(Sample(metrics, "cohort_gpu_utilization_ratio", labels),
                     gpu["utilization"]["gpu"].get<double>() / 100);
    EXPECT_NEAR(Sample(metrics, "cohort_gpu_sm_activity_ratio", labels),
                gpu["sm_activity"].get<double>(), 1e-9);
    EXPECT_EQ(Sample(metrics, "cohort_gpu_sm_clock_hertz", labels),
              gpu["sm_clock_mhz"].get<double>() * 1e6);
    EXPECT_DOUBLE_EQ(Sample(metrics, "cohort_gpu_energy_joules_total", labels),
                     gpu["energy_mj"].get<double>() / 1000);
    EXPECT_EQ(Sample(metrics, "cohort_gpu_ecc_errors_total",
                     {{"gpu", std::to_string(i)}, {"type", "single_bit"}, {"scope", "aggregate"}}),
              gpu["ecc"]["aggregate_single"].get<double>());
    EXPECT_EQ(Sample(metrics, "cohort_gpu_healthy", labels), 1);
    // DCGM exporter's names and units, with its labels.
    std::vector<std::pair<std::string, std::string>> dcgm = {
        {"gpu", std::to_string(i)}, {"UUID", gpu["uuid"]}, {"modelName", gpu["name"]}};
    EXPECT_EQ(Sample(metrics, "DCGM_FI_DEV_GPU_TEMP", dcgm), gpu["temperature"].get<double>());
    EXPECT_EQ(Sample(metrics, "DCGM_FI_DEV_GPU_UTIL", dcgm),
              gpu["utilization"]["gpu"].get<double>());
    EXPECT_DOUBLE_EQ(Sample(metrics, "DCGM_FI_DEV_FB_USED", dcgm), used / (1024 * 1024));
    EXPECT_DOUBLE_EQ(Sample(metrics, "DCGM_FI_DEV_POWER_USAGE", dcgm),
                     gpu["power_mw"].get<double>() / 1000);
    EXPECT_EQ(Sample(metrics, "DCGM_FI_DEV_SM_CLOCK", dcgm), gpu["sm_clock_mhz"].get<double>());
    EXPECT_NEAR(Sample(metrics, "DCGM_FI_PROF_SM_ACTIVE", dcgm), gpu["sm_activity"].get<double>(),
                1e-9);
  }
  // promtool finds cohort's own exposition clean. Its lint does object to DCGM exporter's
  // own names (camelCase labels such as modelName, "COUNTER" in a gauge's name), which are
  // kept as they are for the dashboards built on them; it objects to nothing else.
  std::string file = sidecar.handoff + "/../metrics.txt";
  std::ofstream(file) << metrics;
  int status = 0;
  std::string lint =
      RunShell("grep -v DCGM_FI_ " + file + " | promtool check metrics 2>&1", &status);
  EXPECT_EQ(status, 0) << lint;
  lint = RunShell("promtool check metrics < " + file + " 2>&1", &status);
  std::istringstream complaints(lint);
  std::string line;
  int lines = 0;
  while (std::getline(complaints, line)) {
    ++lines;
    EXPECT_EQ(line.rfind("DCGM_FI_", 0), 0u) << line;
  }
  EXPECT_GT(lines, 0);
}

TEST_F(SidecarTest, TwoSidecarsHandOffOneTopologyWithDenseGlobalGpuIds) {
  StartCoordinator(2);
  SidecarProcess first = StartSidecar(0, 2, "eight_gpus.json");
  SidecarProcess second = StartSidecar(1, 2, "nvlink_mesh.json");
  ASSERT_TRUE(Eventually([&] { return first.Ready() && second.Ready(); }))
      << ReadFile(first.log) << ReadFile(second.log);
  Json a = Json::parse(ReadFile(first.handoff + "/cluster.json"));
  Json b = Json::parse(ReadFile(second.handoff + "/cluster.json"));
  EXPECT_EQ(a["global_gpus"], b["global_gpus"]);
  EXPECT_EQ(a["rank"], 0);
  EXPECT_EQ(b["rank"], 1);
  ASSERT_EQ(a["global_gpus"].size(), 12u);  // 8 + 4
  for (int g = 0; g < 12; ++g) {
    EXPECT_EQ(a["global_gpus"][g]["global_id"], g);
    EXPECT_EQ(a["global_gpus"][g]["task"], g < 8 ? 0 : 1);
    EXPECT_EQ(a["global_gpus"][g]["local_index"], g < 8 ? g : g - 8);
  }
  EXPECT_EQ(b["local_gpus"].size(), 4u);
  EXPECT_EQ(a["peers"][1]["address"], "10.0.0.2");
  std::string env = ReadFile(second.handoff + "/cluster.env");
  EXPECT_NE(env.find("COHORT_RANK='1'\n"), std::string::npos) << env;
  EXPECT_NE(env.find("COHORT_WORLD_SIZE='2'\n"), std::string::npos) << env;
  EXPECT_NE(env.find("COHORT_GLOBAL_GPU_IDS='8,9,10,11'\n"), std::string::npos) << env;
  EXPECT_NE(env.find("COHORT_PEER_ADDRESSES='10.0.0.1,10.0.0.2'\n"), std::string::npos) << env;
  // The file is meant to be sourced by a shell.
  int status = 0;
  std::string rank = RunShell(". " + second.handoff + "/cluster.env && echo $COHORT_RANK", &status);
  EXPECT_EQ(rank, "1\n");
}

TEST_F(SidecarTest, CriticalXidReachesAWorkloadTaskAndIgnoredXidsDoNot) {
  StartCoordinator(1);
  ErrorLog errors;
  auto worker = Worker(0, &errors);
  ASSERT_TRUE(worker->Connect().ok());
  SidecarProcess sidecar = StartSidecar(0, 1, "eight_gpus.json");
  ASSERT_TRUE(Eventually([&] { return sidecar.Ready(); })) << ReadFile(sidecar.log);

  sidecar.Inject("xid 2 13");  // an application error: counted, not a GPU fault
  ASSERT_TRUE(Eventually([&] {
    return Sample(sidecar.Get("/metrics"), "cohort_gpu_xid_errors_total",
                  {{"gpu", "2"}, {"xid", "13"}}) == 1;
  }));
  EXPECT_EQ(errors.Count(), 0u);

  sidecar.Inject("xid 3 79 1");  // and the driver's recovery action is a GPU reset
  ASSERT_TRUE(Eventually([&] { return errors.Count() > 0; })) << ReadFile(sidecar.log);
  absl::Status error = errors.First();
  EXPECT_NE(error.message().find("GPU 3"), std::string::npos) << error;
  EXPECT_NE(error.message().find("XID 79"), std::string::npos) << error;
  EXPECT_NE(error.message().find("recovery action: GPU reset"), std::string::npos) << error;
  EXPECT_NE(error.message().find("train-worker-0"), std::string::npos) << error;
  std::string metrics = sidecar.Get("/metrics");
  EXPECT_EQ(Sample(metrics, "cohort_gpu_healthy", {{"gpu", "3"}}), 0);
  EXPECT_EQ(Sample(metrics, "cohort_gpu_healthy", {{"gpu", "2"}}), 1);
  EXPECT_EQ(Sample(metrics, "cohort_sidecar_errors_reported_total", {{"reason", "xid"}}), 1);
  EXPECT_EQ(StateOf("sidecar", 0), TaskState::kError);  // the source of the error
  EXPECT_EQ(ReasonOf("sidecar", 0), FailureReason::kGpuFault);
}

TEST_F(SidecarTest, DoubleBitEccAndALostGpuAreReported) {
  StartCoordinator(1);
  ErrorLog errors;
  auto worker = Worker(0, &errors);
  ASSERT_TRUE(worker->Connect().ok());
  SidecarProcess sidecar = StartSidecar(0, 1, "eight_gpus.json");
  ASSERT_TRUE(Eventually([&] { return sidecar.Ready(); }));
  sidecar.Inject("dbe 5 1");
  ASSERT_TRUE(Eventually([&] { return errors.Count() > 0; })) << ReadFile(sidecar.log);
  EXPECT_NE(errors.First().message().find("GPU 5"), std::string::npos) << errors.First();
  sidecar.Inject("lost 6");
  ASSERT_TRUE(Eventually([&] {
    return Sample(sidecar.Get("/metrics"), "cohort_gpu_healthy", {{"gpu", "6"}}) == 0;
  }));
}

// The workload's process dies (SIGKILL) while its task is connected: the sidecar sees it
// through the shared process namespace and the other task hears of it at once, long before
// the coordinator's 60 s heartbeat timeout.
TEST_F(SidecarTest, WorkloadExitWithoutShutdownReachesTheOtherTasks) {
  StartCoordinator(2);
  ErrorLog errors;
  auto other = Worker(1, &errors);
  auto connected = std::async(std::launch::async, [&] { return other->Connect(); });
  std::string coordinator = coordinator_->address();
  Subprocess workload({::cohort::testing::BinDir() + "/cohort-agent-example", "--coordinator",
                       coordinator, "--task", "0", "--num-tasks", "2", "--steps", "1000",
                       "--step-seconds", "1"});
  ASSERT_TRUE(connected.get().ok());
  SidecarProcess sidecar = StartSidecar(
      0, 2, "",
      {"--workload-liveness", "process", "--workload-process",
       absl::StrCat("cohort-agent-example --coordinator ", coordinator, " --task 0 ")});
  ASSERT_TRUE(Eventually([&] {
    return ReadFile(sidecar.log).find("watching workload process") != std::string::npos;
  })) << ReadFile(sidecar.log);
  workload.Signal(SIGKILL);
  ASSERT_TRUE(Eventually([&] { return errors.Count() > 0; })) << ReadFile(sidecar.log);
  // The sidecar's report, not the coordinator's heartbeat timeout ("sent no heartbeat").
  EXPECT_NE(errors.First().message().find("/job:worker/task:0"), std::string::npos)
      << errors.First();
  EXPECT_NE(errors.First().message().find("without shutting down"), std::string::npos);
  EXPECT_EQ(ReasonOf("sidecar", 0), FailureReason::kWorkloadExit);
}

// Kubernetes starts a native sidecar's container again when it dies; the pod's emptyDir (the
// hand-off directory) outlives it. The sidecar comes back as the incarnation it had, so the
// coordinator sees the same task again instead of one that restarted, which would put the
// workload's tasks into ERROR (the sidecar job is not recoverable here).
TEST_F(SidecarTest, ASidecarKilledAndStartedAgainComesBackAsItsIncarnationAndTheJobGoesOn) {
  StartCoordinator(1);
  ErrorLog errors;
  auto worker = Worker(0, &errors);
  ASSERT_TRUE(worker->Connect().ok());
  SidecarProcess first = StartSidecar(0, 1, "");
  ASSERT_TRUE(Eventually([&] { return first.Ready(); })) << ReadFile(first.log);
  auto incarnation_of_sidecar = [&] {
    for (const TaskStateInfo& info : coordinator_->service().AllTasks()) {
      if (info.task.job == "sidecar" && info.task.id == 0) return info.incarnation;
    }
    return uint64_t{0};
  };
  const uint64_t incarnation = incarnation_of_sidecar();
  ASSERT_NE(incarnation, 0u);
  EXPECT_EQ(ReadFile(first.handoff + "/sidecar-incarnation"), absl::StrCat(incarnation, "\n"));

  first.process->Signal(SIGKILL);
  first.process->Wait();
  SidecarProcess second = StartSidecar(0, 1, "", {}, {}, first.handoff);
  ASSERT_TRUE(Eventually([&] { return second.Ready(); })) << ReadFile(second.log);
  EXPECT_NE(ReadFile(second.log)
                .find(absl::StrCat("registering as incarnation ", incarnation,
                                   ", this pod's sidecar's before it restarted")),
            std::string::npos)
      << ReadFile(second.log);
  EXPECT_EQ(incarnation_of_sidecar(), incarnation);
  EXPECT_EQ(StateOf("sidecar", 0), TaskState::kConnected);
  EXPECT_EQ(StateOf("worker", 0), TaskState::kConnected);
  EXPECT_EQ(errors.Count(), 0u) << errors.First();

  // A file that holds no incarnation is replaced by a new one, said in the log.
  second.process->Signal(SIGKILL);
  second.process->Wait();
  std::ofstream(first.handoff + "/sidecar-incarnation") << "garbage\n";
  SidecarProcess third = StartSidecar(0, 1, "", {}, {}, first.handoff);
  ASSERT_TRUE(Eventually([&] {
    return ReadFile(third.log).find("holds no incarnation; starting a new one") !=
           std::string::npos;
  })) << ReadFile(third.log);
  third.process->Signal(SIGTERM);
  third.process->Wait();
}

TEST_F(SidecarTest, WorkloadThatShutDownCleanlyIsNotAFailure) {
  StartCoordinator(1);
  std::string coordinator = coordinator_->address();
  std::string pattern = absl::StrCat("cohort-agent-example --coordinator ", coordinator);
  SidecarProcess sidecar =
      StartSidecar(0, 1, "", {"--workload-liveness", "process", "--workload-process", pattern});
  Subprocess workload({::cohort::testing::BinDir() + "/cohort-agent-example", "--coordinator",
                       coordinator, "--task", "0", "--num-tasks", "1", "--steps", "2",
                       "--step-seconds", "0.5"});
  EXPECT_EQ(workload.Wait().exit_code, 0);
  ASSERT_TRUE(Eventually([&] {
    return ReadFile(sidecar.log).find("so this is not a failure") != std::string::npos;
  })) << ReadFile(sidecar.log);
  EXPECT_EQ(StateOf("worker", 0), TaskState::kDisconnected);
  EXPECT_TRUE(std::isnan(Sample(sidecar.Get("/metrics"), "cohort_sidecar_errors_reported_total")));
}

// A real Prometheus (Debian's package) scrapes two sidecars and the coordinator.
TEST_F(SidecarTest, PrometheusScrapesTwoSidecarsAndTheCoordinator) {
  StartCoordinator(2);
  SidecarProcess first = StartSidecar(0, 2, "eight_gpus.json");
  SidecarProcess second = StartSidecar(1, 2, "eight_gpus.json");
  ASSERT_TRUE(Eventually([&] { return first.Ready() && second.Ready(); }));
  std::string dir = first.handoff + "/../prometheus";
  mkdir(dir.c_str(), 0755);
  std::ofstream(dir + "/prometheus.yml")
      << "global:\n  scrape_interval: 1s\n"
      << "scrape_configs:\n"
      << "  - job_name: sidecars\n    static_configs:\n      - targets: ['127.0.0.1:" << first.port
      << "', '127.0.0.1:" << second.port << "']\n"
      << "  - job_name: coordinator\n    static_configs:\n      - targets: ['127.0.0.1:"
      << coordinator_->http_port() << "']\n";
  int port = FreePort();
  Subprocess prometheus({"/usr/bin/prometheus", "--config.file=" + dir + "/prometheus.yml",
                         "--storage.tsdb.path=" + dir + "/data",
                         absl::StrCat("--web.listen-address=127.0.0.1:", port)},
                        {}, dir + "/prometheus.log");
  auto query = [&](const std::string& promql) {
    int code = 0;
    std::string body =
        HttpGet(absl::StrCat("http://127.0.0.1:", port, "/api/v1/query?query=", promql), &code);
    return code == 200 ? Json::parse(body)["data"]["result"] : Json::array();
  };
  ASSERT_TRUE(Eventually(
      [&] { return query("sum(up)").size() == 1 && query("sum(up)")[0]["value"][1] == "3"; },
      absl::Seconds(60)))
      << ReadFile(dir + "/prometheus.log");
  ASSERT_TRUE(Eventually([&] { return query("cohort_gpu_temperature_celsius").size() == 16; }));
  Json by_pod = query("count%20by%20(pod)%20(cohort_gpu_healthy)");
  EXPECT_EQ(by_pod.size(), 2u) << by_pod.dump();
  EXPECT_EQ(query("cohort_coordinator_tasks").empty(), false);
}

TEST_F(SidecarTest, BadFlagsAreOneClearLine) {
  StartCoordinator(1);
  Subprocess bad({::cohort::testing::BinDir() + "/cohort-sidecar", "--coordinator",
                  coordinator_->address(), "--task", "3", "--num-tasks", "2"});
  ProcessResult result = bad.Wait();
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_EQ(result.err, "cohort-sidecar: --num-tasks \"2\" must be a count above task 3\n");
  Subprocess mode({::cohort::testing::BinDir() + "/cohort-sidecar", "--coordinator",
                   coordinator_->address(), "--workload-liveness", "process"});
  result = mode.Wait();
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_EQ(result.err,
            "cohort-sidecar: --workload-liveness process needs --workload-process REGEX\n");
  // A store for every address, without the job's token: refused, naming the sidecar's flags.
  Subprocess open_store({::cohort::testing::BinDir() + "/cohort-sidecar", "--coordinator",
                         coordinator_->address(), "--task-runtime", "--proxy-listen", "127.0.0.1:0",
                         "--objstore-listen", "0.0.0.0:0", "--objstore-advertise", "127.0.0.1:1",
                         "--http-listen", "127.0.0.1:0"});
  result = open_store.Wait();
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.err.find("--objstore-listen 0.0.0.0:0 reaches beyond this machine"),
            std::string::npos)
      << result.err;
  EXPECT_NE(result.err.find("--objstore-insecure-no-auth"), std::string::npos) << result.err;
}

// The kubelet's PodResources API as a kubelet serves it on its unix socket: one pod whose
// worker container holds two of the node's eight GPUs (the sidecar's own devices and other
// resources are not the pod's GPUs). Records what it was asked.
class FakeKubelet final : public ::v1::PodResourcesLister::Service {
 public:
  explicit FakeKubelet(const std::string& socket) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + socket, grpc::InsecureServerCredentials());
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~FakeKubelet() override { server_->Shutdown(); }
  grpc::Status Get(grpc::ServerContext*, const ::v1::GetPodResourcesRequest* request,
                   ::v1::GetPodResourcesResponse* response) override {
    absl::MutexLock lock(&mu_);
    asked_.push_back(request->pod_namespace() + "/" + request->pod_name());
    if (request->pod_name() != "train-worker-0") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "pod not found");
    }
    ::v1::PodResources* pod = response->mutable_pod_resources();
    pod->set_name(request->pod_name());
    pod->set_namespace_(request->pod_namespace());
    ::v1::ContainerResources* worker = pod->add_containers();
    worker->set_name("worker");
    ::v1::ContainerDevices* gpus = worker->add_devices();
    gpus->set_resource_name("nvidia.com/gpu");
    gpus->add_device_ids("GPU-6f1c3a52-8d2e-4b7a-9c1d-000000001003");
    gpus->add_device_ids("GPU-6f1c3a52-8d2e-4b7a-9c1d-000000001006");
    ::v1::ContainerDevices* other = worker->add_devices();
    other->set_resource_name("example.com/fpga");
    other->add_device_ids("GPU-6f1c3a52-8d2e-4b7a-9c1d-000000001000");
    ::v1::ContainerResources* sidecar = pod->add_containers();
    sidecar->set_name("cohort-sidecar");
    ::v1::ContainerDevices* own = sidecar->add_devices();
    own->set_resource_name("nvidia.com/gpu");
    own->add_device_ids("GPU-6f1c3a52-8d2e-4b7a-9c1d-000000001001");
    return grpc::Status::OK;
  }
  std::vector<std::string> asked() {
    absl::MutexLock lock(&mu_);
    return asked_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> asked_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(SidecarTest, OnANodeOfEightTheSidecarWatchesTheTwoGpusTheKubeletGaveItsPod) {
  StartCoordinator(1);
  const std::string socket = absl::StrCat(::testing::TempDir(), "kubelet-", getpid(), ".sock");
  FakeKubelet kubelet(socket);
  SidecarProcess sidecar = StartSidecar(0, 1, "eight_gpus.json",
                                        {"--pod-resources-socket", socket, "--expected-gpus", "2"});
  ASSERT_TRUE(Eventually([&] { return sidecar.Ready(); })) << ReadFile(sidecar.log);
  EXPECT_EQ(kubelet.asked(), std::vector<std::string>{"ml/train-worker-0"});
  Json cluster = Json::parse(ReadFile(sidecar.handoff + "/cluster.json"));
  ASSERT_EQ(cluster["local_gpus"].size(), 2u) << cluster.dump();
  EXPECT_EQ(cluster["local_gpus"][0]["uuid"], "GPU-6f1c3a52-8d2e-4b7a-9c1d-000000001003");
  EXPECT_EQ(cluster["local_gpus"][1]["uuid"], "GPU-6f1c3a52-8d2e-4b7a-9c1d-000000001006");
  std::string metrics;
  ASSERT_TRUE(Eventually([&] {
    metrics = sidecar.Get("/metrics");
    return !std::isnan(Sample(metrics, "cohort_gpu_temperature_celsius", {{"gpu", "1"}}));
  }));
  EXPECT_EQ(Sample(metrics, "cohort_gpus"), 2);
  // Numbered as the workload's container numbers them: 0 and 1.
  EXPECT_EQ(Sample(metrics, "cohort_gpu_healthy",
                   {{"gpu", "1"}, {"uuid", "GPU-6f1c3a52-8d2e-4b7a-9c1d-000000001006"}}),
            1);
  EXPECT_EQ(Sample(metrics, "cohort_sidecar_gpus_expected"), 2);
  EXPECT_EQ(Sample(metrics, "cohort_sidecar_gpus_missing"), 0);
  const std::string log = ReadFile(sidecar.log);
  EXPECT_NE(log.find("the pod's GPUs: 2 of the 8 NVML shows"), std::string::npos) << log;
  EXPECT_EQ(log.find("cannot see the pod's GPUs"), std::string::npos) << log;
  // A fault on a GPU that is not the pod's is not this pod's to report; one on the pod's is,
  // under the index the workload knows it by.
  sidecar.Inject("xid 0 79");
  sidecar.Inject("xid 3 79");
  ASSERT_TRUE(Eventually([&] {
    return Sample(sidecar.Get("/metrics"), "cohort_sidecar_errors_reported_total",
                  {{"reason", "xid"}}) == 1;
  })) << ReadFile(sidecar.log);
  const std::string reported = ReadFile(sidecar.log);
  EXPECT_NE(reported.find("GPU 0 (GPU-6f1c3a52-8d2e-4b7a-9c1d-000000001003)"), std::string::npos)
      << reported;
  EXPECT_EQ(reported.find("000000001000) of"), std::string::npos) << reported;
}

TEST_F(SidecarTest, ASidecarThatCannotSeeThePodsGpusSaysSoInItsLogAndMetrics) {
  StartCoordinator(3);
  // Two of the four GPUs asked for (--gpu-uuids names the pod's as the node shows them).
  SidecarProcess sidecar = StartSidecar(
      0, 3, "eight_gpus.json",
      {"--gpu-uuids",
       "GPU-6f1c3a52-8d2e-4b7a-9c1d-000000001002,GPU-6f1c3a52-8d2e-4b7a-9c1d-000000009999",
       "--expected-gpus", "4"});
  ASSERT_TRUE(Eventually([&] {
    return !std::isnan(Sample(sidecar.Get("/metrics"), "cohort_sidecar_gpus_missing"));
  })) << ReadFile(sidecar.log);
  std::string metrics = sidecar.Get("/metrics");
  EXPECT_EQ(Sample(metrics, "cohort_gpus"), 1);
  EXPECT_EQ(Sample(metrics, "cohort_sidecar_gpus_expected"), 4);
  EXPECT_EQ(Sample(metrics, "cohort_sidecar_gpus_missing"), 3);
  std::string log = ReadFile(sidecar.log);
  EXPECT_NE(log.find("GPU-6f1c3a52-8d2e-4b7a-9c1d-000000009999 is not among them"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("cannot see the pod's GPUs: its workload asks for 4 (nvidia.com/gpu), the "
                     "sidecar sees 1"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("--sidecar-gpu-access=visible-devices"), std::string::npos) << log;

  // A node without the driver: the same, with NVML's reason.
  SidecarProcess bare = StartSidecar(1, 3, "", {"--expected-gpus", "1"});
  ASSERT_TRUE(Eventually([&] {
    return ReadFile(bare.log).find("cannot see the pod's GPUs") != std::string::npos;
  })) << ReadFile(bare.log);
  EXPECT_NE(ReadFile(bare.log).find("libnvidia-ml"), std::string::npos);

  // A kubelet that does not answer: no GPU is blamed on this pod.
  SidecarProcess lost = StartSidecar(
      2, 3, "eight_gpus.json",
      {"--pod-resources-socket", ::testing::TempDir() + "no-kubelet.sock", "--expected-gpus", "2"});
  ASSERT_TRUE(Eventually([&] {
    return ReadFile(lost.log).find("cannot tell which GPUs are the pod's") != std::string::npos;
  })) << ReadFile(lost.log);
  EXPECT_NE(ReadFile(lost.log).find("watching none"), std::string::npos);
}

TEST_F(SidecarTest, BadGpuFlagsAreOneClearLine) {
  StartCoordinator(1);
  for (const auto& [flags, want] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--expected-gpus", "two"}, "--expected-gpus \"two\" is not a count of GPUs"},
           {{"--gpu-uuids", "GPU-1", "--pod-resources-socket", "/x.sock"},
            "--gpu-uuids and --pod-resources-socket both say"}}) {
    SidecarProcess s = StartSidecar(0, 1, "", flags);
    ProcessResult result = s.process->Wait();
    EXPECT_NE(result.exit_code, 0);
    EXPECT_NE(ReadFile(s.log).find(want), std::string::npos) << ReadFile(s.log);
  }
}

TEST_F(SidecarTest, ACoordinatorWithoutTheSidecarsJobIsNamedOnceWithTheFlagThatFixesIt) {
  coordinator_ = std::make_unique<TestCoordinator>(Jobs(1));  // no --auxiliary-job sidecar=1
  // At debug level every attempt to register is a line: the first says why, and each retry
  // (one every 2 s) is a debug line.
  SidecarProcess sidecar = StartSidecar(0, 1, "", {"--log-level", "debug"});
  // Three tries at least: the first and two retries.
  ASSERT_TRUE(Eventually(
      [&] { return LinesByLevel(ReadFile(sidecar.log), "cannot register ")["debug"] >= 2; },
      absl::Seconds(60)))
      << ReadFile(sidecar.log);
  sidecar.process->Signal(SIGTERM);
  EXPECT_EQ(sidecar.process->Wait().exit_code, 0);
  const std::string log = ReadFile(sidecar.log);
  const std::string hint = "run it with --auxiliary-job sidecar=1";
  std::map<std::string, int> attempts = LinesByLevel(log, "cannot register ");
  std::map<std::string, int> hinted = LinesByLevel(log, hint);
  EXPECT_GE(attempts["debug"], 2) << log;
  // Every retry met the same reason, so only the debug lines repeat it: said once.
  EXPECT_EQ(hinted["debug"], attempts["debug"]) << log;
  int said = 0;
  for (const auto& [level, lines] : hinted) {
    if (level != "debug") said += lines;
  }
  EXPECT_EQ(said, 1) << "said more than once: " << log;
  EXPECT_EQ(log.find("type.googleapis.com"), std::string::npos) << "raw payload bytes: " << log;
  EXPECT_EQ(log.find("entered ERROR"), std::string::npos) << log;
}

TEST_F(SidecarTest, TwoSidecarsOnOnePortAreToldToGiveEachItsOwn) {
  StartCoordinator(2);
  SidecarProcess first = StartSidecar(0, 2, "");
  ASSERT_TRUE(Eventually([&] { return !first.Get("/metrics").empty(); })) << ReadFile(first.log);
  SidecarProcess second =
      StartSidecar(1, 2, "", {"--http-listen", absl::StrCat("127.0.0.1:", first.port)});
  ProcessResult result = second.process->Wait();
  EXPECT_NE(result.exit_code, 0);
  const std::string log = ReadFile(second.log);
  EXPECT_NE(log.find("another sidecar on this host? give each its own --http-listen"),
            std::string::npos)
      << log;
}

TEST_F(SidecarTest, AnAgentExampleToldOfMoreTasksThanTheJobHasSaysSoOnce) {
  coordinator_ = std::make_unique<TestCoordinator>(Jobs(1));
  Subprocess example({::cohort::testing::BinDir() + "/cohort-agent-example", "--coordinator",
                      coordinator_->address(), "--task", "0", "--num-tasks", "2"});
  ProcessResult result = example.Wait(absl::Seconds(30));
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.err,
            "[task 0] check --num-tasks 2 failed: INVALID_ARGUMENT: task id 1 is out of range for "
            "job \"worker\", which has 1 task (ids 0..0)\n");
  ProcessResult bad = Subprocess({::cohort::testing::BinDir() + "/cohort-agent-example", "--task",
                                  "2", "--num-tasks", "2"})
                          .Wait(absl::Seconds(30));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.err, "cohort-agent-example: --task 2 is not one of --num-tasks 2 (0..1)\n");
}

// Run by hand (no POD_NAME), the sidecar names its task without an empty "(pod )", and the
// agent example's failed connect is one line, with the coordinator's reason.
TEST_F(SidecarTest, ByHandTheLogNamesNoEmptyPodAndAFailedConnectIsSaidOnce) {
  StartCoordinator(1);
  const std::string coordinator = coordinator_->address();
  SidecarProcess sidecar = StartSidecar(0, 1, "", {}, {{"POD_NAME", ""}, {"POD_NAMESPACE", ""}});
  ASSERT_TRUE(Eventually([&] { return StateOf("sidecar", 0) == TaskState::kConnected; }))
      << ReadFile(sidecar.log);
  Subprocess example({::cohort::testing::BinDir() + "/cohort-agent-example", "--coordinator",
                      coordinator, "--job", "other", "--task", "0"});
  ProcessResult result = example.Wait(absl::Seconds(30));
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.err, absl::StrCat("[task 0] connect failed: INVALID_ARGUMENT: registering "
                                     "/job:other/task:0 with ",
                                     coordinator,
                                     " failed: unknown job \"other\"; this coordinator serves "
                                     "worker (1 task), sidecar (1 task)\n"));
  // SIGTERM is how Kubernetes stops the pod: every thread must leave it to the one that
  // waits for it, or it kills the sidecar before it says goodbye (exit 143).
  EXPECT_EQ(ThreadsNotBlocking(sidecar.process->pid(), SIGTERM), std::vector<std::string>{});
  sidecar.process->Signal(SIGTERM);
  EXPECT_EQ(sidecar.process->Wait().exit_code, 0);
  const std::string log = ReadFile(sidecar.log);
  EXPECT_NE(log.find("sidecar of /job:worker/task:0 serving"), std::string::npos) << log;
  EXPECT_NE(log.find("sidecar of /job:worker/task:0 stopped"), std::string::npos) << log;
  EXPECT_EQ(log.find("(pod"), std::string::npos) << log;
}

}  // namespace
}  // namespace cohort::testing
