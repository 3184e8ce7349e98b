// The state of a job's earlier gangs on its state volume (cohort-coordinator
// --state-prune-before), on real directories.
#include "service/state/earlier_gangs.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

TEST(GangStateNameTest, OnlyTheOperatorsNamesParse) {
  GangStateName name = ParseGangStateName("20270115T080000Z-gang-12");
  ASSERT_TRUE(name.ok);
  EXPECT_EQ(name.start, "20270115T080000Z");
  EXPECT_EQ(name.gang, 12u);
  for (const char* other :
       {"", "state", "lost+found", "20270115T080000Z-gang-", "20270115T080000Z-gang-x",
        "20270115T080000Z-gang-01", "20270115X080000Z-gang-1", "2027011T080000Z-gang-1",
        "20270115T080000-gang-1", "20270115T080000Z-gang-1.tmp", "20270115T080000Z-gangs-1",
        "20270115T080000Z-gang-99999999999999999999999"}) {
    EXPECT_FALSE(ParseGangStateName(other).ok) << other;
  }
}

class EarlierGangsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "cohort-gangs-test-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
  }
  void TearDown() override { fs::remove_all(root_); }

  void Dir(const std::string& name, size_t bytes = 0) {
    fs::create_directories(root_ / name / "inner");
    if (bytes > 0) std::ofstream(root_ / name / "inner" / "log-1") << std::string(bytes, 'x');
  }
  std::set<std::string> Left() {
    std::set<std::string> left;
    for (const auto& entry : fs::directory_iterator(root_)) {
      left.insert(entry.path().filename().string());
    }
    return left;
  }

  fs::path root_;
};

TEST_F(EarlierGangsTest, EarlierGangsGoAndEverythingElseStays) {
  Dir("20270115T080000Z-gang-0", 100);
  Dir("20270115T080000Z-gang-9", 10);
  Dir("20270115T080000Z-gang-10");     // this one's: 10 after 9 though it sorts before as text
  Dir("20270115T080000Z-gang-11");     // a later gang's (a coordinator of an old gang restarting)
  Dir("20260101T000000Z-gang-40", 1);  // a run before a resume
  Dir("20280101T000000Z-gang-0");      // a later run's
  Dir("lost+found");
  std::ofstream(root_ / "20250101T000000Z-gang-0") << "a file, not a gang's directory";
  fs::create_directory_symlink(root_ / "lost+found", root_ / "20250101T000000Z-gang-1");

  auto removed = RemoveEarlierGangStates((root_ / "20270115T080000Z-gang-10").string());
  ASSERT_TRUE(removed.ok()) << removed.status();
  ASSERT_EQ(removed->size(), 3u);
  EXPECT_EQ((*removed)[0].path, (root_ / "20260101T000000Z-gang-40").string()) << "oldest first";
  EXPECT_EQ((*removed)[0].bytes, 1u);
  EXPECT_EQ((*removed)[1].path, (root_ / "20270115T080000Z-gang-0").string());
  EXPECT_EQ((*removed)[1].bytes, 100u);
  EXPECT_EQ((*removed)[2].path, (root_ / "20270115T080000Z-gang-9").string());
  EXPECT_EQ(Left(), (std::set<std::string>{"20270115T080000Z-gang-10", "20270115T080000Z-gang-11",
                                           "20280101T000000Z-gang-0", "lost+found",
                                           "20250101T000000Z-gang-0", "20250101T000000Z-gang-1"}));
  EXPECT_TRUE(fs::exists(root_ / "lost+found")) << "a link's target stays";

  // Again: nothing more to remove. The own directory need not exist yet.
  removed = RemoveEarlierGangStates((root_ / "20270115T080000Z-gang-12").string());
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(removed->size(), 2u) << "gang-10 and gang-11 now";
  EXPECT_TRUE(fs::exists(root_ / "20280101T000000Z-gang-0"));
}

TEST_F(EarlierGangsTest, APathNotNamedAsAGangsOrWithNoParentIsRefusedAndRemovesNothing) {
  Dir("20270115T080000Z-gang-0");
  auto removed = RemoveEarlierGangStates((root_ / "state").string());
  EXPECT_EQ(removed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(removed.status().message()), HasSubstr("YYYYMMDDTHHMMSSZ-gang-N"));
  removed = RemoveEarlierGangStates((root_ / "missing" / "20270115T080000Z-gang-3").string());
  EXPECT_EQ(removed.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Left(), (std::set<std::string>{"20270115T080000Z-gang-0"}));
}

}  // namespace
}  // namespace cohort
