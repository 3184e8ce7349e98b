#include "runtime/scheduler/object_table.h"

#include <vector>

#include "gtest/gtest.h"

namespace cohort::runtime {
namespace {

TEST(ObjectTableTest, IdsAreSequentialFromOneWithOneCountEach) {
  ObjectTable table;
  EXPECT_EQ(table.Create(0, 1), 1u);
  EXPECT_EQ(table.Create(7, 0), 2u);
  EXPECT_EQ(table.Find(1)->refs, 1);
  EXPECT_EQ(table.Find(2)->producer, 7u);
  EXPECT_EQ(table.Find(3), nullptr);
}

TEST(ObjectTableTest, DroppingTheLastCountFreesTheObjectOnEveryStoreHoldingIt) {
  ObjectTable table;
  ObjectId id = table.Create(0, 1);
  table.FindMutable(id)->locations = {1, 2};
  std::vector<Deallocation> freed;
  ASSERT_TRUE(table.DropRefs({id}, &freed).ok());
  ASSERT_EQ(freed.size(), 1u);
  EXPECT_EQ(freed[0].canonical, id);
  EXPECT_EQ(freed[0].stores, (absl::btree_set<StoreId>{1, 2}));
  EXPECT_TRUE(table.Find(id)->released);
  EXPECT_EQ(table.CheckLive(id).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ObjectTableTest, AnIdNamedTwiceCountsTwice) {
  ObjectTable table;
  ObjectId id = table.Create(0, 1);
  ASSERT_TRUE(table.AddRefs({id, id}).ok());
  EXPECT_EQ(table.Find(id)->refs, 3);
  std::vector<Deallocation> freed;
  ASSERT_TRUE(table.DropRefs({id, id}, &freed).ok());
  EXPECT_EQ(table.Find(id)->refs, 1);
  EXPECT_TRUE(freed.empty());
}

TEST(ObjectTableTest, BadCountChangesChangeNothing) {
  ObjectTable table;
  ObjectId a = table.Create(0, 1);
  ObjectId b = table.Create(0, 1);
  std::vector<Deallocation> freed;
  EXPECT_EQ(table.AddRefs({a, 99}).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table.Find(a)->refs, 1);
  // b holds one count; giving back two fails and a keeps its count too.
  EXPECT_EQ(table.DropRefs({a, b, b}, &freed).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(table.Find(a)->refs, 1);
  EXPECT_EQ(table.Find(b)->refs, 1);
  EXPECT_TRUE(freed.empty());
}

TEST(ObjectTableTest, AnAliasHoldsItsTargetUntilItIsReleased) {
  ObjectTable table;
  ObjectId target = table.Create(0, 1);
  ObjectId alias = table.Create(5, 0);
  table.FindMutable(target)->locations = {1};
  ASSERT_TRUE(table.Alias(alias, target).ok());
  EXPECT_EQ(table.Canonical(alias), target);
  std::vector<Deallocation> freed;
  ASSERT_TRUE(table.DropRefs({target}, &freed).ok());
  EXPECT_TRUE(freed.empty()) << "the alias still reads as the target";
  ASSERT_TRUE(table.DropRefs({alias}, &freed).ok());
  ASSERT_EQ(freed.size(), 1u);
  EXPECT_EQ(freed[0].canonical, target);
}

TEST(ObjectTableTest, AliasesToItselfIntoACycleOrOfAValueAreRefused) {
  ObjectTable table;
  ObjectId a = table.Create(1, 0);
  ObjectId b = table.Create(2, 0);
  ObjectId c = table.Create(3, 0);
  EXPECT_EQ(table.Alias(a, a).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(table.Alias(a, b).ok());
  ASSERT_TRUE(table.Alias(b, c).ok());
  absl::Status cycle = table.Alias(c, a);
  EXPECT_EQ(cycle.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(cycle.message().find("cycle"), absl::string_view::npos);
  EXPECT_EQ(table.Find(c)->alias_of, 0u);
  EXPECT_EQ(table.Alias(a, c).code(), absl::StatusCode::kFailedPrecondition);
  ObjectId stored = table.Create(4, 0);
  table.FindMutable(stored)->locations = {1};
  EXPECT_EQ(table.Alias(stored, c).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(table.Alias(a, 42).code(), absl::StatusCode::kNotFound);
}

TEST(ObjectTableTest, AContainerReleasesWhatItContains) {
  ObjectTable table;
  ObjectId inner = table.Create(0, 1);
  ObjectId outer = table.Create(0, 1);
  table.FindMutable(inner)->locations = {2};
  ASSERT_TRUE(table.AddContained(outer, {inner}).ok());
  std::vector<Deallocation> freed;
  ASSERT_TRUE(table.DropRefs({inner}, &freed).ok());
  EXPECT_TRUE(freed.empty());
  ASSERT_TRUE(table.DropRefs({outer}, &freed).ok());
  ASSERT_EQ(freed.size(), 1u) << "outer had no copy; inner had one";
  EXPECT_EQ(freed[0].canonical, inner);
  EXPECT_EQ(table.AddContained(outer, {inner}).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ObjectTableTest, AContainerCannotContainItselfOrAnUnknownId) {
  ObjectTable table;
  ObjectId a = table.Create(0, 1);
  EXPECT_EQ(table.AddContained(a, {a}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table.AddContained(a, {9}).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(table.Find(a)->contained.empty());
}

TEST(ObjectTableTest, HoldBringsAReleasedIdBackWithItsAliasTarget) {
  ObjectTable table;
  ObjectId target = table.Create(1, 0);
  ObjectId alias = table.Create(2, 0);
  ASSERT_TRUE(table.Alias(alias, target).ok());
  std::vector<Deallocation> freed;
  ASSERT_TRUE(table.DropRefs({target, alias}, &freed).ok());
  ASSERT_TRUE(table.Find(target)->released);
  table.Hold(alias);
  EXPECT_TRUE(table.CheckLive(alias).ok());
  EXPECT_TRUE(table.CheckLive(target).ok());
  table.Release(alias, &freed);
  EXPECT_TRUE(table.Find(target)->released);
}

}  // namespace
}  // namespace cohort::runtime
