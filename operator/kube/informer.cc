#include "operator/kube/informer.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"

namespace cohort::kube {
namespace {

std::string Key(const std::string& ns, const std::string& name) {
  return absl::StrCat(ns, "/", name);
}
std::string Key(const json& o) { return Key(Namespace(o), Name(o)); }

}  // namespace

bool NewerResourceVersion(const std::string& a, const std::string& b) {
  uint64_t x = 0, y = 0;
  if (!absl::SimpleAtoi(a, &x) || !absl::SimpleAtoi(b, &y)) return true;
  return x > y;
}

Informer::Informer(Client* client, Resource resource, Options options, Handlers handlers)
    : client_(client),
      resource_(std::move(resource)),
      options_(std::move(options)),
      handlers_(std::move(handlers)) {}

Informer::~Informer() { Stop(); }

void Informer::Start() {
  thread_ = std::thread([this] { Run(); });
}

void Informer::Stop() {
  stop_ = true;
  cv_.SignalAll();
  if (thread_.joinable()) thread_.join();
}

bool Informer::WaitForSync(const std::atomic<bool>& stop) const {
  absl::MutexLock lock(&mu_);
  while (!synced_ && !stop && !stop_) cv_.WaitWithTimeout(&mu_, absl::Milliseconds(100));
  return synced_;
}

std::string Informer::IndexKey(const json& object) const {
  if (options_.index_label.empty()) return "";
  const json* labels = nullptr;
  if (auto it = object.find("metadata"); it != object.end()) {
    if (auto l = it->find("labels"); l != it->end() && l->is_object()) labels = &*l;
  }
  if (!labels) return "";
  auto v = labels->find(options_.index_label);
  if (v == labels->end() || !v->is_string()) return "";
  return Key(Namespace(object), v->get<std::string>());
}

void Informer::PutLocked(const json& incoming) {
  // managedFields are often the largest part of an object and nothing here reads them.
  json object = incoming;
  if (auto m = object.find("metadata"); m != object.end() && m->is_object()) {
    m->erase("managedFields");
  }
  const std::string key = Key(object);
  if (auto old = objects_.find(key); old != objects_.end()) {
    std::string old_index = IndexKey(old->second);
    if (!old_index.empty()) index_[old_index].erase(key);
  }
  std::string index = IndexKey(object);
  objects_[key] = std::move(object);
  if (!index.empty()) index_[index].insert(key);
}

void Informer::EraseLocked(const std::string& key) {
  auto it = objects_.find(key);
  if (it == objects_.end()) return;
  std::string index = IndexKey(it->second);
  if (!index.empty()) {
    index_[index].erase(key);
    if (index_[index].empty()) index_.erase(index);
  }
  objects_.erase(it);
}

absl::Status Informer::ListAndReplace(std::string* resource_version) {
  auto list = client_->List(resource_, options_.namespace_name, options_.selector);
  if (!list.ok()) return list.status();
  std::vector<json> removed;
  std::vector<json> present;
  {
    absl::MutexLock lock(&mu_);
    std::map<std::string, json> previous;
    previous.swap(objects_);
    index_.clear();
    for (auto& item : (*list)["items"]) {
      // Items of a list carry no kind; add it so handlers can tell objects apart.
      item["kind"] = resource_.kind;
      previous.erase(Key(item));
      PutLocked(item);
      present.push_back(item);
    }
    for (auto& [key, object] : previous) removed.push_back(std::move(object));
  }
  *resource_version = ResourceVersion(*list);
  synced_ = true;
  cv_.SignalAll();
  for (const auto& o : removed) {
    if (handlers_.on_delete) handlers_.on_delete(o);
  }
  for (const auto& o : present) {
    if (handlers_.on_upsert) handlers_.on_upsert(o);
  }
  return absl::OkStatus();
}

void Informer::Apply(const WatchEvent& event, std::string* resource_version) {
  std::string rv = ResourceVersion(event.object);
  if (!rv.empty()) *resource_version = rv;
  if (event.type == "BOOKMARK") return;
  if (event.type == "DELETED") {
    {
      absl::MutexLock lock(&mu_);
      EraseLocked(Key(event.object));
    }
    if (handlers_.on_delete) handlers_.on_delete(event.object);
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    PutLocked(event.object);
  }
  if (handlers_.on_upsert) handlers_.on_upsert(event.object);
}

void Informer::Run() {
  std::chrono::milliseconds backoff = options_.initial_backoff;
  const auto sleep = [this](std::chrono::milliseconds d) {
    const absl::Time until = absl::Now() + absl::FromChrono(d);
    absl::MutexLock lock(&mu_);
    while (!stop_.load() && !cv_.WaitWithDeadline(&mu_, until)) {
    }
  };
  while (!stop_) {
    std::string rv;
    if (absl::Status s = ListAndReplace(&rv); !s.ok()) {
      if (stop_ || absl::IsCancelled(s)) return;
      spdlog::warn("list {}: {} (again in {} ms)", resource_.plural, s.ToString(), backoff.count());
      if (handlers_.on_watch_restart) handlers_.on_watch_restart(std::string(s.message()));
      sleep(backoff);
      backoff = std::min(backoff * 2, options_.max_backoff);
      continue;
    }
    // Watch until the version is gone or an error; a normal end (timeout) watches again.
    while (!stop_) {
      absl::Status s = client_->Watch(resource_, options_.namespace_name, options_.selector, rv,
                                      options_.watch_timeout_seconds,
                                      [&](const WatchEvent& e) { Apply(e, &rv); });
      if (stop_ || absl::IsCancelled(s)) return;
      if (s.ok()) {
        backoff = options_.initial_backoff;
        continue;
      }
      if (handlers_.on_watch_restart) handlers_.on_watch_restart(std::string(s.message()));
      if (absl::IsOutOfRange(s)) {
        spdlog::info("watch {}: resource version {} is gone; listing again", resource_.plural, rv);
      } else {
        spdlog::warn("watch {}: {} (list again in {} ms)", resource_.plural, s.ToString(),
                     backoff.count());
        sleep(backoff);
        backoff = std::min(backoff * 2, options_.max_backoff);
      }
      break;
    }
  }
}

std::optional<json> Informer::Get(const std::string& ns, const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = objects_.find(Key(ns, name));
  if (it == objects_.end()) return std::nullopt;
  return it->second;
}

std::vector<json> Informer::ByIndex(const std::string& ns, const std::string& value) const {
  absl::MutexLock lock(&mu_);
  std::vector<json> out;
  auto it = index_.find(Key(ns, value));
  if (it == index_.end()) return out;
  for (const auto& key : it->second) out.push_back(objects_.at(key));
  return out;
}

std::vector<json> Informer::All() const {
  absl::MutexLock lock(&mu_);
  std::vector<json> out;
  out.reserve(objects_.size());
  for (const auto& [key, object] : objects_) out.push_back(object);
  return out;
}

size_t Informer::Size() const {
  absl::MutexLock lock(&mu_);
  return objects_.size();
}

void Informer::Upsert(const json& object) {
  absl::MutexLock lock(&mu_);
  auto it = objects_.find(Key(object));
  if (it != objects_.end() &&
      !NewerResourceVersion(ResourceVersion(object), ResourceVersion(it->second))) {
    return;
  }
  json copy = object;
  if (!copy.contains("kind")) copy["kind"] = resource_.kind;
  PutLocked(copy);
}

}  // namespace cohort::kube
