#include "service/torch/torch_store_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio.hpp"
#include "common/durability_gate.h"
#include "common/http_server.h"
#include "service/torch/torch_store_session.h"
#include "spdlog/spdlog.h"

namespace cohort::torch {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// One client's socket: reads go to its session, the session's replies are written in order.
// Every handler runs on the connection's strand; Send, from any thread, writes under write_mu_.
// (Not in an anonymous namespace: the server's Impl holds them.)
class TorchStoreConnection : public std::enable_shared_from_this<TorchStoreConnection> {
 public:
  using Forget = std::function<void(TorchStoreConnection*)>;

  TorchStoreConnection(tcp::socket socket, const TorchStoreServer::MakeHandler& make, Forget forget,
                       TorchStoreMetrics* metrics)
      : socket_(std::move(socket)),
        strand_(asio::make_strand(socket_.get_executor())),
        make_(make),
        forget_(std::move(forget)),
        metrics_(metrics) {
    boost::system::error_code ignored;
    peer_ = socket_.remote_endpoint(ignored);
    socket_.non_blocking(true, ignored);  // Drain and Send take what is there, never wait
    if (metrics_ != nullptr) metrics_->Opened();
  }

  // Makes the session; then Start reads. (Two steps: the server publishes the connection in
  // between, so that Stop finds every connection with its session.)
  void Init() {
    std::weak_ptr<TorchStoreConnection> weak = weak_from_this();
    session_ = make_(
        [weak](std::string bytes) {
          if (auto self = weak.lock()) self->Send(std::move(bytes));
        },
        [weak](absl::Status why) {
          if (auto self = weak.lock()) self->End(std::move(why));
        });
    session_->OnResume([weak] {
      if (auto self = weak.lock()) self->Resume();
    });
  }
  void Start() {
    asio::post(strand_, [self = shared_from_this()] { self->Read(); });
  }

  // From any thread.
  void Close() {
    asio::post(strand_, [self = shared_from_this()] { self->CloseNow(); });
  }

 private:
  // Reads into a few bytes of the connection's own, which hold a whole command of most kinds
  // (a GET, an ADD, a WAIT), then drains what else is there into the thread's buffer: a
  // connection that waits (most of them, most of the time: a rank parked in a WAIT) holds little
  // memory, and each read costs one recv and no change to the epoll set (async_wait would
  // re-arm the descriptor every time).
  void Read() {
    socket_.async_read_some(
        asio::buffer(first_),
        asio::bind_executor(
            strand_, [self = shared_from_this()](const boost::system::error_code& error, size_t n) {
              if (error) {
                self->CloseNow();
                return;
              }
              if (!self->Deliver(absl::string_view(self->first_.data(), n))) return;
              if (n == self->first_.size() && !self->Drain()) return;
              self->Read();
            }));
  }

  // What was read goes to the session; whether to read on (not closed, the session not full).
  bool Deliver(absl::string_view bytes) {
    session_->Received(bytes);
    if (closed_) return false;
    if (session_->Full()) {
      paused_ = true;  // until the session resumes it (TCP holds the client)
      return false;
    }
    return true;
  }

  // Reads what the socket holds now, without waiting; whether to read on.
  bool Drain() {
    thread_local std::array<char, 64 * 1024> buffer;
    for (;;) {
      boost::system::error_code error;
      const size_t n = socket_.read_some(asio::buffer(buffer), error);
      if (error == asio::error::would_block || error == asio::error::try_again) return true;
      if (error) {
        CloseNow();
        return false;
      }
      if (!Deliver(absl::string_view(buffer.data(), n))) return false;
      if (n < buffer.size()) return true;
    }
  }

  // From any thread: the session takes more again.
  void Resume() {
    asio::post(strand_, [self = shared_from_this()] {
      if (!self->paused_ || self->closed_) return;
      self->paused_ = false;
      self->Read();
    });
  }

