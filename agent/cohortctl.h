// cohortctl's shared pieces: the options, the client, exit codes and the commands' entry points.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cohort/v1/coordinator.grpc.pb.h"
#include "common/grpc_tls.h"
#include "grpcpp/grpcpp.h"
#include "tensorflow/coordination_service.grpc.pb.h"

namespace cohort::ctl {

struct Options {
  std::string coordinator;
  std::string auth_token_file;
  std::string timeout = "10s";
  std::string output = "table";
  ClientTls tls;
};

// Exit codes: 1 the coordinator said no (or the value is absent), 2 bad usage,
// 3 the coordinator could not be reached.
inline constexpr int kRefused = 1;
inline constexpr int kUsage = 2;
inline constexpr int kUnreachable = 3;

class Client {
 public:
  explicit Client(const Options& options) : options_(options) {}

  absl::Status Init();

  std::unique_ptr<grpc::ClientContext> Context(
      absl::Duration timeout = absl::ZeroDuration()) const {
    auto context = std::make_unique<grpc::ClientContext>();
    absl::Duration d = timeout == absl::ZeroDuration() ? timeout_ : timeout;
    if (d != absl::InfiniteDuration()) context->set_deadline(absl::ToChronoTime(absl::Now() + d));
    return context;
  }

  tensorflow::CoordinationService::Stub& tf() { return *tf_; }
  v1::Coordinator::Stub& cohort() { return *cohort_; }
  std::shared_ptr<grpc::Channel> channel() { return channel_; }
  bool json() const { return options_.output == "json"; }

 private:
  const Options& options_;
  absl::Duration timeout_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<tensorflow::CoordinationService::Stub> tf_;
  std::unique_ptr<v1::Coordinator::Stub> cohort_;
};

// Prints `status` as one line on stderr; answers the exit code.
int Fail(const absl::Status& status);
// 0 for OK, else as Fail.
int Check(const grpc::Status& status);
// A value as one line of a table: newlines and tabs shown as \n and \t, so that one value is
// one line (the JSON output has it as it is).
std::string OneLine(const std::string& value);

// status, tasks and objects (cohortctl_status.cc).
absl::StatusOr<v1::ClusterSnapshot> Snapshot(Client& client);
int ShowStatus(Client& client);
// The job's tasks (the coordination protocols'); with `runtime_only`, or in the table when
// the task runtime is in use, the task runtime's tasks too.
int ShowTasks(Client& client, bool runtime_only);
int ShowObjects(Client& client);

// kv get, put, ls, rm, watch and incr (cohortctl_kv.cc). `wait`: a duration, "0s" for none.
int KvGet(Client& client, const std::string& key, const std::string& wait);
// `value` "-" reads stdin.
int KvPut(Client& client, const std::string& key, std::string value, bool overwrite);
int KvList(Client& client, const std::string& directory);
// Without `prefix`, refuses a key with keys under it.
int KvRemove(Client& client, const std::string& key, bool prefix);
// Until Ctrl-C, from `revision` (0: from now).
int KvWatch(Client& client, const std::string& key, int64_t revision);
int KvIncrement(Client& client, const std::string& key, int64_t delta);

}  // namespace cohort::ctl
