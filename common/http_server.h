#pragma once

#include <sys/socket.h>

#include <functional>
#include <map>
#include <shared_mutex>
#include <string>

#include "absl/status/status.h"

struct MHD_Daemon;

namespace cohort {

struct HttpRequest {
  std::string method;
  std::string path;   // Percent-decoded, without the query string.
  std::string query;  // Raw (still percent-encoded) text after '?', or empty.
  std::string body;
  // The client connected from a loopback address (127.0.0.0/8, ::1, or either mapped into
  // the other family): a process of the same host or pod.
  bool from_loopback = false;
};

// Whether `address` (AF_INET or AF_INET6) is a loopback address; false for anything else.
bool IsLoopbackAddress(const sockaddr* address);

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// A listening TCP socket for HOST:PORT ("[ipv6]:port"; port 0 picks a free one; an empty host
// is every interface), SO_REUSEADDR, backlog SOMAXCONN; IPv4 addresses are tried first, so
// "localhost:N" is reachable at 127.0.0.1:N. The caller owns the descriptor.
absl::Status ListenSocket(const std::string& host_port, int* fd);
// The port a bound socket has (0 if none).
int BoundPort(int fd);

// Whether something could listen on HOST:PORT now (port 0: always): binds a socket and lets it
// go. "the address is already in use" (another program has the port), "... is not an address
// of this machine", or the reason; for a one-line error before a server (gRPC prints its own
// multi-line trace) tries.
absl::Status ProbeListenAddress(const std::string& host_port);

// A small HTTP/1.1 server for /metrics and health endpoints, over libmicrohttpd. Handlers run on
// the server's worker threads and may run concurrently with each other.
class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;

  // Request bodies larger than this are answered with 413.
  static constexpr size_t kMaxBodyBytes = 1 << 20;

  HttpServer();
  ~HttpServer();  // Stops the server.
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Serves `path` (exact match) with `handler`. Call before Start().
  void Handle(const std::string& path, Handler handler);

  // Binds and starts serving. `host_port` is "host:port" or "[ipv6]:port"; port 0 picks a free
  // port (see port()). A name that resolves to both families binds IPv4 first.
  absl::Status Start(const std::string& host_port);

  // The port bound by the last successful Start() (resolves :0); 0 before that.
  int port() const { return port_; }

  // Stops serving and closes the listening socket. Idempotent.
  void Stop();

 private:
  friend struct HttpServerCallbacks;

  HttpResponse Dispatch(const HttpRequest& request) const;

  mutable std::shared_mutex handlers_mu_;
  std::map<std::string, Handler> handlers_;
  MHD_Daemon* daemon_ = nullptr;
  int port_ = 0;
};

}  // namespace cohort