  // From any thread. The reply is written at once from the calling thread when nothing is
  // queued before it (one send, no hop to the strand: a WAIT released by another connection's
  // SET goes out from that SET's handler); what the socket does not take now is queued and
  // written on the strand, and later replies queue behind it, so they leave in call order.
  void Send(std::string bytes) {
    absl::MutexLock lock(&write_mu_);
    if (write_closed_) return;
    if (outbox_.empty()) {
      size_t sent = 0;
      while (sent < bytes.size()) {
        const ssize_t n = ::send(socket_.native_handle(), bytes.data() + sent, bytes.size() - sent,
                                 MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
          sent += static_cast<size_t>(n);
          continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        // The client is gone (EPIPE, ECONNRESET): the read side sees it and closes.
        return;
      }
      if (sent == bytes.size()) return;
      bytes.erase(0, sent);
      outbox_.push_back(std::move(bytes));
      asio::post(strand_, [self = shared_from_this()] { self->WriteNext(); });
      return;
    }
    outbox_.push_back(std::move(bytes));
  }

  // On the strand: writes the front of outbox_; its handler writes the next. The front stays
  // in outbox_ (and is freed with the connection) until its handler runs, even when the
  // connection closes meanwhile.
  void WriteNext() {
    asio::const_buffer front;
    {
      absl::MutexLock lock(&write_mu_);
      if (write_closed_ || outbox_.empty()) return;
      front = asio::buffer(outbox_.front());
    }
    asio::async_write(
        socket_, front,
        asio::bind_executor(
            strand_, [self = shared_from_this()](const boost::system::error_code& error, size_t) {
              if (error || self->closed_) {
                self->CloseNow();
                return;
              }
              bool more = false;
              {
                absl::MutexLock lock(&self->write_mu_);
                self->outbox_.pop_front();
                more = !self->outbox_.empty();
              }
              if (more) self->WriteNext();
            }));
  }

  void End(absl::Status why) {
    asio::post(strand_, [self = shared_from_this(), why = std::move(why)] {
      spdlog::warn("torch store: closing the connection from {}: {}", self->Peer(), why.ToString());
      self->CloseNow(why);
    });
  }

  // `why`: OK when the client went or the server stops.
  void CloseNow(const absl::Status& why = absl::OkStatus()) {
    if (closed_) return;
    closed_ = true;
    if (metrics_ != nullptr) metrics_->Closed(why);
    session_->Closed();
    boost::system::error_code ignored;
    {
      // A Send on another thread uses the descriptor under this lock: it is not closed (and its
      // number reused) under that send.
      absl::MutexLock lock(&write_mu_);
      write_closed_ = true;
      socket_.shutdown(tcp::socket::shutdown_both, ignored);
      socket_.close(ignored);
    }
    forget_(this);
  }

  std::string Peer() const { return absl::StrCat(peer_.address().to_string(), ":", peer_.port()); }

  tcp::socket socket_;
  asio::strand<tcp::socket::executor_type> strand_;
  const TorchStoreServer::MakeHandler& make_;
  const Forget forget_;
  TorchStoreMetrics* const metrics_;
  tcp::endpoint peer_;
  std::shared_ptr<TorchStoreHandler> session_;
  std::array<char, 128> first_;  // what each read takes first
  absl::Mutex write_mu_;
  std::deque<std::string> outbox_ ABSL_GUARDED_BY(write_mu_);  // replies the socket did not take
  bool write_closed_ ABSL_GUARDED_BY(write_mu_) = false;
  bool closed_ = false;  // on the strand
  bool paused_ = false;  // not reading: the session holds as much as it may
};

class TorchStoreServer::Impl {
 public:
  Impl(TorchStoreServer::MakeHandler make, TorchStoreServerOptions options)
      : make_(std::move(make)),
        options_(std::move(options)),
        accept_strand_(asio::make_strand(io_)),
        acceptor_(accept_strand_),
        backoff_(accept_strand_) {}

  absl::Status Start() {
    int fd = -1;
    if (absl::Status s = ListenSocket(options_.listen, &fd); !s.ok()) return s;
    port_ = BoundPort(fd);
    sockaddr_storage address{};
    socklen_t length = sizeof(address);
    getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
    boost::system::error_code error;
    acceptor_.assign(address.ss_family == AF_INET6 ? tcp::v6() : tcp::v4(), fd, error);
    if (error) {
      ::close(fd);
      return absl::UnavailableError(
          absl::StrCat("cannot serve on ", options_.listen, ": ", error.message()));
    }
    Accept();
    for (int i = 0; i < std::max(1, options_.threads); ++i) {
      threads_.emplace_back([this] { io_.run(); });
    }
    return absl::OkStatus();
  }

