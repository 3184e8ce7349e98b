// FakeClient (fake_client.h): the API server's semantics the operator relies on, in memory.
#include "operator/kube/fake_client.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"

namespace cohort::kube {
namespace {

std::string ObjectKey(const std::string& resource, const std::string& ns, const std::string& name) {
  return absl::StrCat(resource, "|", ns, "|", name);
}

std::string ApiVersionOf(const Resource& r) {
  if (r.api_path.rfind("/apis/", 0) == 0) return r.api_path.substr(6);
  if (r.api_path.rfind("/api/", 0) == 0) return r.api_path.substr(5);
  return r.api_path;
}

// The selector's terms, split at commas outside parentheses.
std::vector<std::string> Terms(const std::string& selector) {
  std::vector<std::string> out;
  std::string term;
  int depth = 0;
  for (char c : selector) {
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c == ',' && depth == 0) {
      out.push_back(std::string(absl::StripAsciiWhitespace(term)));
      term.clear();
    } else {
      term += c;
    }
  }
  if (!absl::StripAsciiWhitespace(term).empty()) {
    out.push_back(std::string(absl::StripAsciiWhitespace(term)));
  }
  return out;
}

// The value at a dotted path ("metadata.name"), as text; absent: nothing.
std::optional<std::string> FieldText(const json& object, const std::string& path) {
  const json* at = &object;
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    if (!at->is_object()) return std::nullopt;
    auto it = at->find(std::string(part));
    if (it == at->end()) return std::nullopt;
    at = &*it;
  }
  if (at->is_string()) return at->get<std::string>();
  if (at->is_null()) return std::nullopt;
  return at->dump();
}

// Whether labels match one term of a label selector.
absl::StatusOr<bool> MatchTerm(const json& labels, const std::string& term) {
  const auto label = [&labels](const std::string& key) -> std::optional<std::string> {
    if (!labels.is_object()) return std::nullopt;
    auto it = labels.find(std::string(absl::StripAsciiWhitespace(key)));
    if (it == labels.end() || !it->is_string()) return std::nullopt;
    return it->get<std::string>();
  };
  if (term.empty()) return absl::InvalidArgumentError("empty label selector term");
  for (const std::string set_op : {" notin ", " in "}) {
    const size_t at = term.find(set_op);
    if (at == std::string::npos) continue;
    const std::string rest(absl::StripAsciiWhitespace(term.substr(at + set_op.size())));
    if (rest.size() < 2 || rest.front() != '(' || rest.back() != ')') {
      return absl::InvalidArgumentError(absl::StrCat("bad set in label selector: ", term));
    }
    std::vector<std::string> values;
    for (absl::string_view v : absl::StrSplit(rest.substr(1, rest.size() - 2), ',')) {
      values.emplace_back(absl::StripAsciiWhitespace(v));
    }
    const auto value = label(term.substr(0, at));
    const bool in = value && std::find(values.begin(), values.end(), *value) != values.end();
    return set_op == " in " ? in : !in;
  }
  if (const size_t at = term.find("!="); at != std::string::npos) {
    return label(term.substr(0, at)) != term.substr(at + 2);
  }
  if (const size_t eq = term.find('='); eq != std::string::npos) {
    const size_t value_at = term.compare(eq, 2, "==") == 0 ? eq + 2 : eq + 1;
    return label(term.substr(0, eq)) == term.substr(value_at);
  }
  if (term[0] == '!') return !label(term.substr(1)).has_value();
  return label(term).has_value();
}

absl::StatusOr<bool> MatchLabels(const json& labels, const std::string& selector) {
  for (const std::string& term : Terms(selector)) {
    auto match = MatchTerm(labels, term);
    if (!match.ok() || !*match) return match;
  }
  return true;
}

}  // namespace

