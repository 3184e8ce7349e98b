#include "common/http_server.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>
#include <string>

namespace cohort {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Connects to 127.0.0.1:port (or [::1]:port); returns the socket or -1.
int Connect(int port, bool ipv6 = false) {
  const int fd = socket(ipv6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int rc;
  if (ipv6) {
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_port = htons(port);
    addr.sin6_addr = in6addr_loopback;
    rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  } else {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  }
  if (rc != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Whether a plain socket can bind [::1], found without the server under test, so that a
// server that cannot is a failure and only a machine without IPv6 skips.
bool HasIpv6Loopback() {
  const int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in6 addr{};
  addr.sin6_family = AF_INET6;
  addr.sin6_addr = in6addr_loopback;
  const bool bound = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return bound;
}

// Sends `request` verbatim and returns everything the server sends until it closes.
std::string Exchange(int port, const std::string& request, bool ipv6 = false) {
  const int fd = Connect(port, ipv6);
  if (fd < 0) return "<connect failed>";
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += n;
  }
  std::string response;
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) response.append(buf, n);
  close(fd);
  return response;
}

std::string Get(int port, const std::string& target, bool ipv6 = false) {
  return Exchange(port, "GET " + target + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                  ipv6);
}

std::string Post(int port, const std::string& target, const std::string& body) {
  return Exchange(port, "POST " + target + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" +
                            "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
}

std::string BodyOf(const std::string& response) {
  const size_t end = response.find("\r\n\r\n");
  return end == std::string::npos ? "" : response.substr(end + 4);
}

HttpResponse Echo(const HttpRequest& request) {
  return {200, "text/plain; charset=utf-8",
          request.method + " " + request.path + " ?" + request.query + " [" + request.body + "]"};
}

TEST(HttpServerTest, ServesRegisteredPath) {
  HttpServer server;
  server.Handle("/metrics", [](const HttpRequest&) {
    return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", "up 1\n"};
  });
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  ASSERT_GT(server.port(), 0);

  const std::string response = Get(server.port(), "/metrics");
  EXPECT_THAT(response, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(response, HasSubstr("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
  EXPECT_EQ(BodyOf(response), "up 1\n");
}

TEST(HttpServerTest, PassesMethodPathAndRawQuery) {
  HttpServer server;
  server.Handle("/echo", Echo);
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  EXPECT_EQ(BodyOf(Get(server.port(), "/echo?a=1&b=x%20y")), "GET /echo ?a=1&b=x%20y []");
}

TEST(HttpServerTest, TellsHandlersWhetherTheClientIsOnLoopback) {
  HttpServer server;
  server.Handle("/who", [](const HttpRequest& request) {
    return HttpResponse{200, "text/plain", request.from_loopback ? "loopback" : "remote"};
  });
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  EXPECT_EQ(BodyOf(Get(server.port(), "/who")), "loopback");
}

TEST(HttpServerTest, LoopbackAddressesAreThoseOf127And1AndTheirMappedForms) {
  auto v4 = [](const char* text) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    EXPECT_EQ(inet_pton(AF_INET, text, &a.sin_addr), 1) << text;
    return IsLoopbackAddress(reinterpret_cast<const sockaddr*>(&a));
  };
  auto v6 = [](const char* text) {
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    EXPECT_EQ(inet_pton(AF_INET6, text, &a.sin6_addr), 1) << text;
    return IsLoopbackAddress(reinterpret_cast<const sockaddr*>(&a));
  };
  EXPECT_TRUE(v4("127.0.0.1"));
  EXPECT_TRUE(v4("127.9.8.7"));
  EXPECT_FALSE(v4("10.0.0.7"));
  EXPECT_FALSE(v4("128.0.0.1"));
  EXPECT_TRUE(v6("::1"));
  EXPECT_TRUE(v6("::ffff:127.0.0.1"));
  EXPECT_FALSE(v6("::ffff:10.0.0.7"));
  EXPECT_FALSE(v6("fe80::1"));
  EXPECT_FALSE(IsLoopbackAddress(nullptr));
}

TEST(HttpServerTest, UnknownPathIs404) {
  HttpServer server;
  server.Handle("/metrics", Echo);
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  const std::string response = Get(server.port(), "/metrics/extra");
  EXPECT_THAT(response, StartsWith("HTTP/1.1 404 "));
  EXPECT_EQ(BodyOf(response), "not found\n");
}

TEST(HttpServerTest, ThrowingHandlerIs500WithMessage) {
  HttpServer server;
  server.Handle("/boom", [](const HttpRequest&) -> HttpResponse {
    throw std::runtime_error("state table unavailable");
  });
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  const std::string response = Get(server.port(), "/boom");
  EXPECT_THAT(response, StartsWith("HTTP/1.1 500 "));
  EXPECT_EQ(BodyOf(response), "state table unavailable\n");
}

TEST(HttpServerTest, PostBodyIsPassedToHandler) {
  HttpServer server;
  server.Handle("/echo", Echo);
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  const std::string body(100000, 'b');
  const std::string response = Post(server.port(), "/echo", body);
  EXPECT_THAT(response, StartsWith("HTTP/1.1 200 "));
  EXPECT_EQ(BodyOf(response), "POST /echo ? [" + body + "]");
}

TEST(HttpServerTest, DeclaredOversizedBodyIs413WithoutReadingIt) {
  HttpServer server;
  server.Handle("/echo", Echo);
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  // Headers only: the server must answer from Content-Length alone.
  const std::string response = Exchange(server.port(),
                                        "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                        "Content-Length: 2000000\r\n\r\n");
  EXPECT_THAT(response, StartsWith("HTTP/1.1 413 "));
}

TEST(HttpServerTest, ChunkedOversizedBodyIs413) {
  HttpServer server;
  server.Handle("/echo", Echo);
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  std::string request =
      "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n";
  const std::string chunk(64 * 1024, 'c');
  for (int i = 0; i < 17; ++i) request += "10000\r\n" + chunk + "\r\n";  // 17 * 64 KiB > 1 MiB.
  request += "0\r\n\r\n";
  EXPECT_THAT(Exchange(server.port(), request), StartsWith("HTTP/1.1 413 "));
}

TEST(HttpServerTest, ServesOnIpv6Loopback) {
  if (!HasIpv6Loopback()) GTEST_SKIP() << "this machine has no IPv6 loopback (::1)";
  HttpServer server;
  server.Handle("/echo", Echo);
  const absl::Status status = server.Start("[::1]:0");
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(BodyOf(Get(server.port(), "/echo", /*ipv6=*/true)), "GET /echo ? []");
}

TEST(HttpServerTest, LocalhostBindsIpv4Loopback) {
  HttpServer server;
  server.Handle("/echo", Echo);
  ASSERT_TRUE(server.Start("localhost:0").ok());
  EXPECT_EQ(BodyOf(Get(server.port(), "/echo")), "GET /echo ? []");
}

TEST(HttpServerTest, PortInUseIsAClearError) {
  HttpServer first;
  ASSERT_TRUE(first.Start("127.0.0.1:0").ok());
  HttpServer second;
  const std::string address = "127.0.0.1:" + std::to_string(first.port());
  const absl::Status status = second.Start(address);
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr(address));
  EXPECT_THAT(std::string(status.message()), HasSubstr("Address already in use"));
}

TEST(HttpServerTest, MalformedAddressesAreRejected) {
  for (const char* address : {"", "8477", "127.0.0.1", "127.0.0.1:", "127.0.0.1:http",
                              "127.0.0.1:65536", "::1:80", "[::1:80", "[::1]80"}) {
    HttpServer server;
    const absl::Status status = server.Start(address);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << address << ": " << status;
  }
}

TEST(HttpServerTest, StopIsIdempotentAndClosesThePort) {
  HttpServer server;
  server.Handle("/echo", Echo);
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  const int port = server.port();
  ASSERT_EQ(BodyOf(Get(port, "/echo")), "GET /echo ? []");
  server.Stop();
  server.Stop();
  EXPECT_EQ(Connect(port), -1);
  // The port is free again.
  HttpServer again;
  EXPECT_TRUE(again.Start("127.0.0.1:" + std::to_string(port)).ok());
}

}  // namespace
}  // namespace cohort
