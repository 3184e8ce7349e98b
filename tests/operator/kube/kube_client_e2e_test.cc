// The Kubernetes client, informer and leader election against a real kube-apiserver (the
// local cluster). Not a ctest test: tests/e2e/operator_test.sh runs it with KUBECONFIG set
// and COHORT_TEST_NAMESPACE naming a namespace it created.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "operator/kube/informer.h"
#include "operator/kube/kube_client.h"
#include "operator/kube/leader_election.h"

namespace cohort::kube {
namespace {

std::string TestNamespace() {
  const char* ns = std::getenv("COHORT_TEST_NAMESPACE");
  return ns ? ns : "";
}

class KubeClientE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto config = ResolveKubeConfig("");
    ASSERT_TRUE(config.ok()) << config.status();
    ASSERT_FALSE(TestNamespace().empty()) << "set COHORT_TEST_NAMESPACE";
    client_ = std::make_unique<KubeClient>(*config);
  }
  static json ConfigMap(const std::string& name, const std::string& value) {
    return {{"apiVersion", "v1"},
            {"kind", "ConfigMap"},
            {"metadata", {{"name", name}, {"labels", {{"cohort.dev/test", "kube-client"}}}}},
            {"data", {{"value", value}}}};
  }
  std::unique_ptr<KubeClient> client_;
};

