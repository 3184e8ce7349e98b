#pragma once
// cohort.v1 TorchStore's messages and the backend's ForwardedTorchCommand, both ways.

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

}  // namespace cohort
