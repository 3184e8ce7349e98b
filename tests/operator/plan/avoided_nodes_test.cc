// Faults blamed on hardware: a worker's GPU fault puts its node in status.avoidedNodes for
// failurePolicy.avoidNodeAfterGPUFault, the workers made meanwhile keep off it, and the entry
// goes when its time is over.
#include <string>
#include <vector>

#include "operator/api/coordinated_job_internal.h"
#include "tests/operator/plan/plan_fixtures.h"

namespace cohort::controller {
// Its own namespace: the unity builds compile this file with others of its test.
namespace avoided_nodes_test {
namespace {

// Worker `index` running on `node`.
ObservedPod On(int index, const std::string& node) {
  ObservedPod p = Worker(index);
  p.node = node;
  return p;
}

// A running gang of 3 on node-a, node-b and node-c, whose worker 1's sidecar reported a GPU
// fault that has settled.
Observed GpuFaultOnWorker1() {
  Observed o = Everything({Coordinator(), On(0, "node-a"), On(1, "node-b"), On(2, "node-c")});
  o.failure_first_seen = kNow - absl::Seconds(30);
  o.coordinator = CoordinatorView{};
  o.coordinator->errors.push_back(
      {"/job:sidecar/task:1", true, 13,
       "GPU 3 (GPU-b3) of worker 1 is unhealthy: XID 79 (GPU has fallen off the bus); recovery "
       "action: GPU reset",
       FailureReason::kGpuFault});
  return o;
}

// The node affinity requirements on field metadata.name of each term of `pod`'s required node
// affinity, as "OPERATOR v1,v2".
std::vector<std::vector<std::string>> FieldTerms(const json& pod) {
  std::vector<std::vector<std::string>> out;
  const json terms = pod.value(
      "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms"_json_pointer,
      json::array());
  for (const json& term : terms) {
    std::vector<std::string> requirements;
    for (const json& r : term.value("matchFields", json::array())) {
      std::string values;
      for (const json& v : r["values"])
        values += (values.empty() ? "" : ",") + v.get<std::string>();
      requirements.push_back(r["key"].get<std::string>() + " " + r["operator"].get<std::string>() +
                             " " + values);
    }
    out.push_back(requirements);
  }
  return out;
}

TEST(AvoidedNodesTest, AGpuFaultAvoidsTheWorkersNodeAndRestartsUncounted) {
  const api::CoordinatedJob job = Job(3, phase::kRunning);
  const Plan plan = PlanJob(job, GpuFaultOnWorker1(), Settings());
  EXPECT_EQ(plan.status.phase, phase::kRestarting);
  EXPECT_EQ(plan.status.restarts, 0);
  EXPECT_EQ(plan.status.uncounted_restarts, 1);
  ASSERT_EQ(plan.status.avoided_nodes.size(), 1u);
  EXPECT_EQ(plan.status.avoided_nodes[0].node, "node-b") << "the faulty worker's node only";
  EXPECT_EQ(plan.status.avoided_nodes[0].until, kNow + absl::Hours(1)) << "the default";
  EXPECT_EQ(plan.status.avoided_nodes[0].reason, "GPUFault");
  EXPECT_NE(plan.status.avoided_nodes[0].message.find("XID 79"), std::string::npos);
  std::string event;
  for (const auto& e : plan.events) {
    if (e.reason == "GPUFault") event = e.message;
  }
  EXPECT_NE(event.find("worker 1 on node node-b: GPU 3 (GPU-b3)"), std::string::npos) << event;
  EXPECT_NE(event.find("recovery action: GPU reset"), std::string::npos) << event;
  EXPECT_NE(event.find("keep off node node-b until"), std::string::npos) << event;
}

TEST(AvoidedNodesTest, ZeroAvoidsNoNodeButStillRestartsUncounted) {
  api::CoordinatedJob job = Job(3, phase::kRunning);
  job.spec.failure_policy.avoid_node_after_gpu_fault = absl::ZeroDuration();
  const Plan plan = PlanJob(job, GpuFaultOnWorker1(), Settings());
  EXPECT_EQ(plan.status.uncounted_restarts, 1);
  EXPECT_TRUE(plan.status.avoided_nodes.empty());
  std::string event;
  for (const auto& e : plan.events) {
    if (e.reason == "GPUFault") event = e.message;
  }
  EXPECT_NE(event.find("the node is not avoided (failurePolicy.avoidNodeAfterGPUFault 0s)"),
            std::string::npos)
      << event;
}

TEST(AvoidedNodesTest, AnUnscheduledWorkersFaultAvoidsNothing) {
  Observed o = GpuFaultOnWorker1();
  for (ObservedPod& p : o.pods) p.node.clear();
  const Plan plan = PlanJob(Job(3, phase::kRunning), o, Settings());
  EXPECT_EQ(plan.status.uncounted_restarts, 1);
  EXPECT_TRUE(plan.status.avoided_nodes.empty());
}

TEST(AvoidedNodesTest, TheNextGangsWorkersKeepOffTheNodeUntilTheTimeIsOver) {
  api::CoordinatedJob job = Job(3, phase::kRestarting);
  job.status.uncounted_restarts = 1;
  job.status.avoided_nodes = {{"node-b", kNow + absl::Minutes(20), "GPUFault", "XID 79"},
                              {"node-x", kNow - absl::Seconds(1), "GPUFault", "over"}};
  Observed o = Everything({Coordinator(1)});
  const Plan plan = PlanJob(job, o, Settings());
  ASSERT_EQ(plan.status.avoided_nodes.size(), 1u) << "node-x's time is over";
  EXPECT_EQ(plan.status.avoided_nodes[0].node, "node-b");
  ASSERT_TRUE(plan.requeue_after.has_value());
  EXPECT_LE(*plan.requeue_after, absl::Minutes(20));
  int workers = 0;
  for (const json& pod : plan.create) {
    if (pod["kind"] != "Pod") continue;
    const std::string name = pod["metadata"]["name"];
    if (name.find("-worker-") == std::string::npos) {
      EXPECT_TRUE(FieldTerms(pod).empty()) << name << ": only workers keep off the node";
      continue;
    }
    ++workers;
    EXPECT_EQ(FieldTerms(pod),
              (std::vector<std::vector<std::string>>{{"metadata.name NotIn node-b"}}))
        << name;
  }
  EXPECT_EQ(workers, 3);

  // Once it is over, the workers made are as before.
  Observed later = o;
  later.now = kNow + absl::Minutes(21);
  const Plan after = PlanJob(job, later, Settings());
  EXPECT_TRUE(after.status.avoided_nodes.empty());
  for (const json& pod : after.create) {
    if (pod["kind"] == "Pod") {
      EXPECT_TRUE(FieldTerms(pod).empty());
    }
  }
}

TEST(AvoidedNodesTest, EachOfTheTemplatesTermsGainsTheExclusion) {
  json pod = {
      {"spec",
       {{"affinity",
         {{"nodeAffinity",
           {{"requiredDuringSchedulingIgnoredDuringExecution",
             {{"nodeSelectorTerms",
               json::array(
                   {{{"matchExpressions",
                      json::array({{{"key", "gpu"}, {"operator", "In"}, {"values", {"h100"}}}})}},
                    {{"matchFields", json::array({{{"key", "metadata.name"},
                                                   {"operator", "In"},
                                                   {"values", {"n1", "n2"}}}})}}})}}}}}}}}}};
  AvoidNodes({"n2", "n3"}, &pod);
  EXPECT_EQ(FieldTerms(pod), (std::vector<std::vector<std::string>>{
                                 {"metadata.name NotIn n2,n3"},
                                 {"metadata.name In n1,n2", "metadata.name NotIn n2,n3"}}));
  const json& first = pod["spec"]["affinity"]["nodeAffinity"]
                         ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0];
  EXPECT_EQ(first["matchExpressions"][0]["key"], "gpu") << "the template's own stay";

