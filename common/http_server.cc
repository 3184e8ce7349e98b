#include "common/http_server.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <exception>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cohort {
namespace {

// Per-request state, created by the URI log callback (which sees the raw URI with its query)
// and freed by the request-completed callback.
struct RequestState {
  std::string raw_uri;
  bool headers_seen = false;
  bool body_too_large = false;
  std::string body;
};

struct HostPort {
  std::string host;  // Empty: all interfaces.
  std::string port;
};

absl::Status ParseHostPort(const std::string& host_port, HostPort* out) {
  std::string rest;
  if (!host_port.empty() && host_port[0] == '[') {
    const size_t close = host_port.find(']');
    if (close == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad address \"", host_port, "\": missing ']' after IPv6 address"));
    }
    out->host = host_port.substr(1, close - 1);
    rest = host_port.substr(close + 1);
  } else {
    const size_t colon = host_port.rfind(':');
    if (colon == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad address \"", host_port, "\": expected host:port"));
    }
    out->host = host_port.substr(0, colon);
    rest = host_port.substr(colon);
    if (out->host.find(':') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad address \"", host_port, "\": write IPv6 addresses in brackets, e.g. [::1]:8477"));
    }
  }
  int port = -1;
  if (rest.size() < 2 || rest[0] != ':' ||
      rest.find_first_not_of("0123456789", 1) != std::string::npos ||
      !absl::SimpleAtoi(rest.substr(1), &port) || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad address \"", host_port, "\": expected a port number 0-65535"));
  }
  out->port = rest.substr(1);
  return absl::OkStatus();
}

}  // namespace

// Returns a listening socket for `host_port`. Addresses are tried IPv4 first, as Go's
// net.Listen does, so "localhost:N" is reachable at 127.0.0.1:N.
absl::Status ListenSocket(const std::string& host_port, int* fd_out) {
  HostPort hp;
  if (absl::Status s = ParseHostPort(host_port, &hp); !s.ok()) return s;

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* results = nullptr;
  const int gai =
      getaddrinfo(hp.host.empty() ? nullptr : hp.host.c_str(), hp.port.c_str(), &hints, &results);
  if (gai != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve \"", host_port, "\": ", gai_strerror(gai)));
  }
  std::vector<const addrinfo*> candidates;
  for (const addrinfo* ai = results; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET) candidates.push_back(ai);
  }
  for (const addrinfo* ai = results; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET6) candidates.push_back(ai);
  }

  absl::Status status = absl::InvalidArgumentError(
      absl::StrCat("cannot listen on ", host_port, ": no IPv4 or IPv6 address"));
  for (const addrinfo* ai : candidates) {
    const int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      status = absl::ErrnoToStatus(errno, absl::StrCat("cannot listen on ", host_port, ": socket"));
      continue;
    }
    const int one = 1;
    const char* step = nullptr;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
      step = "setsockopt(SO_REUSEADDR)";
    } else if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      step = "bind";
    } else if (listen(fd, SOMAXCONN) != 0) {
      step = "listen";
    }
    if (step == nullptr) {
      freeaddrinfo(results);
      *fd_out = fd;
      return absl::OkStatus();
    }
    status = absl::ErrnoToStatus(errno, absl::StrCat("cannot listen on ", host_port, ": ", step));
    close(fd);
  }
  freeaddrinfo(results);
  return status;
}

int BoundPort(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return 0;
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return 0;
}

namespace {

MHD_Result Queue(MHD_Connection* connection, const HttpResponse& response) {
  MHD_Response* mhd_response = MHD_create_response_from_buffer(
      response.body.size(), const_cast<char*>(response.body.data()), MHD_RESPMEM_MUST_COPY);
  if (mhd_response == nullptr) return MHD_NO;
  MHD_add_response_header(mhd_response, MHD_HTTP_HEADER_CONTENT_TYPE,
                          response.content_type.c_str());
  // MHD refuses status codes outside 100-999 by dropping the connection; answer 500 instead.
  const int status = response.status >= 100 && response.status <= 999 ? response.status : 500;
  const MHD_Result result = MHD_queue_response(connection, status, mhd_response);
  MHD_destroy_response(mhd_response);
  return result;
}

HttpResponse PayloadTooLarge() {
  return {413, "text/plain; charset=utf-8",
          absl::StrCat("request body larger than ", HttpServer::kMaxBodyBytes, " bytes\n")};
}

}  // namespace

// libmicrohttpd's C callbacks; a struct so that HttpServer can befriend it.
struct HttpServerCallbacks {
  static void* OnUri(void* /*cls*/, const char* uri, MHD_Connection* /*connection*/) {
    auto* state = new RequestState;
    state->raw_uri = uri;
    return state;
  }