absl::StatusOr<bool> MatchesSelectors(const json& object, const ListOptions& options) {
  const json labels = object.is_object() && object.contains("metadata") &&
                              object["metadata"].is_object() &&
                              object["metadata"].contains("labels")
                          ? object["metadata"]["labels"]
                          : json::object();
  auto labels_match = MatchLabels(labels, options.label_selector);
  if (!labels_match.ok() || !*labels_match) return labels_match;
  for (const std::string& term : Terms(options.field_selector)) {
    const size_t ne = term.find("!=");
    const size_t eq = term.find('=');
    if (eq == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("bad field selector term: ", term));
    }
    const bool negated = ne != std::string::npos && ne < eq;
    const std::string path = term.substr(0, negated ? ne : eq);
    const size_t value_at = negated ? ne + 2 : (term.compare(eq, 2, "==") == 0 ? eq + 2 : eq + 1);
    const bool equal = FieldText(object, path).value_or("") == term.substr(value_at);
    if (equal == negated) return false;
  }
  return true;
}

std::string FakeClient::Action::ToString() const {
  return absl::StrCat(verb, " ", resource, subresource.empty() ? "" : "/", subresource,
                      ns.empty() && name.empty() ? "" : " ", ns, ns.empty() ? "" : "/", name);
}

FakeClient::FakeClient(const Clock* clock) : clock_(clock ? clock : &real_clock_) {}

std::string FakeClient::NowText() const {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", clock_->Now(), absl::UTCTimeZone());
}

absl::Status FakeClient::BeginLocked(const std::string& verb, const Resource& r,
                                     const std::string& ns, const std::string& name,
                                     const std::string& subresource) {
  actions_.push_back({verb, r.plural, subresource, ns, name});
  if (shut_down_) return absl::CancelledError("the client was shut down");
  if (std::find(unserved_.begin(), unserved_.end(), ResourceKey(r)) != unserved_.end()) {
    return absl::NotFoundError(
        absl::StrCat("the server could not find the requested resource (", r.plural, ")"));
  }
  for (auto it = failures_.begin(); it != failures_.end(); ++it) {
    if (it->verb == verb && (it->resource == "*" || it->resource == r.plural)) {
      absl::Status status = it->status;
      if (--it->times <= 0) failures_.erase(it);
      return status;
    }
  }
  return absl::OkStatus();
}

absl::Status FakeClient::BeginLocked(const Call& call) {
  // The verbs as the API server's audit log names them; a create by its object's name.
  const char* verb = "get";
  switch (call.verb) {
    case Call::Verb::kGet:
      break;
    case Call::Verb::kList:
      verb = "list";
      break;
    case Call::Verb::kCreate:
      verb = "create";
      break;
    case Call::Verb::kReplace:
      verb = "update";
      break;
    case Call::Verb::kPatch:
      verb = "patch";
      break;
    case Call::Verb::kDelete:
      verb = "delete";
      break;
  }
  const std::string name = call.verb == Call::Verb::kCreate ? Name(*call.body) : call.name;
  return BeginLocked(verb, call.resource, call.ns, name, call.subresource);
}

json FakeClient::StampLocked(const Resource& r, json object, const std::string& ns) {
  json& meta = object["metadata"];
  if (!meta.is_object()) meta = json::object();
  if (r.namespaced) meta["namespace"] = ns;
  if (!meta.contains("uid")) meta["uid"] = absl::StrCat("fake-uid-", next_uid_++);
  if (!meta.contains("creationTimestamp")) meta["creationTimestamp"] = NowText();
  if (!meta.contains("generation")) meta["generation"] = 1;
  meta["resourceVersion"] = absl::StrCat(++version_);
  object["kind"] = r.kind;
  object["apiVersion"] = ApiVersionOf(r);
  return object;
}

void FakeClient::RecordLocked(const Resource& r, const std::string& type, const json& object) {
  log_.push_back({version_, ResourceKey(r), type, object});
  changed_.SignalAll();
}

json FakeClient::Add(const Resource& r, json object) {
  absl::MutexLock lock(&mu_);
  const std::string ns = r.namespaced ? Namespace(object) : "";
  object = StampLocked(r, std::move(object), ns);
  objects_[ObjectKey(ResourceKey(r), ns, Name(object))] = object;
  RecordLocked(r, "ADDED", object);
  return object;
}

