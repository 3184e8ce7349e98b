#include "bench/tcpstore_load.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "service/torch/tcpstore_codec.h"

namespace cohort::bench {

namespace {

using torch::Command;
using torch::EncodeCommand;
using torch::Query;

// One rank's connection; a broken one throws (the run is then an error, as the Python
// driver's).
class Rank {
 public:
  Rank(const sockaddr_in& address, uint32_t nonce) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
    if (connect(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
      throw std::runtime_error(std::string("connect: ") + std::strerror(errno));
    }
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    // As torch's client (2.5 and later) opens a connection: VALIDATE, then PING with a nonce.
    // Two writes, as torch's: torch's own server reads one command per packet it gets.
    Send(EncodeCommand({Query::kValidate, {}, {}, torch::kValidationMagic}));
    Send(EncodeCommand({Query::kPing, {}, {}, nonce}));
    if (ReadU32() != nonce) throw std::runtime_error("PING answered another nonce");
  }
  ~Rank() {
    if (fd_ >= 0) close(fd_);
  }
  Rank(const Rank&) = delete;
  Rank& operator=(const Rank&) = delete;

  int fd() const { return fd_; }
  void Send(const std::string& bytes) {
    for (size_t sent = 0; sent < bytes.size();) {
      ssize_t n = send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) throw std::runtime_error(std::string("send: ") + std::strerror(errno));
      sent += static_cast<size_t>(n);
    }
  }
  void Read(void* out, size_t n) {
    for (size_t got = 0; got < n;) {
      ssize_t r = recv(fd_, static_cast<char*>(out) + got, n - got, 0);
      if (r <= 0) throw std::runtime_error("the server closed a rank's connection");
      got += static_cast<size_t>(r);
    }
  }
  int64_t ReadI64() {
    int64_t v = 0;
    Read(&v, sizeof(v));  // little-endian on every platform torch runs on
    return v;
  }
  uint32_t ReadU32() {
    uint32_t v = 0;
    Read(&v, sizeof(v));
    return v;
  }

 private:
  int fd_ = -1;
};

std::string TorchAdd(const std::string& key) { return EncodeCommand({Query::kAdd, {key}, {}, 1}); }
std::string TorchSetDone(const std::string& key) {
  return EncodeCommand({Query::kSet, {key + "/done"}, {"1"}, 0});
}
std::string TorchWaitDone(const std::string& key) {
  return EncodeCommand({Query::kWait, {key + "/done"}, {}, 0});
}

// Every rank arrives at once: ADDs sent on every connection, then read; the rank that reached
// N sets the key, the others wait; seconds until every wait answered.
double Burst(std::vector<Rank*>& ranks, const std::string& key) {
  const auto n = static_cast<int64_t>(ranks.size());
  const Clock::time_point start = Clock::now();
  for (Rank* r : ranks) r->Send(TorchAdd(key));
  std::vector<Rank*> waiting;
  for (Rank* r : ranks) {
    if (r->ReadI64() == n) {
      r->Send(TorchSetDone(key));
    } else {
      r->Send(TorchWaitDone(key));
      waiting.push_back(r);
    }
  }
  for (Rank* r : waiting) {
    char released = 0;
    r->Read(&released, 1);
  }
  return Seconds(start, Clock::now());
}

// The server's address; false when `address` is no IPv4 HOST:PORT. Raises the descriptor
// limit: a connection per rank.
bool ServerAddress(const std::string& address, sockaddr_in* to) {
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;
  setrlimit(RLIMIT_NOFILE, &files);
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return false;
  *to = sockaddr_in{};
  to->sin_family = AF_INET;
  to->sin_port = htons(static_cast<uint16_t>(std::atoi(address.substr(colon + 1).c_str())));
  return inet_pton(AF_INET, address.substr(0, colon).c_str(), &to->sin_addr) == 1;
}

}  // namespace