  json plain = {{"spec", json::object()}};
  AvoidNodes({}, &plain);
  EXPECT_EQ(plain, (json{{"spec", json::object()}})) << "nothing to avoid changes nothing";
}

TEST(AvoidedNodesTest, TheListIsBoundedAndANodeIsListedOnce) {
  api::CoordinatedJob full = Job(3, phase::kRunning);
  for (size_t i = 0; i < api::kMaxAvoidedNodes; ++i) {
    full.status.avoided_nodes.push_back({"old-" + std::to_string(i),
                                         kNow + absl::Minutes(1 + static_cast<int>(i)), "GPUFault",
                                         ""});
  }
  const Plan plan = PlanJob(full, GpuFaultOnWorker1(), Settings());
  ASSERT_EQ(plan.status.avoided_nodes.size(), api::kMaxAvoidedNodes);
  EXPECT_EQ(plan.status.avoided_nodes.front().node, "old-1") << "the one ending first made room";
  EXPECT_EQ(plan.status.avoided_nodes.back().node, "node-b");

  api::CoordinatedJob listed = Job(3, phase::kRunning);
  listed.status.avoided_nodes = {{"node-b", kNow + absl::Minutes(5), "GPUFault", "before"}};
  const Plan again = PlanJob(listed, GpuFaultOnWorker1(), Settings());
  ASSERT_EQ(again.status.avoided_nodes.size(), 1u) << "listed once";
  EXPECT_EQ(again.status.avoided_nodes[0].until, kNow + absl::Hours(1)) << "for longer";
  EXPECT_NE(again.status.avoided_nodes[0].message.find("XID 79"), std::string::npos);
}

TEST(AvoidedNodesTest, StatusAndPolicyRoundTrip) {
  api::JobStatus st;
  st.avoided_nodes = {{"node-b", kNow + absl::Hours(1), "GPUFault", "XID 79"}};
  const api::JobStatus back = api::internal::ParseJobStatus(api::StatusToJson(st), 3);
  EXPECT_EQ(back.avoided_nodes, st.avoided_nodes);

  api::FailurePolicy policy;
  EXPECT_EQ(policy.avoid_node_after_gpu_fault, absl::Hours(1));
  ASSERT_TRUE(api::ParseFailureRules({{"avoidNodeAfterGPUFault", "30m"}}, &policy).ok());
  EXPECT_EQ(policy.avoid_node_after_gpu_fault, absl::Minutes(30));
  ASSERT_TRUE(api::ParseFailureRules({{"avoidNodeAfterGPUFault", "0s"}}, &policy).ok());
  EXPECT_EQ(policy.avoid_node_after_gpu_fault, absl::ZeroDuration());
  for (const json& bad : {json("soon"), json(3600), json("-1h"), json("1000h")}) {
    api::FailurePolicy untouched;
    const absl::Status s = api::ParseFailureRules({{"avoidNodeAfterGPUFault", bad}}, &untouched);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("avoidNodeAfterGPUFault"), std::string::npos) << s;
  }
}

}  // namespace
}  // namespace avoided_nodes_test
}  // namespace cohort::controller