std::optional<json> FakeClient::Peek(const Resource& r, const std::string& ns,
                                     const std::string& name) {
  absl::MutexLock lock(&mu_);
  auto it = objects_.find(ObjectKey(ResourceKey(r), r.namespaced ? ns : "", name));
  if (it == objects_.end()) return std::nullopt;
  return it->second;
}

std::vector<FakeClient::Action> FakeClient::Actions() const {
  absl::MutexLock lock(&mu_);
  return actions_;
}

std::vector<std::string> FakeClient::Writes() const {
  std::vector<std::string> out;
  for (const Action& a : Actions()) {
    if (a.verb != "get" && a.verb != "list" && a.verb != "watch") out.push_back(a.ToString());
  }
  return out;
}

void FakeClient::ClearActions() {
  absl::MutexLock lock(&mu_);
  actions_.clear();
}

void FakeClient::FailNext(const std::string& verb, const std::string& resource, absl::Status status,
                          int times) {
  absl::MutexLock lock(&mu_);
  failures_.push_back({verb, resource, std::move(status), times});
}

void FakeClient::Unserve(const Resource& r) {
  absl::MutexLock lock(&mu_);
  unserved_.push_back(ResourceKey(r));
}

bool FakeClient::WaitForWatches(size_t watches, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  const auto caught_up = [this, watches] {
    return watches_.size() >= watches &&
           std::all_of(watches_.begin(), watches_.end(),
                       [this](const auto& w) { return w.second == log_.size(); });
  };
  const absl::Time deadline = absl::Now() + timeout;
  while (!caught_up()) {
    if (changed_.WaitWithDeadline(&mu_, deadline)) return caught_up();
  }
  return true;
}

int FakeClient::ActiveWatches() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(watches_.size());
}

absl::StatusOr<json> FakeClient::Send(const Call& call) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = BeginLocked(call); !s.ok()) return s;
  switch (call.verb) {
    case Call::Verb::kGet:
      return GetLocked(call);
    case Call::Verb::kList:
      return ListLocked(call);
    case Call::Verb::kCreate:
      return CreateLocked(call);
    case Call::Verb::kReplace:
      return ReplaceLocked(call);
    case Call::Verb::kPatch:
      return PatchLocked(call);
    case Call::Verb::kDelete:
      return DeleteLocked(call);
  }
  return absl::InternalError("unknown verb");
}

absl::StatusOr<json> FakeClient::GetLocked(const Call& call) {
  const Resource& r = call.resource;
  const std::string& ns = call.ns;
  const std::string& name = call.name;
  auto it = objects_.find(ObjectKey(ResourceKey(r), r.namespaced ? ns : "", name));
  if (it == objects_.end()) {
    return absl::NotFoundError(absl::StrCat(r.plural, " \"", name, "\" not found"));
  }
  return it->second;
}

absl::StatusOr<json> FakeClient::ListLocked(const Call& call) {
  const Resource& r = call.resource;
  const std::string& ns = call.ns;
  json items = json::array();
  const std::string prefix = ObjectKey(ResourceKey(r), r.namespaced ? ns : "", "");
  for (const auto& [key, object] : objects_) {
    if (key.rfind(ns.empty() || !r.namespaced ? ResourceKey(r) + "|" : prefix, 0) != 0) continue;
    auto match = MatchesSelectors(object, call.list_options);
    if (!match.ok()) return match.status();
    if (*match) items.push_back(object);
  }
  return json{{"kind", r.kind + "List"},
              {"apiVersion", ApiVersionOf(r)},
              {"metadata", {{"resourceVersion", absl::StrCat(version_)}}},
              {"items", items}};
}

