// soak_agent_client: one task of the soak (tests/soak/soak.py) on the cohort agent library,
// talking to the coordinator through its pod's sidecar. It runs the rounds soak_client.py
// runs for jaxlib and TensorFlow, with the same keys and values (tests/soak/soak_values.py):
// write soak/agent/TASK/R, append it to the ack file once acknowledged, read the next task's
// key of the round with a blocking get and compare, wait at the round's barrier with every
// task of every kind.
//
// The soak kills this client's sidecar once and starts it again. A call that then fails
// because the endpoint is gone (UNAVAILABLE from gRPC's transport, not an answer of the
// sidecar or the coordinator) is sent again once the endpoint is back: each call here is safe
// to repeat (a barrier keeps its counter until answered; an insert whose first attempt took
// effect gets ALREADY_EXISTS, and the value then read back must be the one written). Such
// calls are counted in "resent_after_endpoint_loss"; a write refused because the state volume
// is full in "refused_full"; anything else is an error, which ends the task with status 1.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "agent/coordination_agent.h"
#include "nlohmann/json.hpp"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace {

constexpr size_t kValueBytes = 96;  // soak_values.VALUE_BYTES
constexpr absl::Duration kWait = absl::Minutes(5);
constexpr absl::Duration kGiveUp = absl::Minutes(10);

std::string KeyOf(const std::string& kind, int task, long round) {
  return absl::StrCat("soak/", kind, "/", task, "/", round);
}

std::string ValueOf(const std::string& key) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : key) h = (h ^ c) * 0x100000001b3ULL;
  std::string value = absl::StrFormat("%s#%016x", key, h);
  if (value.size() < kValueBytes) value.append(kValueBytes - value.size(), '.');
  return value;
}

// The endpoint itself is gone (the sidecar was killed): gRPC's own words, not an answer.
bool EndpointLost(const absl::Status& s) {
  if (s.code() != absl::StatusCode::kUnavailable) return false;
  for (const char* words :
       {"failed to connect", "Connection refused", "Socket closed", "Connection reset",
        "connections to all backends failing", "Broken pipe", "GOAWAY", "Stream removed"}) {
    if (absl::StrContains(s.message(), words)) return true;
  }
  return false;
}

bool VolumeFull(const absl::Status& s) {
  return s.code() == absl::StatusCode::kResourceExhausted &&
         absl::StrContains(s.message(), "state volume is full");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"soak_agent_client: one agent-library task of the soak"};
  std::string address, kind = "agent", ack_path, stop_path, summary_path;
  int task = 0, tasks = 1;
  double round_pause = 0.05;
  app.add_option("--address", address, "the pod's sidecar endpoint")->required();
  app.add_option("--kind", kind, "the job, and the keys' second part");
  app.add_option("--task", task)->required();
  app.add_option("--tasks", tasks, "tasks of this kind")->required();
  app.add_option("--ack", ack_path, "acknowledged keys are appended here")->required();
  app.add_option("--stop", stop_path, "holds the last round, once the soak ends")->required();
  app.add_option("--summary", summary_path)->required();
  app.add_option("--round-pause", round_pause, "seconds between rounds");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_default_logger(spdlog::stderr_logger_mt("agent"));

  nlohmann::json summary = {{"kind", kind},
                            {"task", task},
                            {"rounds", 0},
                            {"writes", 0},
                            {"refused_full", 0},
                            {"values_checked", 0},
                            {"wrong", nlohmann::json::array()},
                            {"errors", nlohmann::json::array()},
                            {"resent_after_endpoint_loss", 0}};
  cohort::AgentConfig config;
  config.coordinator_address = address;
  config.job_name = kind;
  config.task_id = task;
  config.heartbeat_interval = absl::Seconds(2);
  config.unreachable_timeout = absl::Seconds(30);
  config.rpc_timeout = absl::Seconds(60);
  cohort::CoordinationAgent agent;
  std::string step = "connect";
  // Repeats `call` while it fails because the endpoint is gone (or, for a write, because the
  // volume is full); returns its last status.
  auto repeat = [&](auto call, bool write) {
    absl::Time since = absl::Now();
    for (;;) {
      absl::Status s = call();
      if (absl::Now() - since > kGiveUp) return s;
      if (EndpointLost(s)) {
        summary["resent_after_endpoint_loss"] =
            summary["resent_after_endpoint_loss"].get<int>() + 1;
      } else if (write && VolumeFull(s)) {
        summary["refused_full"] = summary["refused_full"].get<int>() + 1;
      } else {
        return s;
      }
      absl::SleepFor(absl::Milliseconds(200));
    }
  };
  auto fail = [&](const absl::Status& s) {
    summary["errors"].push_back(absl::StrCat(step, ": ", s.ToString()));
  };
  std::ofstream ack(ack_path, std::ios::app);
  absl::Status status = agent.Initialize(config);
  if (status.ok()) status = agent.Connect();
  if (!status.ok()) fail(status);
  std::printf("agent task %d: %s\n", task, status.ok() ? "connected" : "not connected");
  std::fflush(stdout);
  for (long r = 0; status.ok(); ++r) {
    std::ifstream stop(stop_path);
    long last = 0;
    std::string text((std::istreambuf_iterator<char>(stop)), std::istreambuf_iterator<char>());
    if (stop && absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &last) && r > last) break;

    std::string key = KeyOf(kind, task, r), value = ValueOf(key);
    step = absl::StrCat("round ", r, ": write ", key);
    bool resent = false;
    status = repeat(
        [&] {
          absl::Status s = agent.InsertKeyValue(key, value);
          if (EndpointLost(s)) resent = true;
          // A resent insert whose first attempt took effect: the value must be ours.
          if (resent && s.code() == absl::StatusCode::kAlreadyExists) {
            auto got = agent.TryGetKeyValue(key);
            if (!got.ok()) return got.status();
            if (*got == value) return absl::OkStatus();
          }
          return s;
        },
        true);
    if (!status.ok()) break;
    summary["writes"] = summary["writes"].get<int>() + 1;
    ack << key << '\n' << std::flush;

    std::string peer = KeyOf(kind, (task + 1) % tasks, r);
    step = absl::StrCat("round ", r, ": blocking get ", peer);
    absl::StatusOr<std::string> got;
    status = repeat(
        [&] {
          got = agent.GetKeyValue(peer, kWait);
          return got.status();
        },
        false);
    if (!status.ok()) break;
    summary["values_checked"] = summary["values_checked"].get<int>() + 1;
    if (*got != ValueOf(peer)) {
      summary["wrong"].push_back({{"key", peer}, {"got", got->substr(0, 200)}});
    }

    std::string barrier = absl::StrCat("soak/round/", r);
    step = absl::StrCat("round ", r, ": barrier ", barrier);
    status = repeat([&] { return agent.WaitAtBarrier(barrier, kWait); }, false);
    if (!status.ok()) break;
    summary["rounds"] = r + 1;
    absl::SleepFor(absl::Seconds(round_pause));  // the pace of a workload's steps
  }
  if (!status.ok()) fail(status);
  std::ofstream(summary_path + ".tmp") << summary.dump();
  std::rename((summary_path + ".tmp").c_str(), summary_path.c_str());
  std::printf("agent task %d: %s\n", task, summary.dump().substr(0, 1000).c_str());
  std::fflush(stdout);
  bool clean = summary["errors"].empty() && summary["wrong"].empty();
  // No shutdown: the soak's tasks stop together (soak_client.py says why).
  std::_Exit(clean ? 0 : 1);
}