  static MHD_Result OnRequest(void* cls, MHD_Connection* connection, const char* url,
                              const char* method, const char* /*version*/, const char* upload_data,
                              size_t* upload_data_size, void** req_cls) {
    auto* state = static_cast<RequestState*>(*req_cls);
    if (!state->headers_seen) {
      state->headers_seen = true;
      const char* length =
          MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
      uint64_t declared = 0;
      if (length != nullptr && absl::SimpleAtoi(length, &declared) &&
          declared > HttpServer::kMaxBodyBytes) {
        return Queue(connection, PayloadTooLarge());  // Before reading (or 100-continuing) it.
      }
      return MHD_YES;
    }
    if (*upload_data_size > 0) {
      if (!state->body_too_large &&
          state->body.size() + *upload_data_size <= HttpServer::kMaxBodyBytes) {
        state->body.append(upload_data, *upload_data_size);
      } else {
        state->body_too_large = true;  // Keep reading (and dropping) the rest, then answer 413.
        std::string().swap(state->body);
      }
      *upload_data_size = 0;
      return MHD_YES;
    }
    if (state->body_too_large) return Queue(connection, PayloadTooLarge());

    HttpRequest request;
    request.method = method;
    request.path = url;
    const size_t question = state->raw_uri.find('?');
    if (question != std::string::npos) request.query = state->raw_uri.substr(question + 1);
    request.body = std::move(state->body);
    const MHD_ConnectionInfo* info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    request.from_loopback = info != nullptr && IsLoopbackAddress(info->client_addr);
    return Queue(connection, static_cast<const HttpServer*>(cls)->Dispatch(request));
  }

  static void OnCompleted(void* /*cls*/, MHD_Connection* /*connection*/, void** req_cls,
                          MHD_RequestTerminationCode /*code*/) {
    delete static_cast<RequestState*>(*req_cls);
    *req_cls = nullptr;
  }
};

bool IsLoopbackAddress(const sockaddr* address) {
  if (address == nullptr) return false;
  if (address->sa_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(address);
    return (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
  }
  if (address->sa_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&a)) return true;
    return IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127;
  }
  return false;
}

HttpServer::HttpServer() = default;

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Handle(const std::string& path, Handler handler) {
  std::unique_lock<std::shared_mutex> lock(handlers_mu_);
  handlers_[path] = std::move(handler);
}

absl::Status HttpServer::Start(const std::string& host_port) {
  if (daemon_ != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("HTTP server already serving on port ", port_));
  }
  int fd = -1;
  if (absl::Status s = ListenSocket(host_port, &fd); !s.ok()) return s;

  daemon_ = MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD, 0, /*apc=*/nullptr, /*apc_cls=*/nullptr,
                             &HttpServerCallbacks::OnRequest, this, MHD_OPTION_LISTEN_SOCKET, fd,
                             MHD_OPTION_THREAD_POOL_SIZE, 2u, MHD_OPTION_CONNECTION_TIMEOUT, 30u,
                             MHD_OPTION_URI_LOG_CALLBACK, &HttpServerCallbacks::OnUri, nullptr,
                             MHD_OPTION_NOTIFY_COMPLETED, &HttpServerCallbacks::OnCompleted,
                             nullptr, MHD_OPTION_END);
  if (daemon_ == nullptr) {
    close(fd);
    return absl::InternalError(absl::StrCat("libmicrohttpd failed to start on ", host_port));
  }
  port_ = BoundPort(fd);
  return absl::OkStatus();
}

void HttpServer::Stop() {
  if (daemon_ == nullptr) return;
  MHD_stop_daemon(daemon_);  // Joins the worker threads and closes the listening socket.
  daemon_ = nullptr;
}

HttpResponse HttpServer::Dispatch(const HttpRequest& request) const {
  std::shared_lock<std::shared_mutex> lock(handlers_mu_);
  const auto it = handlers_.find(request.path);
  if (it == handlers_.end()) return {404, "text/plain; charset=utf-8", "not found\n"};
  try {
    return it->second(request);
  } catch (const std::exception& e) {
    return {500, "text/plain; charset=utf-8", absl::StrCat(e.what(), "\n")};
  } catch (...) {
    return {500, "text/plain; charset=utf-8", "internal error\n"};
  }
}

absl::Status ProbeListenAddress(const std::string& host_port) {
  int fd = -1;
  absl::Status s = ListenSocket(host_port, &fd);
  if (fd >= 0) close(fd);
  if (s.ok()) return s;
  if (absl::StrContains(s.message(), "Address already in use")) {
    return absl::UnavailableError("the address is already in use (another program listens there)");
  }
  if (absl::StrContains(s.message(), "Cannot assign requested address")) {
    return absl::InvalidArgumentError("the host is not an address of this machine");
  }
  return s;
}

}  // namespace cohort