  int port() const { return port_; }

  void Stop() {
    std::call_once(stopped_, [this] {
      asio::post(accept_strand_, [this] {
        boost::system::error_code ignored;
        acceptor_.close(ignored);
        backoff_.cancel();
      });
      std::vector<std::shared_ptr<TorchStoreConnection>> open;
      {
        absl::MutexLock lock(&mu_);
        stopping_ = true;
        for (const auto& [raw, connection] : connections_) open.push_back(connection);
      }
      for (auto& connection : open) connection->Close();
      // The connections close (on their strands), then nothing is left for the threads to do.
      work_.reset();
      for (std::thread& t : threads_) t.join();
      threads_.clear();
    });
  }

 private:
  // Handlers on accept_strand_, as the close that Stop posts.
  void Accept() {
    acceptor_.async_accept([this](const boost::system::error_code& error, tcp::socket socket) {
      if (error == asio::error::operation_aborted || !acceptor_.is_open()) return;
      if (!error) {
        Admit(std::move(socket));
        Accept();
        return;
      }
      // Out of descriptors (EMFILE, ENFILE) and the like: say so, and try again shortly
      // rather than at once.
      spdlog::warn("torch store: accepting a connection failed: {}; trying again in 100 ms",
                   error.message());
      backoff_.expires_after(std::chrono::milliseconds(100));
      backoff_.async_wait([this](const boost::system::error_code& waited) {
        if (!waited && acceptor_.is_open()) Accept();
      });
    });
  }

  void Admit(tcp::socket socket) {
    boost::system::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);  // replies are small; do not wait for more
    std::shared_ptr<TorchStoreConnection> connection;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      if (connections_.size() >= options_.max_connections) {
        spdlog::warn("torch store: refusing a connection: {} are open (the limit)",
                     connections_.size());
        return;  // the socket closes as it goes out of scope
      }
      connection = std::make_shared<TorchStoreConnection>(
          std::move(socket), make_, [this](TorchStoreConnection* c) { Forget(c); },
          options_.metrics);
      connection->Init();
      connections_.emplace(connection.get(), connection);
    }
    connection->Start();
  }

  void Forget(TorchStoreConnection* connection) {
    absl::MutexLock lock(&mu_);
    connections_.erase(connection);
  }

  const TorchStoreServer::MakeHandler make_;
  const TorchStoreServerOptions options_;
  asio::io_context io_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_{
      asio::make_work_guard(io_)};
  asio::strand<asio::io_context::executor_type> accept_strand_;
  tcp::acceptor acceptor_;
  asio::steady_timer backoff_;
  int port_ = 0;
  std::vector<std::thread> threads_;
  std::once_flag stopped_;
  absl::Mutex mu_;
  absl::flat_hash_map<TorchStoreConnection*, std::shared_ptr<TorchStoreConnection>> connections_
      ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

TorchStoreServer::TorchStoreServer(CoordinationService* service,
                                   const TorchStoreServerOptions& options)
    : TorchStoreServer(
          [service, limits = options.limits, metrics = options.metrics](
              TorchStoreHandler::Send send, TorchStoreHandler::End end) {
            // Replies, and the end of a connection after them, go out once the changes they
            // follow are on disk, in the order sent.
            DurabilityGate* gate = service->durability_gate();
            return std::make_shared<TorchStoreSession>(
                service, limits, AnswerAfterDurable(gate, std::move(send)),
                AnswerAfterDurable(gate, std::move(end)), metrics);
          },
          options) {}

TorchStoreServer::TorchStoreServer(MakeHandler make, TorchStoreServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(make), std::move(options))) {}

TorchStoreServer::~TorchStoreServer() { Stop(); }

absl::Status TorchStoreServer::Start() { return impl_->Start(); }

int TorchStoreServer::port() const { return impl_->port(); }

void TorchStoreServer::Stop() { impl_->Stop(); }

}  // namespace cohort::torch