absl::StatusOr<json> FakeClient::CreateLocked(const Call& call) {
  const Resource& r = call.resource;
  const std::string& ns = call.ns;
  const json& object = *call.body;
  std::string name = Name(object);
  if (!object.is_object()) return absl::InvalidArgumentError("the object is not a JSON object");
  json created = object;
  if (name.empty()) {
    const std::string generate =
        created.value(json::json_pointer("/metadata/generateName"), std::string());
    if (generate.empty()) return absl::InvalidArgumentError("metadata.name: Required value");
    name = absl::StrCat(generate, "f", next_uid_);
    created["metadata"]["name"] = name;
    actions_.back().name = name;
  }
  const std::string key = ObjectKey(ResourceKey(r), r.namespaced ? ns : "", name);
  if (objects_.count(key)) {
    return absl::AlreadyExistsError(absl::StrCat(r.plural, " \"", name, "\" already exists"));
  }
  created["metadata"].erase("resourceVersion");
  created["metadata"].erase("uid");
  created["metadata"].erase("deletionTimestamp");
  created = StampLocked(r, std::move(created), r.namespaced ? ns : "");
  objects_[key] = created;
  RecordLocked(r, "ADDED", created);
  return created;
}

json FakeClient::CommitLocked(const Resource& r, const std::string& key, const json& current,
                              json updated) {
  const auto spec_of = [](json o) {
    o.erase("metadata");
    o.erase("status");
    return o;
  };
  json& meta = updated["metadata"];
  for (const char* kept :
       {"uid", "creationTimestamp", "namespace", "name", "generation", "deletionTimestamp"}) {
    if (current["metadata"].contains(kept)) {
      meta[kept] = current["metadata"][kept];
    } else {
      meta.erase(kept);
    }
  }
  if (spec_of(current) != spec_of(updated)) {
    meta["generation"] = current["metadata"].value("generation", int64_t{1}) + 1;
  }
  meta["resourceVersion"] = absl::StrCat(++version_);
  updated["kind"] = r.kind;
  updated["apiVersion"] = ApiVersionOf(r);
  const bool finalized = !meta.contains("finalizers") || meta["finalizers"].empty();
  if (meta.contains("deletionTimestamp") && finalized) {
    objects_.erase(key);
    RecordLocked(r, "DELETED", updated);
  } else {
    objects_[key] = updated;
    RecordLocked(r, "MODIFIED", updated);
  }
  return updated;
}

absl::StatusOr<json> FakeClient::ReplaceLocked(const Call& call) {
  const Resource& r = call.resource;
  const std::string& ns = call.ns;
  const std::string& name = call.name;
  const std::string& subresource = call.subresource;
  const json& object = *call.body;
  const std::string key = ObjectKey(ResourceKey(r), r.namespaced ? ns : "", name);
  auto it = objects_.find(key);
  if (it == objects_.end()) {
    return absl::NotFoundError(absl::StrCat(r.plural, " \"", name, "\" not found"));
  }
  if (!object.is_object()) return absl::InvalidArgumentError("the object is not a JSON object");
  const std::string version = ResourceVersion(object);
  if (!version.empty() && version != ResourceVersion(it->second)) {
    return absl::AbortedError(absl::StrCat(
        "Operation cannot be fulfilled on ", r.plural, " \"", name,
        "\": the object has been modified; please apply your changes to the latest version"));
  }
  json updated = it->second;
  if (subresource == "status") {
    updated["status"] = object.value("status", json::object());
  } else {
    updated = object;
    if (it->second.contains("status")) {
      updated["status"] = it->second["status"];  // the status subresource's alone
    } else {
      updated.erase("status");
    }
  }
  return CommitLocked(r, key, it->second, std::move(updated));
}

