#include "service/proxy/upstream_park.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace cohort {

std::shared_ptr<UpstreamPark> UpstreamPark::Open(v1::Coordinator::Stub* stub) {
  std::shared_ptr<UpstreamPark> park(new UpstreamPark());
  {
    absl::MutexLock lock(&park->mu_);
    park->self_ = park;
  }
  stub->async()->Park(&park->context_, park.get());
  // Writes start from outside the reactions (any thread sending a call): the hold keeps
  // gRPC from destroying the call while one may still start; it goes once the read fails
  // (the stream is over), and no write starts after that.
  park->AddHold();
  park->StartRead(&park->response_);
  park->StartCall();
  return park;
}

uint64_t UpstreamPark::NextId() {
  absl::MutexLock lock(&mu_);
  return ++next_id_;
}

void UpstreamPark::Send(uint64_t id, v1::ParkRequest request, Done done) {
  grpc::Status ended;
  {
    absl::MutexLock lock(&mu_);
    if (!ended_) {
      // Once the stream is over (writes closed) the call is not sent; OnDone ends it.
      request.set_id(id);
      open_[id] = std::move(done);
      if (!writes_closed_) queue_.push_back(std::move(request));
      WriteNextLocked();
      return;
    }
    ended = end_;
  }
  done(ended, v1::ParkResponse());
}

void UpstreamPark::Cancel(uint64_t id) {
  absl::MutexLock lock(&mu_);
  if (ended_ || writes_closed_ || !open_.contains(id)) return;
  v1::ParkRequest& request = queue_.emplace_back();
  request.set_id(id);
  request.set_cancel(true);
  WriteNextLocked();
}

void UpstreamPark::Shutdown() { context_.TryCancel(); }

bool UpstreamPark::ended() const {
  absl::MutexLock lock(&mu_);
  return ended_;
}

bool UpstreamPark::refused() const {
  absl::MutexLock lock(&mu_);
  return refused_;
}

size_t UpstreamPark::open_calls() const {
  absl::MutexLock lock(&mu_);
  return open_.size();
}

void UpstreamPark::WriteNextLocked() {
  if (writing_ || queue_.empty() || ended_ || writes_closed_) return;
  writing_request_ = std::move(queue_.front());
  queue_.pop_front();
  writing_ = true;
  StartWrite(&writing_request_);
}

void UpstreamPark::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  writing_ = false;
  // A failed write means the stream broke; OnDone follows and ends every call.
  if (ok) WriteNextLocked();
}

void UpstreamPark::OnReadDone(bool ok) {
  if (!ok) {
    // The stream is over; OnDone follows once the hold is gone. No write starts from now on.
    {
      absl::MutexLock lock(&mu_);
      writes_closed_ = true;
      queue_.clear();
    }
    RemoveHold();
    return;
  }
  Done done;
  {
    absl::MutexLock lock(&mu_);
    answered_ = true;
    if (auto it = open_.find(response_.id()); it != open_.end()) {
      done = std::move(it->second);
      open_.erase(it);
    }
  }
  if (done) {
    done(grpc::Status(static_cast<grpc::StatusCode>(response_.code()), response_.message(),
                      response_.details()),
         response_);
  }
  StartRead(&response_);
}

void UpstreamPark::OnDone(const grpc::Status& status) {
  std::vector<Done> open;
  std::shared_ptr<UpstreamPark> self;
  grpc::Status end;
  {
    absl::MutexLock lock(&mu_);
    ended_ = true;
    // A stream refused before any answer: the coordinator will not take one (no Park, or a
    // policy in the way); its calls go unary. Otherwise, whatever ended the stream, its calls
    // are the coordinator's no more: they are sent again once it is reached.
    refused_ = !answered_ && !status.ok() && status.error_code() != grpc::StatusCode::UNAVAILABLE &&
               status.error_code() != grpc::StatusCode::CANCELLED;
    end_ = refused_
               ? status
               : grpc::Status(grpc::StatusCode::UNAVAILABLE,
                              absl::StrCat("the park stream to the coordinator ended (",
                                           status.error_code(), " ", status.error_message(), ")"));
    end = end_;
    for (auto& [id, done] : open_) open.push_back(std::move(done));
    open_.clear();
    queue_.clear();
    self = std::move(self_);
  }
  for (auto& done : open) done(end, v1::ParkResponse());
  // `self` may be the last owner: nothing of this object is touched after it goes.
}

}  // namespace cohort