nlohmann::json TcpStoreMemory(const std::string& address, const Options& o) {
  sockaddr_in to{};
  if (!ServerAddress(address, &to)) {
    return {{"error", "tcpstore: --coordinator must be an IPv4 HOST:PORT, not " + address}};
  }
  nlohmann::json out;
  try {
    const long before = RssKiB(o.pid);
    std::vector<std::unique_ptr<Rank>> ranks;
    for (int i = 0; i < o.tasks; ++i) {
      ranks.push_back(std::make_unique<Rank>(to, static_cast<uint32_t>(i + 1)));
    }
    const long connected = RssKiB(o.pid);
    for (auto& rank : ranks) rank->Send(TorchWaitDone("memory/never"));
    // A moment for every WAIT to reach the server and park (the barrier rounds' wait, longer).
    std::this_thread::sleep_for(std::chrono::milliseconds(200) +
                                std::chrono::microseconds(20 * o.tasks));
    const long waiting = RssKiB(o.pid);
    const double n = o.tasks;
    out = {{"rss_kib_before", before},
           {"rss_kib_connected", connected},
           {"rss_kib_waiting", waiting},
           {"bytes_per_rank", (connected - before) * 1024.0 / n},
           {"bytes_per_waiting_rank", (waiting - before) * 1024.0 / n}};
  } catch (const std::exception& e) {
    out["error"] = std::string("tcpstore: ") + e.what();
  }
  return out;
}

nlohmann::json TcpStoreBarriers(const std::string& address, const std::string& scenario,
                                const Options& o) {
  sockaddr_in to{};
  if (!ServerAddress(address, &to)) {
    return {{"error", "tcpstore: --coordinator must be an IPv4 HOST:PORT, not " + address}};
  }
  nlohmann::json out;
  try {
    Clock::time_point start = Clock::now();
    std::vector<std::unique_ptr<Rank>> owned;
    std::vector<Rank*> ranks;
    for (int i = 0; i < o.tasks; ++i) {
      owned.push_back(std::make_unique<Rank>(to, static_cast<uint32_t>(i + 1)));
      ranks.push_back(owned.back().get());
    }
    out["connect_seconds"] = Seconds(start, Clock::now());
    out["register_seconds"] = Burst(ranks, "register");
    out["register_failed"] = 0;
    if (scenario != "barrier") return out;
    out["burst_seconds"] = Burst(ranks, "burst");

    // Rounds: N-1 ranks parked in their WAIT, then the last arrives; from its ADD to the last
    // release, each release seen by epoll as it comes.
    const int epoll = epoll_create1(EPOLL_CLOEXEC);
    for (size_t i = 1; i < ranks.size(); ++i) {
      epoll_event event{};
      event.events = EPOLLIN;
      event.data.u64 = i;
      epoll_ctl(epoll, EPOLL_CTL_ADD, ranks[i]->fd(), &event);
    }
    Samples rounds, releases;
    for (int round = 0; round < o.rounds; ++round) {
      const std::string key = "round/" + std::to_string(round);
      for (size_t i = 1; i < ranks.size(); ++i) ranks[i]->Send(TorchAdd(key));
      for (size_t i = 1; i < ranks.size(); ++i) ranks[i]->ReadI64();
      for (size_t i = 1; i < ranks.size(); ++i) ranks[i]->Send(TorchWaitDone(key));
      // As the Python driver: a moment for the WAITs to reach the server and park.
      std::this_thread::sleep_for(std::chrono::microseconds(20000 + 2 * o.tasks));
      const Clock::time_point last = Clock::now();
      ranks[0]->Send(TorchAdd(key));
      if (int64_t count = ranks[0]->ReadI64(); count != o.tasks) {
        throw std::runtime_error("the last ADD of round " + std::to_string(round) + " counted " +
                                 std::to_string(count) + ", not " + std::to_string(o.tasks));
      }
      ranks[0]->Send(TorchSetDone(key));
      releases.Add(Seconds(last, Clock::now()));
      size_t released = 1;
      std::vector<epoll_event> events(1024);
      while (released < ranks.size()) {
        int ready = epoll_wait(epoll, events.data(), static_cast<int>(events.size()), 60'000);
        if (ready <= 0) throw std::runtime_error("a round did not release within 60 s");
        const Clock::time_point now = Clock::now();
        for (int e = 0; e < ready; ++e) {
          char byte = 0;
          ranks[events[e].data.u64]->Read(&byte, 1);
          releases.Add(Seconds(last, now));
          ++released;
        }
      }
      rounds.Add(Seconds(last, Clock::now()));
    }
    close(epoll);
    out["rounds"] = o.rounds;
    out["round_p50_ms"] = rounds.Percentile(50) * 1e3;
    out["round_p99_ms"] = rounds.Percentile(99) * 1e3;
    out["round_max_ms"] = rounds.Percentile(100) * 1e3;
    out["task_release"] = releases.Summary();
    out["failed_calls"] = 0;
    out["released_before_last_arrival"] = 0;
  } catch (const std::exception& e) {
    out["error"] = std::string("tcpstore: ") + e.what();
  }
  return out;
}

}  // namespace cohort::bench
