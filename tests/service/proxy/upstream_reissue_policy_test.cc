// The reissue policy as tables: a call's fate at submission and after each attempt.
#include "service/proxy/upstream_reissue_policy.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace cohort::upstream_reissue_policy_test {
namespace {

using State = UpstreamLink::State;

UpstreamSendOptions Options(bool fail_fast, bool bypass_link) {
  UpstreamSendOptions options;
  options.fail_fast = fail_fast;
  options.bypass_link = bypass_link;
  return options;
}

// What a call gets when the coordinator cannot be reached (no payload of the service's).
absl::Status Outage() { return absl::UnavailableError("connection refused"); }

TEST(ReissuePolicyTest, NewCall) {
  struct Row {
    State link;
    bool fail_fast;
    bool bypass_link;
    CallFate want;
  };
  const std::vector<Row> rows = {
      {State::kConnected, false, false, CallFate::kSend},
      {State::kConnected, true, false, CallFate::kSend},
      {State::kNotYetConnected, false, false, CallFate::kHold},
      {State::kDown, false, false, CallFate::kHold},
      {State::kDown, true, false, CallFate::kEndUnreachable},
      {State::kNotYetConnected, true, false, CallFate::kEndUnreachable},
      {State::kDown, false, true, CallFate::kSend},
      {State::kDown, true, true, CallFate::kSend},
      {State::kFailed, false, false, CallFate::kEndLinkFailure},
      {State::kFailed, false, true, CallFate::kEndLinkFailure},
      {State::kStopped, true, true, CallFate::kEndLinkFailure},
  };
  for (const Row& row : rows) {
    EXPECT_EQ(FateOfNewCall(row.link, Options(row.fail_fast, row.bypass_link)), row.want)
        << UpstreamLink::StateName(row.link) << " fail_fast=" << row.fail_fast
        << " bypass_link=" << row.bypass_link;
  }
}

TEST(ReissuePolicyTest, AfterAttempt) {
  struct Row {
    State link;
    bool fail_fast;
    bool bypass_link;
    absl::Status status;
    CallFate want;
    bool link_lost;
  };
  const std::vector<Row> rows = {
      // Answered: it ends as answered, whatever the link.
      {State::kConnected, false, false, absl::OkStatus(), CallFate::kEndAsAnswered, false},
      {State::kStopped, false, false, absl::NotFoundError("no key"), CallFate::kEndAsAnswered,
       false},
      // No answer for want of the coordinator: held, and the link goes down.
      {State::kConnected, false, false, Outage(), CallFate::kHold, true},
      {State::kDown, false, false, Outage(), CallFate::kHold, true},
      // ... unless it may not be held: it ends with what it got.
      {State::kConnected, true, false, Outage(), CallFate::kEndAsAnswered, true},
      {State::kDown, false, true, Outage(), CallFate::kEndAsAnswered, true},
      // A link that failed or stopped ends it with its failure.
      {State::kFailed, false, false, Outage(), CallFate::kEndLinkFailure, false},
      {State::kStopped, true, false, Outage(), CallFate::kEndLinkFailure, false},
  };
  for (const Row& row : rows) {
    const AttemptFate fate =
        FateAfterAttempt(row.link, Options(row.fail_fast, row.bypass_link), row.status);
    EXPECT_EQ(fate.call, row.want) << UpstreamLink::StateName(row.link) << " " << row.status;
    EXPECT_EQ(fate.link_lost, row.link_lost)
        << UpstreamLink::StateName(row.link) << " " << row.status;
  }
}

TEST(ReissuePolicyTest, AttemptOnTheParkStream) {
  struct Row {
    bool stream_refused;
    bool stream_current;
    bool connected;
    absl::Status status;
    ParkedAttemptFate want;
  };
  const std::vector<Row> rows = {
      {false, true, true, absl::OkStatus(), ParkedAttemptFate::kAnswered},
      {true, true, true, absl::UnimplementedError("no Park"), ParkedAttemptFate::kStreamRefused},
      {true, false, false, Outage(), ParkedAttemptFate::kStreamRefused},
      // Its stream was replaced while the coordinator stayed reachable.
      {false, false, true, Outage(), ParkedAttemptFate::kStreamReplaced},
      // ... but not when the coordinator is away, or the answer is the service's own.
      {false, false, false, Outage(), ParkedAttemptFate::kAnswered},
      {false, false, true, absl::NotFoundError("no key"), ParkedAttemptFate::kAnswered},
      // Its stream is still the current one: an outage like any other.
      {false, true, true, Outage(), ParkedAttemptFate::kAnswered},
  };
  for (const Row& row : rows) {
    EXPECT_EQ(
        FateOfParkedAttempt({row.stream_refused, row.stream_current}, row.connected, row.status),
        row.want)
        << "refused=" << row.stream_refused << " current=" << row.stream_current
        << " connected=" << row.connected << " " << row.status;
  }
}

}  // namespace
}  // namespace cohort::upstream_reissue_policy_test
