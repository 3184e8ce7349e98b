#include "agent/progress.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sidecar/progress_tracker.h"

namespace cohort::progress_report_test {
namespace {

class ProgressReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "/progress-report-XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    file_ = dir_ + "/progress";
    unsetenv("COHORT_PROGRESS_FILE");
  }
  void TearDown() override {
    unsetenv("COHORT_PROGRESS_FILE");
    std::filesystem::remove_all(dir_);
  }

  std::string Content() const {
    std::ifstream in(file_, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::vector<std::string> Files() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      names.push_back(entry.path().filename().string());
    }
    return names;
  }

  std::string dir_;
  std::string file_;
};

TEST_F(ProgressReportTest, TheStepWrittenIsTheStepTheSidecarReads) {
  ASSERT_TRUE(ReportProgress(file_, 145));
  EXPECT_EQ(Content(), "145\n");
  EXPECT_EQ(ParseProgressStep(Content()), 145);
}

TEST_F(ProgressReportTest, AReportWithoutAStepIsAWriteThatNamesNoStep) {
  ASSERT_TRUE(ReportProgress(file_, std::nullopt));
  EXPECT_FALSE(Content().empty());
  EXPECT_EQ(ParseProgressStep(Content()), std::nullopt);
}

TEST_F(ProgressReportTest, EachReportReplacesTheLastAndLeavesNoOtherFile) {
  ASSERT_TRUE(ReportProgress(file_, 1));
  ASSERT_TRUE(ReportProgress(file_, 2));
  EXPECT_EQ(Content(), "2\n");
  EXPECT_EQ(Files(), std::vector<std::string>{"progress"});
}

TEST_F(ProgressReportTest, EachReportIsANewFileForTheSidecarToSee) {
  // The sidecar takes a change of inode, size or modification time as a write.
  struct stat first {
  }, second{};
  ASSERT_TRUE(ReportProgress(file_, std::nullopt));
  ASSERT_EQ(stat(file_.c_str(), &first), 0);
  ASSERT_TRUE(ReportProgress(file_, std::nullopt));
  ASSERT_EQ(stat(file_.c_str(), &second), 0);
  EXPECT_NE(first.st_ino, second.st_ino);
}

TEST_F(ProgressReportTest, TheFileIsReadableByTheSidecarsUser) {
  ASSERT_TRUE(ReportProgress(file_, 3));
  struct stat st {};
  ASSERT_EQ(stat(file_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
}

TEST_F(ProgressReportTest, WhenNoFileCanBeMadeBesideItTheFileIsRewrittenInPlace) {
  // A name that leaves no room for the temporary file's suffix (names end at 255 bytes);
  // the same path as a directory the workload cannot create files in, which root, running
  // this test, could.
  const std::string path = dir_ + "/" + std::string(250, 'p');
  ASSERT_TRUE(ReportProgress(path, 9));
  std::ifstream in(path);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "9\n");
}

TEST_F(ProgressReportTest, TheFileComesFromTheEnvironment) {
  ASSERT_EQ(setenv("COHORT_PROGRESS_FILE", file_.c_str(), 1), 0);
  ASSERT_TRUE(ReportProgress(7));
  EXPECT_EQ(ParseProgressStep(Content()), 7);
  ASSERT_TRUE(ReportProgress());
  EXPECT_EQ(ParseProgressStep(Content()), std::nullopt);
}

TEST_F(ProgressReportTest, WithoutTheVariableNothingIsWritten) {
  EXPECT_FALSE(ReportProgress(7));
  ASSERT_EQ(setenv("COHORT_PROGRESS_FILE", "", 1), 0);
  EXPECT_FALSE(ReportProgress(7));
  EXPECT_TRUE(Files().empty());
}

TEST_F(ProgressReportTest, AFileThatCannotBeWrittenIsFalseNotAnError) {
  EXPECT_FALSE(ReportProgress(dir_ + "/no-such-dir/progress", 1));
  EXPECT_FALSE(ReportProgress(dir_ + "/no-such-dir/progress", 2));
}

}  // namespace
}  // namespace cohort::progress_report_test