TEST_F(KubeClientE2eTest, CreateGetReplaceDeleteWithTheApiServersErrors) {
  const std::string ns = TestNamespace();
  auto created = client_->Create(kConfigMaps, ns, ConfigMap("crud", "1"));
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(client_->Create(kConfigMaps, ns, ConfigMap("crud", "1")).status().code(),
            absl::StatusCode::kAlreadyExists);

  auto got = client_->Get(kConfigMaps, ns, "crud");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)["data"]["value"], "1");

  json changed = *got;
  changed["data"]["value"] = "2";
  auto replaced = client_->Replace(kConfigMaps, ns, "crud", changed);
  ASSERT_TRUE(replaced.ok()) << replaced.status();
  // The same write again carries a stale resourceVersion: a conflict.
  auto stale = client_->Replace(kConfigMaps, ns, "crud", changed);
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kAborted) << stale.status();

  auto patched =
      client_->Patch(kConfigMaps, ns, "crud", PatchType::kMerge, {{"data", {{"other", "x"}}}});
  ASSERT_TRUE(patched.ok()) << patched.status();
  EXPECT_EQ((*patched)["data"]["other"], "x");

  json invalid = ConfigMap("Not_A_Name", "1");
  auto refused = client_->Create(kConfigMaps, ns, invalid);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("Not_A_Name"), std::string::npos);

  DeleteOptions wrong_uid;
  wrong_uid.precondition_uid = "00000000-0000-0000-0000-000000000000";
  EXPECT_EQ(client_->Delete(kConfigMaps, ns, "crud", wrong_uid).code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(client_->Delete(kConfigMaps, ns, "crud").ok());
  EXPECT_EQ(client_->Get(kConfigMaps, ns, "crud").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(KubeClientE2eTest, ListPagesAndWatchesFromItsVersion) {
  const std::string ns = TestNamespace();
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(client_->Create(kConfigMaps, ns, ConfigMap(absl::StrCat("page-", i), "v")).ok());
  }
  ListOptions options;
  options.label_selector = "cohort.dev/test=kube-client";
  options.limit = 2;  // three pages
  auto list = client_->List(kConfigMaps, ns, options);
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ((*list)["items"].size(), 5u);
  const std::string rv = ResourceVersion(*list);
  ASSERT_FALSE(rv.empty());

  // Created after the list and before the watch starts: a watch from the list's version
  // must deliver it all the same (no sleep needed to put the watch first).
  ASSERT_TRUE(client_->Create(kConfigMaps, ns, ConfigMap("after-list", "v")).ok());
  std::vector<std::string> seen;
  // The server ends this watch after 2 s; it must have delivered the new object first.
  absl::Status end = client_->Watch(kConfigMaps, ns, options, rv, 2, [&](const WatchEvent& e) {
    if (e.type != "BOOKMARK") seen.push_back(e.type + " " + Name(e.object));
  });
  EXPECT_TRUE(end.ok()) << end;
  EXPECT_EQ(seen, std::vector<std::string>{"ADDED after-list"});
}

TEST_F(KubeClientE2eTest, AVersionTooOldIsOutOfRange) {
  // Revision 1 is outside the watch cache once the cache has started (it starts from the
  // revision current then), and long compacted away on a cluster in use. On a cluster that
  // just came up, a watch may still be served from etcd, where revision 1 can be there:
  // ask again until the cache answers.
  absl::Status s;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  do {
    s = client_->Watch(kConfigMaps, TestNamespace(), {}, "1", 1, [](const WatchEvent&) {});
  } while (s.code() != absl::StatusCode::kOutOfRange && absl::Now() < deadline);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
}

TEST_F(KubeClientE2eTest, TheInformerCachesByLabelAndFollowsChanges) {
  const std::string ns = TestNamespace();
  std::atomic<int> upserts{0}, deletes{0};
  Informer::Options options;
  options.namespace_name = ns;
  options.selector.label_selector = "cohort.dev/test=informer";
  options.index_label = "cohort.dev/job";
  Informer informer(client_.get(), kConfigMaps, options,
                    {[&](const json&) { ++upserts; }, [&](const json&) { ++deletes; }, nullptr});
  informer.Start();
  std::atomic<bool> stop{false};
  ASSERT_TRUE(informer.WaitForSync(stop));
  EXPECT_EQ(informer.Size(), 0u);

  json cm = ConfigMap("indexed", "1");
  cm["metadata"]["labels"] = {{"cohort.dev/test", "informer"}, {"cohort.dev/job", "train"}};
  ASSERT_TRUE(client_->Create(kConfigMaps, ns, cm).ok());
  ASSERT_TRUE(client_->Create(kConfigMaps, ns, ConfigMap("not-selected", "1")).ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (informer.ByIndex(ns, "train").empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(informer.ByIndex(ns, "train").size(), 1u);
  EXPECT_FALSE(informer.Get(ns, "not-selected").has_value());
  EXPECT_FALSE(informer.Get(ns, "indexed")->at("metadata").contains("managedFields"));

  ASSERT_TRUE(client_->Delete(kConfigMaps, ns, "indexed").ok());
  // The cache drops the object before the delete callback runs: wait for both.
  while ((informer.Get(ns, "indexed") || deletes.load() == 0) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_FALSE(informer.Get(ns, "indexed").has_value());
  EXPECT_TRUE(informer.ByIndex(ns, "train").empty());
  EXPECT_GE(upserts.load(), 1);
  EXPECT_EQ(deletes.load(), 1);
  client_->Shutdown();  // ends the watch in progress
  informer.Stop();
}

TEST_F(KubeClientE2eTest, OneOfTwoCandidatesLeadsAndTheOtherTakesOverAfterRelease) {
  const std::string ns = TestNamespace();
  auto config = ResolveKubeConfig("");
  KubeClient other_client(*config);
  LeaderElector::Options options;
  options.namespace_name = ns;
  options.lease_name = "e2e-lease";
  options.lease_duration = absl::Seconds(3);
  options.renew_deadline = absl::Seconds(2);
  options.retry_period = absl::Milliseconds(200);
  options.identity = "a";
  LeaderElector a(client_.get(), options);
  options.identity = "b";
  LeaderElector b(&other_client, options);

  EXPECT_TRUE(a.TryAcquireOrRenew());
  EXPECT_FALSE(b.TryAcquireOrRenew());  // a's lease is fresh
  EXPECT_TRUE(a.TryAcquireOrRenew());   // renewing
  auto lease = client_->Get(kLeases, ns, "e2e-lease");
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ((*lease)["spec"]["holderIdentity"], "a");

  a.Release();
  EXPECT_FALSE(a.is_leader());
  // Released: the lease has no holder, so b takes it at its first try, not after expiry.
  EXPECT_TRUE(b.TryAcquireOrRenew());
  lease = client_->Get(kLeases, ns, "e2e-lease");
  EXPECT_EQ((*lease)["spec"]["holderIdentity"], "b");
  EXPECT_EQ((*lease)["spec"]["leaseTransitions"], 1);
}

}  // namespace
}  // namespace cohort::kube
