// The reconcile loop without a cluster: JobController with its informers on a FakeClient and a
// ManualClock. Each case starts from objects in the fake API server, lets the "kubelet" (the
// test) move pods along, reconciles, and checks what the controller wrote: the calls the fake
// recorded, and the job's status as stored. The same loop runs against the real API server in
// tests/e2e.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/metrics.h"
#include "operator/controller/job_controller.h"
#include "operator/kube/fake_client.h"

namespace cohort::controller {
namespace {

using json = nlohmann::json;
namespace phase = api::phase;

const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);
constexpr char kNs[] = "ml";
constexpr char kKey[] = "ml/train";

json Job(int replicas = 2) {
  return {
      {"apiVersion", "cohort.dev/v1alpha1"},
      {"kind", "CoordinatedJob"},
      {"metadata", {{"name", "train"}, {"namespace", kNs}}},
      {"spec",
       {{"replicas", replicas},
        {"template",
         {{"spec",
           {{"containers", json::array({{{"name", "worker"}, {"image", "example/w:1"}}})}}}}}}}};
}

class ReconcileTest : public ::testing::Test {
 protected:
  void Start(JobController::Options options = {}) {
    options.clock = &clock_;
    options.namespace_name = kNs;
    if (options.kueue == "auto") options.kueue = "off";
    controller_ = std::make_unique<JobController>(client_.get(), metrics_.get(), options);
    start_status_ = controller_->StartAndSync(stop_);
    // An informer per resource: the job's, six children's, and with Kueue Workloads and
    // ResourceFlavors.
    watches_ = start_status_.ok() ? (controller_->kueue() ? 9 : 7) : 0;
  }
  void TearDown() override {
    client_->Shutdown();
    if (controller_) controller_->Stop();
  }
  // Another cluster from scratch, for the next case of a table.
  void Reset() {
    TearDown();
    controller_.reset();
    client_ = std::make_unique<kube::FakeClient>(&clock_);
    metrics_ = std::make_unique<MetricsRegistry>();
  }

  // Reconciles once with the caches current, and returns what it wrote (events apart, their
  // names are generated), sorted: creates of one kind go out in parallel.
  std::vector<std::string> Reconcile(absl::Status* status = nullptr) {
    EXPECT_TRUE(client_->WaitForWatches(watches_));
    client_->ClearActions();
    absl::Status s = controller_->ReconcileNow(kKey);
    if (status) {
      *status = s;
    } else {
      EXPECT_TRUE(s.ok()) << s;
    }
    EXPECT_TRUE(client_->WaitForWatches(watches_));
    std::vector<std::string> writes;
    for (const std::string& w : client_->Writes()) {
      if (w.rfind("create events ", 0) != 0) writes.push_back(w);
    }
    std::sort(writes.begin(), writes.end());
    return writes;
  }
  // The Events recorded so far with this reason, in order.
  std::vector<json> EventsOf(const std::string& reason) {
    std::vector<json> out;
    auto events = client_->List(kube::kEvents, kNs, {});
    for (const json& e : (*events)["items"]) {
      if (e.value("reason", "") == reason) out.push_back(e);
    }
    return out;
  }
  // The reasons of the Events recorded so far, in order.
  std::vector<std::string> EventReasons() {
    std::vector<std::string> out;
    auto events = client_->List(kube::kEvents, kNs, {});
    for (const json& e : (*events)["items"]) out.push_back(e.value("reason", ""));
    return out;
  }
  json Status() {
    auto job = client_->Peek(kube::kCoordinatedJobs, kNs, "train");
    return job ? job->value("status", json()) : json();
  }
  // The kubelet's part: a pod's status as it runs or ends.
  void SetPod(const std::string& name, const std::string& pod_phase, bool ready,
              std::optional<int> exit_code = std::nullopt) {
    json pod = *client_->Peek(kube::kPods, kNs, name);
    const std::string container = pod["spec"]["containers"][0]["name"];
    json state = {{"running", {{"startedAt", api::FormatRfc3339(clock_.Now())}}}};
    if (exit_code) {
      state = {{"terminated",
                {{"exitCode", *exit_code},
                 {"reason", *exit_code == 0 ? "Completed" : "Error"},
                 {"finishedAt", api::FormatRfc3339(clock_.Now())}}}};
    }
    pod["status"] = {
        {"phase", pod_phase},
        {"conditions", json::array({{{"type", "Ready"}, {"status", ready ? "True" : "False"}}})},
        {"containerStatuses", json::array({{{"name", container}, {"state", state}}})}};
    ASSERT_TRUE(client_->Replace(kube::kPods, kNs, name, pod, "status").ok());
  }
  // From a new job to its gang running: children, coordinator, workers.
  void RunGang(int replicas) {
    Reconcile();  // token, policy, config, services
    Reconcile();  // the coordinator
    SetPod("train-coordinator", "Running", true);
    Reconcile();  // the workers
    for (int i = 0; i < replicas; ++i) SetPod("train-worker-" + std::to_string(i), "Running", true);
    Reconcile();
    ASSERT_EQ(Status().value("phase", ""), phase::kRunning) << Status().dump();
  }

