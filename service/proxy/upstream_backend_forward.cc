// UpstreamBackend: one call forwarded upstream, held across outages, shared and cancelled.
#include <algorithm>
#include <optional>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "service/proxy/upstream_backend.h"
#include "service/proxy/upstream_forward.h"
#include "service/rpc/status_translation.h"

namespace cohort {

void UpstreamBackend::Submit(const std::shared_ptr<Forward>& op, WaiterId waiter,
                             Subscriber subscriber) {
  std::shared_ptr<Forward> target = op;
  absl::Status refused;
  Subscriber refuse;  // answered at once, outside the lock
  bool issue = false;
  {
    absl::MutexLock lock(&mu_);
    const std::string& key = op->options.share_key;
    if (!key.empty()) {
      if (auto it = shared_.find(key); it != shared_.end()) target = it->second;
    }
    if (target == op) {
      if (link_.ended()) {
        refused = link_.failure();
      } else if (link_.connected() || op->options.bypass_link) {
        issue = true;
      } else if (op->options.fail_fast) {
        refused = link_.UnreachableError();
      } else {
        held_.push_back(op);
      }
      if (refused.ok() && !key.empty()) shared_[key] = op;
    }
    if (refused.ok()) {
      target->subscribers.emplace_back(waiter, std::move(subscriber));
      if (waiter != 0) forwards_[waiter] = target;
    } else {
      refuse = std::move(subscriber);
    }
  }
  if (refuse) {
    refuse(refused, *op->response);
    return;
  }
  if (issue) Issue(op);
}

void UpstreamBackend::Issue(const std::shared_ptr<Forward>& op) {
  grpc::ClientContext* ctx = nullptr;
  std::shared_ptr<UpstreamPark> park;
  uint64_t park_id = 0;
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    if (op->abandoned || op->finished) return;
    if (link_.state() == Link::kStopped) {
      refused = link_.failure();
    } else {
      if (++op->attempts > 1) ++reissued_;
      ++in_flight_;
      live_.insert(op);
      op->parked_on.reset();
      if (op->park) park = link_.ParkStream(cohort_stub_.get());
      if (park) {
        park_id = park->NextId();
        op->parked_on = park;
        op->park_id = park_id;
      } else {
        op->context = std::make_unique<grpc::ClientContext>();
        if (op->deadline != absl::InfiniteFuture()) {
          op->context->set_deadline(absl::ToChronoTime(op->deadline));
        }
        if (op->request != 0) {
          op->context->AddMetadata(kRequestMetadataKey, FormatRequestId({session_, op->request,
                                                                         *open_requests_.begin()}));
        }
        ctx = op->context.get();
      }
    }
  }
  if (!refused.ok()) return Finish(op, refused);
  if (!park) {
    op->start(ctx, [this, op](const grpc::Status& wire) { OnAttemptDone(op, wire); });
    return;
  }
  v1::ParkRequest request;
  op->park(&request);
  park->Send(park_id, std::move(request),
             [this, op](const grpc::Status& wire, const v1::ParkResponse& response) {
               if (wire.ok()) op->take_park_result(response);
               OnAttemptDone(op, wire);
             });
  // Abandoned while it was being sent: Cancel found no call open on the stream yet.
  bool abandoned = false;
  {
    absl::MutexLock lock(&mu_);
    abandoned = op->abandoned;
  }
  if (abandoned) park->Cancel(park_id);
}

