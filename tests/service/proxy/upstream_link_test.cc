// UpstreamLink on its own: the reissue policy's verdicts as the link reads and acts on them.
#include "service/proxy/upstream_link.h"

#include "gtest/gtest.h"
#include "service/proxy/upstream_reissue_policy.h"

namespace cohort::upstream_link_test {
namespace {

TEST(UpstreamLinkTest, NewCallBeforeTheCoordinatorWasReached) {
  UpstreamLink link("coordinator:1", absl::Seconds(10));
  UpstreamSendOptions options;
  absl::Status refused;
  EXPECT_EQ(link.FateOfNewCall(options, &refused), CallFate::kHold);
  EXPECT_TRUE(refused.ok());

  options.bypass_link = true;
  EXPECT_EQ(link.FateOfNewCall(options, &refused), CallFate::kSend);
  EXPECT_TRUE(refused.ok());

  options.bypass_link = false;
  options.fail_fast = true;
  EXPECT_EQ(link.FateOfNewCall(options, &refused), CallFate::kEndUnreachable);
  EXPECT_EQ(refused, link.UnreachableError());
  EXPECT_NE(refused.message().find("has not been reached yet"), absl::string_view::npos);
}

TEST(UpstreamLinkTest, NewCallAfterTheLinkStoppedEndsWithItsFailure) {
  UpstreamLink link("coordinator:1", absl::Seconds(10));
  ASSERT_TRUE(link.Stop(absl::UnavailableError("stopping")));
  absl::Status refused;
  EXPECT_EQ(link.FateOfNewCall(UpstreamSendOptions{}, &refused), CallFate::kEndLinkFailure);
  EXPECT_EQ(refused, absl::UnavailableError("stopping"));
}

TEST(UpstreamLinkTest, AttemptThatFailedForWantOfTheCoordinator) {
  UpstreamLink link("coordinator:1", absl::Seconds(10));
  UpstreamSendOptions options;
  // Not yet connected: held, and the link stays as it was.
  absl::Status status = absl::UnavailableError("connection refused");
  EXPECT_TRUE(link.HoldsAfterAttempt(options, &status));
  EXPECT_EQ(link.state(), UpstreamLink::State::kNotYetConnected);
  EXPECT_EQ(link.outages(), 0);

  // Fail-fast: it ends with what it got.
  options.fail_fast = true;
  EXPECT_FALSE(link.HoldsAfterAttempt(options, &status));
  EXPECT_EQ(status, absl::UnavailableError("connection refused"));

  // An answer of the service is no outage: it ends with it.
  options.fail_fast = false;
  status = absl::NotFoundError("no such key");
  EXPECT_FALSE(link.HoldsAfterAttempt(options, &status));
  EXPECT_EQ(status, absl::NotFoundError("no such key"));

  // Once stopped: it ends with the link's failure.
  link.Stop(absl::UnavailableError("stopping"));
  status = absl::UnavailableError("connection refused");
  EXPECT_FALSE(link.HoldsAfterAttempt(options, &status));
  EXPECT_EQ(status, absl::UnavailableError("stopping"));
}

}  // namespace
}  // namespace cohort::upstream_link_test