absl::StatusOr<json> FakeClient::PatchLocked(const Call& call) {
  const Resource& r = call.resource;
  const std::string& ns = call.ns;
  const std::string& name = call.name;
  const std::string& subresource = call.subresource;
  const json& patch = *call.body;
  const std::string key = ObjectKey(ResourceKey(r), r.namespaced ? ns : "", name);
  auto it = objects_.find(key);
  if (it == objects_.end()) {
    return absl::NotFoundError(absl::StrCat(r.plural, " \"", name, "\" not found"));
  }
  json updated = it->second;
  try {
    if (call.patch_type == PatchType::kJsonPatch) {
      updated = updated.patch(patch);
    } else {
      // A strategic merge patch of the fields the operator patches merges as a JSON merge
      // patch does (lists are replaced whole).
      updated.merge_patch(patch);
    }
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("the patch does not apply: ", e.what()));
  }
  const std::string version = ResourceVersion(updated);
  if (!version.empty() && version != ResourceVersion(it->second)) {
    return absl::AbortedError(absl::StrCat("Operation cannot be fulfilled on ", r.plural, " \"",
                                           name, "\": the object has been modified"));
  }
  if (subresource == "status") {
    json only_status = it->second;
    only_status["status"] = updated.value("status", json::object());
    updated = std::move(only_status);
  } else if (it->second.contains("status")) {
    updated["status"] = it->second["status"];
  }
  return CommitLocked(r, key, it->second, std::move(updated));
}

absl::StatusOr<json> FakeClient::DeleteLocked(const Call& call) {
  const Resource& r = call.resource;
  const std::string& ns = call.ns;
  const std::string& name = call.name;
  const DeleteOptions& options = call.delete_options;
  const std::string key = ObjectKey(ResourceKey(r), r.namespaced ? ns : "", name);
  auto it = objects_.find(key);
  if (it == objects_.end()) {
    return absl::NotFoundError(absl::StrCat(r.plural, " \"", name, "\" not found"));
  }
  if (!options.precondition_uid.empty() && options.precondition_uid != Uid(it->second)) {
    return absl::AbortedError(
        absl::StrCat("Precondition failed: UID in precondition: ", options.precondition_uid,
                     ", UID in object meta: ", Uid(it->second)));
  }
  const json& finalizers = it->second["metadata"].value("finalizers", json::array());
  if (!finalizers.empty()) {
    if (!it->second["metadata"].contains("deletionTimestamp")) {
      it->second["metadata"]["deletionTimestamp"] = NowText();
      it->second["metadata"]["resourceVersion"] = absl::StrCat(++version_);
      RecordLocked(r, "MODIFIED", it->second);
    }
    return json::object();
  }
  json gone = it->second;
  objects_.erase(it);
  gone["metadata"]["resourceVersion"] = absl::StrCat(++version_);
  RecordLocked(r, "DELETED", gone);
  return json::object();
}

absl::Status FakeClient::Watch(const Resource& r, const std::string& ns, const ListOptions& options,
                               const std::string& resource_version, int /*timeout_seconds*/,
                               const std::function<void(const WatchEvent&)>& on_event) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = BeginLocked("watch", r, ns, ""); !s.ok()) return s;
  int64_t from = version_;
  if (!resource_version.empty() && resource_version != "0" &&
      !absl::SimpleAtoi(resource_version, &from)) {
    return absl::InvalidArgumentError(
        absl::StrCat("resourceVersion \"", resource_version, "\" is not a number"));
  }
  size_t next = 0;
  while (next < log_.size() && log_[next].version <= from) ++next;
  const int id = next_watch_++;
  watches_[id] = next;
  const std::string resource = ResourceKey(r);
  while (!shut_down_) {
    while (next < log_.size()) {
      const Change change = log_[next++];
      if (change.resource != resource ||
          (r.namespaced && !ns.empty() && Namespace(change.object) != ns)) {
        watches_[id] = next;
        continue;
      }
      auto match = MatchesSelectors(change.object, options);
      if (match.ok() && *match) {
        mu_.Unlock();
        on_event(WatchEvent{change.type, change.object});
        mu_.Lock();
      }
      watches_[id] = next;
    }
    changed_.SignalAll();  // this watch caught up
    while (!shut_down_ && next >= log_.size()) changed_.Wait(&mu_);
  }
  watches_.erase(id);
  changed_.SignalAll();
  return absl::CancelledError("the client was shut down");
}

void FakeClient::Shutdown() {
  absl::MutexLock lock(&mu_);
  shut_down_ = true;
  changed_.SignalAll();
}

}  // namespace cohort::kube
