#pragma once
// cohort.v1 TorchStore's messages and the backend's ForwardedTorchCommand, both ways.

#include <vector>

#include "cohort/v1/coordinator.pb.h"
#include "service/backend/coordination_backend.h"

namespace cohort {

inline ForwardedTorchCommand TorchCommandFromProto(const v1::TorchStoreRequest& request) {
  ForwardedTorchCommand command;
  command.client = request.client();
  command.sequence = request.sequence();
  command.command = request.command();
  command.end_client = request.end_client();
  return command;
}

inline void TorchCommandToProto(const ForwardedTorchCommand& command,
                                v1::TorchStoreRequest* request) {
  request->set_client(command.client);
  request->set_sequence(command.sequence);
  request->set_command(command.command);
  request->set_end_client(command.end_client);
}

inline std::vector<ForwardedTorchCommand> TorchBatchFromProto(
    const v1::TorchStoreBatchRequest& request) {
  std::vector<ForwardedTorchCommand> commands;
  commands.reserve(request.commands_size());
  for (const v1::TorchStoreRequest& c : request.commands()) {
    commands.push_back(TorchCommandFromProto(c));
  }
  return commands;
}

inline void TorchBatchToProto(const std::vector<ForwardedTorchCommand>& commands,
                              v1::TorchStoreBatchRequest* request) {
  for (const ForwardedTorchCommand& c : commands) TorchCommandToProto(c, request->add_commands());
}

inline void TorchResultsToProto(std::vector<absl::StatusOr<std::string>>& results,
                                v1::TorchStoreBatchResponse* response) {
  for (absl::StatusOr<std::string>& r : results) {
    v1::TorchStoreResult* out = response->add_results();
    if (r.ok()) {
      out->set_reply(std::move(*r));
    } else {
      out->set_code(static_cast<int32_t>(r.status().code()));
      out->set_message(std::string(r.status().message()));
    }
  }
}

inline std::vector<absl::StatusOr<std::string>> TorchResultsFromProto(
    const v1::TorchStoreBatchResponse& response) {
  std::vector<absl::StatusOr<std::string>> results;
  results.reserve(response.results_size());
  for (const v1::TorchStoreResult& r : response.results()) {
    if (r.code() == 0) {
      results.emplace_back(r.reply());
    } else {
      results.emplace_back(absl::Status(static_cast<absl::StatusCode>(r.code()), r.message()));
    }
  }
  return results;
}

}  // namespace cohort