void UpstreamBackend::OnAttemptDone(const std::shared_ptr<Forward>& op, const grpc::Status& wire) {
  // Counted out only at the very end: Stop waits for it, and the backend must outlive
  // everything this does (subscribers included).
  auto done = absl::MakeCleanup([this] {
    absl::MutexLock lock(&mu_);
    --in_flight_;
  });
  absl::Status status = CoreStatusFromGrpc(wire);
  bool again = false;
  {
    absl::MutexLock lock(&mu_);
    live_.erase(op);
    if (op->abandoned) return;
    if (op->parked_on && op->parked_on->refused()) {
      // This call and every later one go unary until the next reconnection tries again. The
      // attempt does not count as sent: it never reached the service.
      link_.ParkRefused(op->parked_on, wire);
      --op->attempts;
      again = true;
    } else if (op->parked_on && op->parked_on != link_.park() && IsOutage(status) &&
               link_.connected()) {
      // Its stream was replaced while the coordinator stayed reachable: send it again on the
      // current one, no outage.
      --op->attempts;
      again = true;
    }
  }
  if (again) return Issue(op);
  {
    absl::MutexLock lock(&mu_);
    if (IsOutage(status)) {
      if (link_.ended()) {
        status = link_.failure();
      } else {
        link_.MarkDown();
        if (!op->options.fail_fast && !op->options.bypass_link) {
          held_.push_back(op);
          return;
        }
      }
    }
  }
  if (op->attempts > 1 && !status.ok() && op->options.reconcile_reissued) {
    op->options.reconcile_reissued(status, [this, op](const absl::Status& s) { Finish(op, s); });
    return;
  }
  Finish(op, status);
}

void UpstreamBackend::Finish(const std::shared_ptr<Forward>& op, const absl::Status& status) {
  std::vector<std::pair<WaiterId, Subscriber>> subscribers;
  {
    absl::MutexLock lock(&mu_);
    if (op->finished) return;
    op->finished = true;
    open_requests_.erase(op->request);
    subscribers.swap(op->subscribers);
    for (const auto& [waiter, subscriber] : subscribers) {
      if (waiter != 0) forwards_.erase(waiter);
    }
    const std::string& key = op->options.share_key;
    if (auto it = shared_.find(key); !key.empty() && it != shared_.end() && it->second == op) {
      shared_.erase(it);
    }
  }
  for (auto& [waiter, subscriber] : subscribers) subscriber(status, *op->response);
}

void UpstreamBackend::Cancel(WaiterId waiter, const absl::Status& status) {
  std::shared_ptr<Forward> op;
  Subscriber subscriber;
  grpc::ClientContext* abandoned_context = nullptr;
  std::shared_ptr<UpstreamPark> abandoned_park;
  uint64_t abandoned_park_id = 0;
  StatusDone poll;
  std::shared_ptr<UpstreamKeyWatch> watch;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = forwards_.find(waiter); it != forwards_.end()) {
      op = it->second;
      forwards_.erase(it);
      auto& subs = op->subscribers;
      for (auto s = subs.begin(); s != subs.end(); ++s) {
        if (s->first != waiter) continue;
        subscriber = std::move(s->second);
        subs.erase(s);
        break;
      }
      if (subs.empty() && !op->finished) {
        op->abandoned = true;
        op->finished = true;
        open_requests_.erase(op->request);
        held_.erase(std::remove(held_.begin(), held_.end(), op), held_.end());
        const std::string& key = op->options.share_key;
        if (auto s = shared_.find(key); !key.empty() && s != shared_.end() && s->second == op) {
          shared_.erase(s);
        }
        if (live_.contains(op)) {
          if (op->parked_on) {
            abandoned_park = op->parked_on;
            abandoned_park_id = op->park_id;
          } else {
            abandoned_context = op->context.get();
          }
        }
      }
    } else if (std::optional<StatusDone> local = tasks_.TakePoll(waiter)) {
      poll = std::move(*local);
    } else if (auto w = watches_.find(waiter); w != watches_.end()) {
      watch = w->second;
      watches_.erase(w);
    }
  }
  if (abandoned_context) abandoned_context->TryCancel();
  if (abandoned_park) abandoned_park->Cancel(abandoned_park_id);
  if (subscriber) subscriber(status, *op->response);
  if (poll) poll(status);
  if (watch) watch->End(status);
}

}  // namespace cohort
