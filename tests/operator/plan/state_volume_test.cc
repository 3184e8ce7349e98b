// ChooseStateVolume: where a job with spec.coordinator.state.volume Auto keeps its
// coordinator's state, from the cluster's StorageClasses (the reconcile loop's use of it is in
// reconcile_test.cc, and on a real API server in tests/e2e/operator_test.sh).
#include "operator/plan/state_volume.h"

#include <gtest/gtest.h>

namespace cohort::controller {
namespace {

using json = nlohmann::json;

api::CoordinatedJob AutoJob() {
  api::CoordinatedJob job;
  job.name = "train";
  job.spec.coordinator.state.volume_auto = true;
  job.spec.coordinator.state.size = "2Gi";
  return job;
}

json Class(const std::string& name, const std::string& annotation, const std::string& created) {
  json c = {{"metadata", {{"name", name}, {"creationTimestamp", created}}}};
  if (!annotation.empty()) c["metadata"]["annotations"] = {{annotation, "true"}};
  return c;
}

json List(std::vector<json> items) { return {{"items", items}}; }

TEST(StateVolumeTest, TheNewestDefaultClassMakesItAClaimUnderEitherAnnotation) {
  auto choice = ChooseStateVolume(
      AutoJob(),
      List({Class("old", "storageclass.kubernetes.io/is-default-class", "2026-01-01T00:00:00Z"),
            Class("plain", "", "2026-06-01T00:00:00Z"),
            Class("new", "storageclass.beta.kubernetes.io/is-default-class",
                  "2026-03-01T00:00:00Z")}));
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->volume, api::StateVolume::kPersistentVolumeClaim);
  EXPECT_TRUE(choice->fresh);
  EXPECT_FALSE(choice->warning);
  EXPECT_NE(choice->message.find("train-coordinator-state (2Gi, StorageClass new, the cluster's "
                                 "default)"),
            std::string::npos)
      << choice->message;
}

TEST(StateVolumeTest, NoDefaultClassIsAnEmptyDirWithAWarningThatSaysWhatToSet) {
  auto choice = ChooseStateVolume(AutoJob(), List({Class("plain", "", "")}));
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->volume, api::StateVolume::kEmptyDir);
  EXPECT_TRUE(choice->warning);
  EXPECT_NE(choice->message.find("the cluster has no default StorageClass"), std::string::npos);
  EXPECT_NE(choice->message.find("spec.coordinator.state.storageClassName"), std::string::npos);
  // An annotation that is not "true" makes no default.
  json off = Class("off", "", "");
  off["metadata"]["annotations"] = {{"storageclass.kubernetes.io/is-default-class", "false"}};
  choice = ChooseStateVolume(AutoJob(), List({off}));
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->volume, api::StateVolume::kEmptyDir);
}

TEST(StateVolumeTest, AForbiddenListIsAnEmptyDirAndAnyOtherErrorIsReturned) {
  auto forbidden = ChooseStateVolume(AutoJob(), absl::PermissionDeniedError("forbidden: rbac"));
  ASSERT_TRUE(forbidden.ok());
  EXPECT_EQ(forbidden->volume, api::StateVolume::kEmptyDir);
  EXPECT_NE(forbidden->message.find("may not list StorageClasses (forbidden: rbac)"),
            std::string::npos)
      << forbidden->message;
  auto away = ChooseStateVolume(AutoJob(), absl::UnavailableError("connection refused"));
  EXPECT_EQ(away.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(away.status().message().find("connection refused"), std::string::npos);
}

TEST(StateVolumeTest, AChoiceInTheStatusIsKeptWithoutLookingAtTheClasses) {
  api::CoordinatedJob job = AutoJob();
  job.status.state_volume = "EmptyDir";
  auto choice = ChooseStateVolume(job, absl::UnavailableError("not listed"));
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->volume, api::StateVolume::kEmptyDir);
  EXPECT_FALSE(choice->fresh);
  job.status.state_volume = "PersistentVolumeClaim";
  choice = ChooseStateVolume(job, absl::UnavailableError("not listed"));
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->volume, api::StateVolume::kPersistentVolumeClaim);
  // Something this operator never writes is chosen again.
  job.status.state_volume = "HostPath";
  choice = ChooseStateVolume(job, List({}));
  ASSERT_TRUE(choice.ok());
  EXPECT_TRUE(choice->fresh);
  EXPECT_EQ(choice->volume, api::StateVolume::kEmptyDir);
}

}  // namespace
}  // namespace cohort::controller
