// UpstreamOptions: the channel to the coordinator.
#include "service/proxy/upstream_options.h"

#include "common/grpc_auth.h"

namespace cohort {

std::shared_ptr<grpc::Channel> MakeUpstreamChannel(const UpstreamOptions& options) {
  grpc::ChannelArguments args;
  // jaxlib shares compiled executables through the store.
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  args.SetCompressionAlgorithm(GRPC_COMPRESS_GZIP);
  // Notice a coordinator that is gone, and find it again soon after it is back.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1'000);
  // A coordinator pod made again comes back at a new address under the same name: look the
  // name up again within a second, not gRPC's default of 30 s after the last lookup (the
  // coordinator came back in under a second and the proxy found it 24 s later).
  args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, 1'000);
  if (!options.tls_server_name.empty()) args.SetSslTargetNameOverride(options.tls_server_name);
  auto credentials = options.credentials ? options.credentials : grpc::InsecureChannelCredentials();
  return CreateChannelWithToken(options.address, credentials, args, options.auth_token);
}

}  // namespace cohort
