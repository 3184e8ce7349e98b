// FakeClient keeps the API server's rules the operator depends on (the reconcile tests trust
// it), and the informer and the Lease election run on it: a cache that follows writes, and a
// lease taken over on a ManualClock.
#include "operator/kube/fake_client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>

#include "operator/kube/informer.h"
#include "operator/kube/leader_election.h"

namespace cohort::kube {
namespace {

json Pod(const std::string& name, json labels = json::object()) {
  return {{"metadata", {{"name", name}, {"namespace", "ml"}, {"labels", std::move(labels)}}},
          {"spec", {{"containers", json::array({{{"name", "w"}}})}}}};
}

TEST(FakeClientTest, WritesFollowTheApiServersRules) {
  FakeClient client;
  auto created = client.Create(kPods, "ml", Pod("a"));
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_FALSE(Uid(*created).empty());
  EXPECT_EQ((*created)["kind"], "Pod");
  EXPECT_TRUE(absl::IsAlreadyExists(client.Create(kPods, "ml", Pod("a")).status()));
  EXPECT_TRUE(absl::IsNotFound(client.Get(kPods, "ml", "b").status()));

  // A write conditional on an old resourceVersion is a conflict and changes nothing.
  json stale = *created;
  json changed = *created;
  changed["spec"]["nodeName"] = "n1";
  auto updated = client.Replace(kPods, "ml", "a", changed);
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_EQ((*updated)["metadata"]["generation"], 2) << "the spec changed";
  stale["spec"]["nodeName"] = "n2";
  EXPECT_TRUE(absl::IsAborted(client.Replace(kPods, "ml", "a", stale).status()));
  EXPECT_EQ((*client.Get(kPods, "ml", "a"))["spec"]["nodeName"], "n1");

  // The status subresource writes the status alone; the object's PUT leaves it alone.
  json with_status = *updated;
  with_status["status"] = {{"phase", "Running"}};
  with_status["spec"]["nodeName"] = "ignored";
  auto status = client.Replace(kPods, "ml", "a", with_status, "status");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ((*status)["status"]["phase"], "Running");
  EXPECT_EQ((*status)["spec"]["nodeName"], "n1");
  EXPECT_EQ((*status)["metadata"]["generation"], 2);
  json without_status = *status;
  without_status.erase("status");
  EXPECT_EQ((*client.Replace(kPods, "ml", "a", without_status))["status"]["phase"], "Running");

  // Patches: merge and JSON patch; one that does not apply changes nothing.
  EXPECT_TRUE(
      client.Patch(kPods, "ml", "a", PatchType::kMerge, {{"metadata", {{"labels", {{"x", "1"}}}}}})
          .ok());
  EXPECT_EQ((*client.Get(kPods, "ml", "a"))["metadata"]["labels"]["x"], "1");
  EXPECT_TRUE(
      absl::IsInvalidArgument(client
                                  .Patch(kPods, "ml", "a", PatchType::kJsonPatch,
                                         json::array({{{"op", "remove"}, {"path", "/spec/nope"}}}))
                                  .status()));

  // Deletion: a precondition on another uid is refused; finalizers hold the object, deleting
  // then, until the last goes.
  DeleteOptions other;
  other.precondition_uid = "someone-else";
  EXPECT_TRUE(absl::IsAborted(client.Delete(kPods, "ml", "a", other)));
  json held = Pod("held");
  held["metadata"]["finalizers"] = {"example.com/keep"};
  ASSERT_TRUE(client.Create(kPods, "ml", held).ok());
  ASSERT_TRUE(client.Delete(kPods, "ml", "held").ok());
  json terminating = *client.Get(kPods, "ml", "held");
  EXPECT_TRUE(terminating["metadata"].contains("deletionTimestamp"));
  terminating["metadata"]["finalizers"] = json::array();
  ASSERT_TRUE(client.Replace(kPods, "ml", "held", terminating).ok());
  EXPECT_TRUE(absl::IsNotFound(client.Get(kPods, "ml", "held").status()));

  // Injected failures happen once and change nothing; an unserved resource is NotFound.
  client.FailNext("create", "pods", absl::UnavailableError("etcd is down"));
  EXPECT_TRUE(absl::IsUnavailable(client.Create(kPods, "ml", Pod("c")).status()));
  EXPECT_TRUE(client.Create(kPods, "ml", Pod("c")).ok());
  client.Unserve(kWorkloads);
  EXPECT_TRUE(absl::IsNotFound(client.List(kWorkloads, "ml", {}).status()));
  EXPECT_EQ(client.Writes().front(), "create pods ml/a");
}

TEST(FakeClientTest, SelectorsAreTheApiServersOnes) {
  const json pod = Pod("a", {{"role", "worker"}, {"gang", "2"}});
  const auto matches = [&pod](const std::string& labels, const std::string& fields = "") {
    ListOptions options;
    options.label_selector = labels;
    options.field_selector = fields;
    auto m = MatchesSelectors(pod, options);
    EXPECT_TRUE(m.ok()) << labels << " " << fields << ": " << m.status();
    return m.ok() && *m;
  };
  EXPECT_TRUE(matches(""));
  EXPECT_TRUE(matches("role=worker,gang"));
  EXPECT_TRUE(matches("role==worker,!missing"));
  EXPECT_FALSE(matches("role!=worker"));
  EXPECT_TRUE(matches("gang in (1, 2)"));
  EXPECT_FALSE(matches("gang notin (1,2)"));
  EXPECT_FALSE(matches("missing"));
  EXPECT_TRUE(matches("", "metadata.name=a,metadata.namespace!=other"));
  EXPECT_FALSE(matches("", "metadata.name=b"));
  ListOptions bad;
  bad.label_selector = "gang in 1,2";
  EXPECT_FALSE(MatchesSelectors(pod, bad).ok());
}

TEST(FakeClientTest, AnInformersCacheFollowsWritesFromItsListsVersion) {
  FakeClient client;
  ASSERT_TRUE(client.Create(kPods, "ml", Pod("before", {{"app", "x"}})).ok());
  ASSERT_TRUE(client.Create(kPods, "ml", Pod("other", {{"app", "y"}})).ok());
  std::atomic<int> upserts{0}, deletes{0};
  Informer::Options options;
  options.namespace_name = "ml";
  options.selector.label_selector = "app=x";
  Informer informer(&client, kPods, options,
                    {[&](const json&) { ++upserts; }, [&](const json&) { ++deletes; }, nullptr});
  informer.Start();
  std::atomic<bool> stop{false};
  ASSERT_TRUE(informer.WaitForSync(stop));
  EXPECT_EQ(informer.Size(), 1u) << "the selector scopes the cache";
  ASSERT_TRUE(client.Create(kPods, "ml", Pod("after", {{"app", "x"}})).ok());
  ASSERT_TRUE(client.Delete(kPods, "ml", "before").ok());
  ASSERT_TRUE(client.WaitForWatches(1));
  EXPECT_TRUE(informer.Get("ml", "after").has_value());
  EXPECT_FALSE(informer.Get("ml", "before").has_value());
  EXPECT_EQ(deletes.load(), 1);
  client.Shutdown();
  informer.Stop();
}

TEST(FakeClientTest, AnInformerThatFailsToListOrWatchTriesAgainAndCatchesUp) {
  FakeClient client;
  ASSERT_TRUE(client.Create(kPods, "ml", Pod("first")).ok());
  client.FailNext("list", "pods", absl::UnavailableError("the API server is restarting"), 2);
  client.FailNext("watch", "pods", absl::InternalError("the watch broke"));
  std::atomic<int> restarts{0};
  Informer::Options options;
  options.initial_backoff = std::chrono::milliseconds(1);
  Informer informer(&client, kPods, options,
                    {nullptr, nullptr, [&](const std::string&) { ++restarts; }});
  informer.Start();
  std::atomic<bool> stop{false};
  ASSERT_TRUE(informer.WaitForSync(stop));
  // Two failed lists and a failed watch, each followed by a list: a change made meanwhile is
  // in the cache once the watch that follows has caught up.
  ASSERT_TRUE(client.Create(kPods, "ml", Pod("second")).ok());
  ASSERT_TRUE(client.WaitForWatches(1));
  EXPECT_TRUE(informer.Get("ml", "first").has_value());
  EXPECT_TRUE(informer.Get("ml", "second").has_value());
  EXPECT_EQ(restarts.load(), 3);
  int lists = 0;
  for (const FakeClient::Action& a : client.Actions()) lists += a.verb == "list";
  EXPECT_EQ(lists, 4);
  client.Shutdown();
  informer.Stop();
}

TEST(FakeClientTest, ALeaseIsTakenOverOnlyAfterItsHolderStopsRenewingForItsDuration) {
  ManualClock clock(absl::FromUnixSeconds(1'800'000'000));
  FakeClient client(&clock);
  LeaderElector::Options a_options;
  a_options.namespace_name = "ops";
  a_options.identity = "a";
  a_options.clock = &clock;
  LeaderElector::Options b_options = a_options;
  b_options.identity = "b";
  LeaderElector a(&client, a_options), b(&client, b_options);
  ASSERT_TRUE(a.TryAcquireOrRenew());
  EXPECT_FALSE(b.TryAcquireOrRenew());
  clock.Advance(absl::Seconds(10));
  ASSERT_TRUE(a.TryAcquireOrRenew()) << "renewed";
  EXPECT_FALSE(b.TryAcquireOrRenew()) << "b saw the record change";
  // a stops renewing: b waits a lease duration (15 s) from when it last saw the record change.
  clock.Advance(absl::Seconds(14));
  EXPECT_FALSE(b.TryAcquireOrRenew());
  clock.Advance(absl::Seconds(2));
  EXPECT_TRUE(b.TryAcquireOrRenew());
  EXPECT_EQ((*client.Get(kLeases, "ops", "cohort-operator"))["spec"]["holderIdentity"], "b");
  EXPECT_EQ((*client.Get(kLeases, "ops", "cohort-operator"))["spec"]["leaseTransitions"], 1);
  EXPECT_FALSE(a.TryAcquireOrRenew()) << "a finds b's live lease";
  // b lets go: a takes it at once.
  b.Release();
  EXPECT_TRUE(a.TryAcquireOrRenew());
}

}  // namespace
}  // namespace cohort::kube
