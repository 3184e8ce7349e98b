// UpstreamCallTable: the proxy's forwarded calls, held, shared, subscribed to and out.
#include "service/proxy/upstream_call_table.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "service/core/requests.h"

namespace cohort {

uint64_t UpstreamCallTable::OpenRequest() {
  const uint64_t request = next_request_++;
  open_requests_.insert(request);
  return request;
}

UpstreamCallTable::Call UpstreamCallTable::SharedWith(const Call& call) const {
  const std::string& key = call->options.share_key;
  if (!key.empty()) {
    if (auto it = shared_.find(key); it != shared_.end()) return it->second;
  }
  return call;
}

void UpstreamCallTable::Share(const Call& call) {
  const std::string& key = call->options.share_key;
  if (!key.empty()) shared_[key] = call;
}

void UpstreamCallTable::Unshare(const Call& call) {
  const std::string& key = call->options.share_key;
  if (key.empty()) return;
  if (auto it = shared_.find(key); it != shared_.end() && it->second == call) shared_.erase(it);
}

void UpstreamCallTable::Subscribe(const Call& call, WaiterId waiter,
                                  UpstreamSubscriber subscriber) {
  call->subscribers.emplace_back(waiter, std::move(subscriber));
  if (waiter != 0) forwards_[waiter] = call;
}

void UpstreamCallTable::Hold(const Call& call) { held_.push_back(call); }

std::vector<UpstreamCallTable::Call> UpstreamCallTable::TakeHeld() {
  std::vector<Call> held;
  held.swap(held_);
  return held;
}

std::vector<UpstreamCallTable::Call> UpstreamCallTable::TakeExpired(absl::Time now) {
  std::vector<Call> expired;
  auto late = [now](const Call& call) { return call->deadline <= now; };
  std::copy_if(held_.begin(), held_.end(), std::back_inserter(expired), late);
  held_.erase(std::remove_if(held_.begin(), held_.end(), late), held_.end());
  return expired;
}

void UpstreamCallTable::AttemptSent(const Call& call) {
  if (++call->attempts > 1) ++reissued_;
  ++in_flight_;
  live_.insert(call);
}

uint64_t UpstreamCallTable::SendAttempt(const Call& call, const std::shared_ptr<UpstreamPark>& park,
                                        const std::string& session) {
  AttemptSent(call);
  call->parked_on.reset();
  if (park) {
    call->parked_on = park;
    call->park_id = park->NextId();
    return call->park_id;
  }
  call->context = std::make_unique<grpc::ClientContext>();
  if (call->deadline != absl::InfiniteFuture()) {
    call->context->set_deadline(absl::ToChronoTime(call->deadline));
  }
  if (call->request != 0) {
    call->context->AddMetadata(kRequestMetadataKey,
                               FormatRequestId({session, call->request, low_mark()}));
  }
  return 0;
}

std::vector<UpstreamCallTable::Call> UpstreamCallTable::UnaryAttempts() const {
  std::vector<Call> unary;
  for (const Call& call : live_) {
    if (!call->parked_on) unary.push_back(call);
  }
  return unary;
}

int64_t UpstreamCallTable::WaitingCalls() const {
  auto waits = [](const Call& call) { return call->options.waits_on_peers && !call->finished; };
  return std::count_if(live_.begin(), live_.end(), waits) +
         std::count_if(held_.begin(), held_.end(), waits);
}

UpstreamCallTable::Subscribers UpstreamCallTable::Finish(const Call& call) {
  Subscribers subscribers;
  if (call->finished) return subscribers;
  call->finished = true;
  open_requests_.erase(call->request);
  subscribers.swap(call->subscribers);
  for (const auto& [waiter, subscriber] : subscribers) {
    if (waiter != 0) forwards_.erase(waiter);
  }
  Unshare(call);
  return subscribers;
}

UpstreamCallTable::Departure UpstreamCallTable::Unsubscribe(WaiterId waiter) {
  Departure departure;
  auto it = forwards_.find(waiter);
  if (it == forwards_.end()) return departure;
  Call call = it->second;
  forwards_.erase(it);
  auto& subscribers = call->subscribers;
  for (auto s = subscribers.begin(); s != subscribers.end(); ++s) {
    if (s->first != waiter) continue;
    departure.subscriber = std::move(s->second);
    subscribers.erase(s);
    break;
  }
  if (subscribers.empty() && !call->finished) {
    call->abandoned = true;
    call->finished = true;
    open_requests_.erase(call->request);
    held_.erase(std::remove(held_.begin(), held_.end(), call), held_.end());
    Unshare(call);
    if (live_.contains(call)) {
      if (call->parked_on) {
        departure.park = call->parked_on;
        departure.park_id = call->park_id;
      } else {
        departure.context = call->context.get();
      }
    }
  }
  departure.call = std::move(call);
  return departure;
}

std::vector<UpstreamCallTable::Call> UpstreamCallTable::TakeAll() {
  std::vector<Call> calls;
  calls.swap(held_);
  for (auto& [waiter, call] : forwards_) calls.push_back(std::move(call));
  for (auto& [key, call] : shared_) calls.push_back(std::move(call));
  calls.insert(calls.end(), live_.begin(), live_.end());
  forwards_.clear();
  shared_.clear();
  live_.clear();
  return calls;
}

UpstreamCallTable::Watch UpstreamCallTable::TakeWatch(WaiterId waiter) {
  auto it = watches_.find(waiter);
  if (it == watches_.end()) return nullptr;
  Watch watch = std::move(it->second);
  watches_.erase(it);
  return watch;
}

std::vector<UpstreamCallTable::Watch> UpstreamCallTable::TakeWatches() {
  std::vector<Watch> watches;
  for (auto& [waiter, watch] : watches_) watches.push_back(watch);
  watches_.clear();
  return watches;
}

std::vector<UpstreamCallTable::Watch> UpstreamCallTable::TakeHeldWatches() {
  std::vector<Watch> watches;
  watches.swap(held_watches_);
  return watches;
}

}  // namespace cohort
