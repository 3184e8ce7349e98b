#pragma once
// A loopback port for a server about to start, for the tests and the benchmarks alike.
// Hand-written: no library in the build picks ports with this rule.

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <random>
#include <set>
#include <string>

namespace cohort::testing {

// A loopback port nothing listens on right now, for servers that cannot bind port 0. It
// comes from below the kernel's ephemeral range (net.ipv4.ip_local_port_range), so that an
// outgoing connection of this or another process cannot take it between this call and the
// server's bind, and one process never gets the same port twice. Nor do two processes that
// run at once (ctest runs tests in parallel, each of which picks before its servers bind):
// a port is the process's while it holds an flock on /tmp/cohort-test-ports/PORT, which it
// keeps until it exits. 0 when none was found.
inline int PickFreePort() {
  static std::mutex mu;
  static std::set<int> given;
  static std::mt19937 random(
      static_cast<unsigned>(getpid()) * 7919u +
      static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count()));
  int low = 32768;
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(f, "%d", &low) != 1) low = 32768;
    std::fclose(f);
  }
  const int first = 12000, last = std::max(first + 1000, low) - 1;
  std::lock_guard<std::mutex> lock(mu);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int port = first + static_cast<int>(random() % static_cast<unsigned>(last - first + 1));
    if (given.count(port)) continue;
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    const bool free = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    close(fd);
    if (!free) continue;
    mkdir("/tmp/cohort-test-ports", 01777);
    const std::string claim = "/tmp/cohort-test-ports/" + std::to_string(port);
    const int held = open(claim.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (held >= 0 && flock(held, LOCK_EX | LOCK_NB) != 0) {
      close(held);
      continue;  // another process running now picked it
    }
    // The descriptor stays open (and the lock held) until the process exits. A claim that
    // cannot be made (no /tmp) leaves the rule above alone.
    given.insert(port);
    return port;
  }
  return 0;
}

}  // namespace cohort::testing