  ManualClock clock_{kStart};
  std::unique_ptr<kube::FakeClient> client_ = std::make_unique<kube::FakeClient>(&clock_);
  std::unique_ptr<MetricsRegistry> metrics_ = std::make_unique<MetricsRegistry>();
  std::atomic<bool> stop_{false};
  std::unique_ptr<JobController> controller_;
  absl::Status start_status_;
  size_t watches_ = 0;
};

// One reconcile from a starting state: what it writes, and the phase it leaves.
struct Case {
  std::string name;
  std::function<void(json& job)> spec;  // changes to the job before it is stored
  std::vector<std::string> writes;      // after the first reconcile, sorted
  std::string phase;
};

TEST_F(ReconcileTest, TheFirstReconcileOfAJobMakesWhatItsSpecAsksFor) {
  const std::vector<Case> cases = {
      {"a new job: its Secret, NetworkPolicy, ConfigMap and Services, status Pending",
       [](json&) {},
       {"create configmaps ml/train-coordinator", "create networkpolicies ml/train-isolation",
        "create secrets ml/train-token", "create services ml/train-coordinator",
        "create services ml/train-workers", "update coordinatedjobs/status ml/train"},
       phase::kPending},
      {"a suspended job: nothing but its status",
       [](json& j) { j["spec"]["suspend"] = true; },
       {"update coordinatedjobs/status ml/train"},
       phase::kSuspended},
      {"a coordinator with its state on a claim: the claim too",
       [](json& j) {
         j["spec"]["coordinator"]["state"] = {{"volume", "PersistentVolumeClaim"}};
       },
       {"create configmaps ml/train-coordinator", "create networkpolicies ml/train-isolation",
        "create persistentvolumeclaims ml/train-coordinator-state", "create secrets ml/train-token",
        "create services ml/train-coordinator", "create services ml/train-workers",
        "update coordinatedjobs/status ml/train"},
       phase::kPending},
      {"gang scheduling: no PodGroup yet (it comes with the workers, its only members)",
       [](json& j) {
         j["spec"]["gangScheduling"] = {{"podGroup", "SchedulerPlugins"}};
       },
       {"create configmaps ml/train-coordinator", "create networkpolicies ml/train-isolation",
        "create secrets ml/train-token", "create services ml/train-coordinator",
        "create services ml/train-workers", "update coordinatedjobs/status ml/train"},
       phase::kPending},
      {"a spec the CRD would refuse: Failed, InvalidSpec, nothing made",
       [](json& j) { j["spec"]["replicas"] = "two"; },
       {"update coordinatedjobs/status ml/train"},
       phase::kFailed},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Reset();
    json job = Job();
    c.spec(job);
    client_->Add(kube::kCoordinatedJobs, job);
    Start();
    ASSERT_TRUE(start_status_.ok()) << start_status_;
    EXPECT_EQ(Reconcile(), c.writes);
    EXPECT_EQ(Status().value("phase", ""), c.phase) << Status().dump();
  }
}

json StorageClass(const std::string& name, bool is_default) {
  json sc = {{"apiVersion", "storage.k8s.io/v1"},
             {"kind", "StorageClass"},
             {"metadata", {{"name", name}}},
             {"provisioner", "example.com/disk"}};
  if (is_default) {
    sc["metadata"]["annotations"] = {{"storageclass.kubernetes.io/is-default-class", "true"}};
  }
  return sc;
}

// spec.coordinator.state.volume Auto (the default) on a cluster with a default StorageClass:
// the state goes on a claim, chosen once and kept, whatever the cluster's classes do later.
TEST_F(ReconcileTest, StateVolumeAutoTakesAClaimWhereTheClusterHasADefaultStorageClass) {
  client_->Add(kube::kStorageClasses, StorageClass("slow", false));
  client_->Add(kube::kStorageClasses, StorageClass("standard", true));
  client_->Add(kube::kCoordinatedJobs, Job(1));
  Start();
  ASSERT_TRUE(start_status_.ok()) << start_status_;
  std::vector<std::string> writes = Reconcile();
  EXPECT_NE(std::find(writes.begin(), writes.end(),
                      "create persistentvolumeclaims ml/train-coordinator-state"),
            writes.end());
  EXPECT_EQ(Status().value("coordinatorStateVolume", ""), "PersistentVolumeClaim");
  ASSERT_EQ(EventsOf("StateVolume").size(), 1u);
  const json event = EventsOf("StateVolume")[0];
  EXPECT_EQ(event["type"], "Normal");
  EXPECT_NE(event["message"].get<std::string>().find(
                "PersistentVolumeClaim train-coordinator-state (1Gi, StorageClass standard, the "
                "cluster's default)"),
            std::string::npos)
      << event.dump();

  // The default class goes; the job keeps its claim, and its coordinator mounts it.
  ASSERT_TRUE(client_->Delete(kube::kStorageClasses, "", "standard", {}).ok());
  Reconcile();  // the coordinator
  EXPECT_EQ(Status().value("coordinatorStateVolume", ""), "PersistentVolumeClaim");
  auto pod = client_->Peek(kube::kPods, kNs, "train-coordinator");
  ASSERT_TRUE(pod.has_value());
  bool on_claim = false;
  for (const json& v : (*pod)["spec"]["volumes"]) {
    on_claim |= v.value(json::json_pointer("/persistentVolumeClaim/claimName"), "") ==
                "train-coordinator-state";
  }
  EXPECT_TRUE(on_claim) << (*pod)["spec"]["volumes"].dump();
  EXPECT_EQ(EventsOf("StateVolume").size(), 1u);  // said once
  // The classes are not listed again once the choice is made.
  for (const auto& a : client_->Actions()) EXPECT_NE(a.resource, "storageclasses") << a.ToString();
}

TEST_F(ReconcileTest, StateVolumeAutoIsAnEmptyDirSaidInAWarningWhereNoClassIsTheDefault) {
  const std::vector<std::pair<std::string, std::function<void()>>> clusters = {
      {"no default StorageClass",
       [&] { client_->Add(kube::kStorageClasses, StorageClass("slow", false)); }},
      {"the operator may not list StorageClasses",
       [&] {
         client_->Add(kube::kStorageClasses, StorageClass("standard", true));
         client_->FailNext("list", "storageclasses",
                           absl::PermissionDeniedError("storageclasses is forbidden"));
       }},
  };
  for (const auto& [name, setup] : clusters) {
    SCOPED_TRACE(name);
    Reset();
    client_->Add(kube::kCoordinatedJobs, Job(1));
    Start();
    ASSERT_TRUE(start_status_.ok()) << start_status_;
    setup();
    std::vector<std::string> writes = Reconcile();
    for (const std::string& w : writes)
      EXPECT_EQ(w.find("persistentvolumeclaims"), std::string::npos);
    EXPECT_EQ(Status().value("coordinatorStateVolume", ""), "EmptyDir");
    ASSERT_EQ(EventsOf("StateVolume").size(), 1u);
    const json event = EventsOf("StateVolume")[0];
    EXPECT_EQ(event["type"], "Warning");
    EXPECT_EQ(event["reason"], "StateVolume");
    const std::string message = event["message"];
    EXPECT_NE(message.find(name), std::string::npos) << message;
    EXPECT_NE(message.find("outlives the coordinator's process but not its pod"), std::string::npos)
        << message;
    EXPECT_NE(message.find("storageClassName"), std::string::npos) << message;
    // A default class made later changes nothing for this job.
    client_->Add(kube::kStorageClasses, StorageClass("late", true));
    Reconcile();
    auto pod = client_->Peek(kube::kPods, kNs, "train-coordinator");
    ASSERT_TRUE(pod.has_value());
    bool empty_dir = false;
    for (const json& v : (*pod)["spec"]["volumes"]) {
      empty_dir |= v.value("name", "") == "state" && v.contains("emptyDir");
    }
    EXPECT_TRUE(empty_dir) << (*pod)["spec"]["volumes"].dump();
    EXPECT_EQ(Status().value("coordinatorStateVolume", ""), "EmptyDir");
  }
}

TEST_F(ReconcileTest, StateVolumeAutoWaitsWhenTheClassesCannotBeListedForAnotherReason) {
  client_->Add(kube::kStorageClasses, StorageClass("standard", true));
  client_->Add(kube::kCoordinatedJobs, Job(1));
  Start();
  ASSERT_TRUE(start_status_.ok()) << start_status_;
  client_->FailNext("list", "storageclasses", absl::UnavailableError("the API server is away"));
  absl::Status status;
  EXPECT_TRUE(Reconcile(&status).empty());  // nothing written
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(status.message().find("cannot list StorageClasses"), std::string::npos) << status;
  // Tried again: the claim.
  Reconcile();
  EXPECT_EQ(Status().value("coordinatorStateVolume", ""), "PersistentVolumeClaim");
}

TEST_F(ReconcileTest, AGangStartsInOrderCoordinatorFirstThenItsWorkers) {
  client_->Add(kube::kCoordinatedJobs, Job(2));
  Start();
  ASSERT_TRUE(start_status_.ok()) << start_status_;
  const std::vector<std::string> status = {"update coordinatedjobs/status ml/train"};
  Reconcile();
  // Each status write says what the job waits for (the Ready condition's message).
  EXPECT_EQ(Reconcile(), (std::vector<std::string>{"create pods ml/train-coordinator",
                                                   "update coordinatedjobs/status ml/train"}));
  EXPECT_EQ(Reconcile(), status) << "the coordinator pod noted (status.coordinatorPod)";
  EXPECT_EQ(Reconcile(), std::vector<std::string>{}) << "no worker before the coordinator is ready";
  EXPECT_EQ(Status()["coordinatorPod"]["uid"],
            kube::Uid(*client_->Peek(kube::kPods, kNs, "train-coordinator")));
  SetPod("train-coordinator", "Running", true);
  EXPECT_EQ(Reconcile(), (std::vector<std::string>{"create pods ml/train-worker-0",
                                                   "create pods ml/train-worker-1",
                                                   "update coordinatedjobs/status ml/train"}));
  SetPod("train-worker-0", "Running", true);
  SetPod("train-worker-1", "Running", true);
  EXPECT_EQ(Reconcile(), std::vector<std::string>{"update coordinatedjobs/status ml/train"});
  EXPECT_EQ(Status()["phase"], phase::kRunning);
  EXPECT_EQ(Reconcile(), std::vector<std::string>{}) << "a second look changes nothing";
  // Both workers exit 0: the job succeeds, and the coordinator goes.
  SetPod("train-worker-0", "Succeeded", false, 0);
  SetPod("train-worker-1", "Succeeded", false, 0);
  EXPECT_EQ(Reconcile(), (std::vector<std::string>{"delete pods ml/train-coordinator",
                                                   "update coordinatedjobs/status ml/train"}));
  EXPECT_EQ(Status()["phase"], phase::kSucceeded);
  const std::vector<std::string> events = EventReasons();
  EXPECT_NE(std::find(events.begin(), events.end(), "AllWorkersSucceeded"), events.end());
}

TEST_F(ReconcileTest, AFailureSettlesOnTheClockThenRestartsTheGangCountingIt) {
  client_->Add(kube::kCoordinatedJobs, Job(2));
  Start();
  RunGang(2);
  SetPod("train-worker-1", "Failed", false, 137);
  // Seen, not decided: the rest of the gang has a second (--failure-settle) to report. The
  // status counts the failed worker.
  EXPECT_EQ(Reconcile(), std::vector<std::string>{"update coordinatedjobs/status ml/train"});
  EXPECT_EQ(Status()["tasks"]["failed"], 1);
  EXPECT_EQ(Status()["phase"], phase::kRunning);
  auto delayed = controller_->queue().Delayed();
  ASSERT_FALSE(delayed.empty());
  EXPECT_EQ(delayed.front().second, kKey);
  EXPECT_LE(delayed.front().first, clock_.Now() + absl::Seconds(1));
  clock_.Advance(absl::Seconds(2));
  EXPECT_EQ(Reconcile(),
            (std::vector<std::string>{
                "delete pods ml/train-coordinator", "delete pods ml/train-worker-0",
                "delete pods ml/train-worker-1", "update coordinatedjobs/status ml/train"}));
  EXPECT_EQ(Status()["phase"], phase::kRestarting);
  EXPECT_EQ(Status()["restarts"], 1);
  // The old gang gone, the next one starts with a coordinator of gang 1.
  EXPECT_EQ(Reconcile(), (std::vector<std::string>{"create pods ml/train-coordinator",
                                                   "update coordinatedjobs/status ml/train"}));
  EXPECT_EQ(client_->Peek(kube::kPods, kNs, "train-coordinator")
                ->at("metadata")["labels"]["cohort.dev/restart"],
            "1");
}

TEST_F(ReconcileTest, RestartWorkerReplacesOnlyTheFailedWorkersPod) {
  json job = Job(3);
  job["spec"]["coordinator"] = {{"recoverable", true}};
  job["spec"]["failurePolicy"] = {
      {"maxRestarts", 2},
      {"rules", json::array({{{"action", "RestartWorker"}, {"onExitCodes", {3}}}})}};
  client_->Add(kube::kCoordinatedJobs, job);
  Start();
  RunGang(3);
  const std::string old_uid = kube::Uid(*client_->Peek(kube::kPods, kNs, "train-worker-1"));
  SetPod("train-worker-1", "Failed", false, 3);
  Reconcile();
  clock_.Advance(absl::Seconds(2));
  EXPECT_EQ(Reconcile(), (std::vector<std::string>{"delete pods ml/train-worker-1",
                                                   "update coordinatedjobs/status ml/train"}));
  EXPECT_EQ(Status()["phase"], phase::kRunning);
  EXPECT_EQ(Status()["workerRestarts"], 1);
  EXPECT_EQ(Status()["restartingWorkers"][0]["uid"], old_uid);
  // The pod is gone (no finalizer in the fake): made again, same name, same gang.
  EXPECT_EQ(Reconcile(), (std::vector<std::string>{"create pods ml/train-worker-1",
                                                   "update coordinatedjobs/status ml/train"}));
  const json successor = *client_->Peek(kube::kPods, kNs, "train-worker-1");
  EXPECT_NE(kube::Uid(successor), old_uid);
  EXPECT_EQ(successor["metadata"]["labels"]["cohort.dev/restart"], "0");
  const std::vector<std::string> events = EventReasons();
  EXPECT_NE(std::find(events.begin(), events.end(), "WorkerRestart"), events.end());
}

TEST_F(ReconcileTest, ATtlDeletesAFinishedJobWhenItsTimeComes) {
  json job = Job(1);
  job["spec"]["ttlSecondsAfterFinished"] = 60;
  client_->Add(kube::kCoordinatedJobs, job);
  Start();
  RunGang(1);
  SetPod("train-worker-0", "Succeeded", false, 0);
  Reconcile();
  ASSERT_EQ(Status()["phase"], phase::kSucceeded);
  auto delayed = controller_->queue().Delayed();
  ASSERT_FALSE(delayed.empty());
  EXPECT_EQ(delayed.back().first, kStart + absl::Seconds(60));
  clock_.Advance(absl::Seconds(59));
  EXPECT_EQ(Reconcile(), std::vector<std::string>{});
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(Reconcile(), std::vector<std::string>{"delete coordinatedjobs ml/train"});
  EXPECT_FALSE(client_->Peek(kube::kCoordinatedJobs, kNs, "train"));
}

TEST_F(ReconcileTest, AConflictOnTheStatusStopsTheReconcileBeforeAnyChild) {
  client_->Add(kube::kCoordinatedJobs, Job(2));
  Start();
  client_->FailNext("update", "coordinatedjobs",
                    absl::AbortedError("the object has been modified"));
  absl::Status status;
  EXPECT_EQ(Reconcile(&status), std::vector<std::string>{"update coordinatedjobs/status ml/train"});
  EXPECT_TRUE(absl::IsAborted(status)) << status;
  EXPECT_FALSE(client_->Peek(kube::kSecrets, kNs, "train-token")) << "nothing made after it";
  // The next reconcile does it all.
  EXPECT_EQ(Reconcile().size(), 6u);
}

TEST_F(ReconcileTest, KueueOnWithoutItsApiRefusesToStartAndAQueuedJobWaitsForAdmission) {
  client_->Unserve(kube::kWorkloads);
  JobController::Options on;
  on.kueue = "on";
  Start(on);
  EXPECT_TRUE(absl::IsFailedPrecondition(start_status_)) << start_status_;
  EXPECT_NE(start_status_.message().find("install Kueue"), std::string::npos);
}

TEST_F(ReconcileTest, AQueuedJobMakesItsWorkloadAndNoPodUntilAdmitted) {
  json job = Job(2);
  job["metadata"]["labels"] = {{"kueue.x-k8s.io/queue-name", "team-a"},
                               {"kueue.x-k8s.io/priority-class", "production"}};
  client_->Add(kube::kCoordinatedJobs, job);
  client_->Add(kube::kWorkloadPriorityClasses,
               {{"metadata", {{"name", "production"}}}, {"value", 10000}});
  JobController::Options on;
  on.kueue = "on";
  Start(on);
  ASSERT_TRUE(start_status_.ok()) << start_status_;
  const std::vector<std::string> writes = Reconcile();
  ASSERT_FALSE(writes.empty());
  EXPECT_EQ(
      std::count_if(writes.begin(), writes.end(),
                    [](const std::string& w) { return w.rfind("create workloads ml/", 0) == 0; }),
      1)
      << ::testing::PrintToString(writes);
  for (const std::string& w : writes) EXPECT_EQ(w.find("create pods"), std::string::npos) << w;
  EXPECT_EQ(Status()["phase"], phase::kSuspended);
  auto workloads = client_->List(kube::kWorkloads, kNs, {});
  ASSERT_EQ((*workloads)["items"].size(), 1u);
  EXPECT_EQ((*workloads)["items"][0]["spec"]["priority"], 10000);
  EXPECT_EQ((*workloads)["items"][0]["spec"]["priorityClassRef"]["name"], "production");
}

}  // namespace
}  // namespace cohort::controller
