#include "service/state/scheduler_records.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cohort/state/v1/state.pb.h"

namespace cohort {

namespace pb = ::cohort::state::v1;
namespace rt = ::cohort::runtime;

namespace {

void ToProto(const rt::Store& store, pb::SchedStore* out) {
  out->set_id(store.id);
  out->set_address(store.address);
  out->set_alive(store.alive);
}

void ToProto(const rt::Worker& worker, pb::SchedWorker* out) {
  out->set_id(worker.id);
  out->set_store(worker.store);
  out->set_address(worker.address);
  out->set_is_driver(worker.is_driver);
  out->set_state(static_cast<int32_t>(worker.state));
  out->set_current(worker.current);
  out->set_functions_sent(worker.functions_sent);
  out->set_variables_sent(worker.variables_sent);
}

void ToProto(const std::string& name, const std::optional<rt::Function>& function,
             pb::SchedFunction* out) {
  out->set_name(name);
  out->set_present(function.has_value());
  if (!function.has_value()) return;
  out->set_num_return_vals(function->num_return_vals);
  for (rt::WorkerId w : function->workers) out->add_workers(w);
}

void ToProto(const std::pair<uint64_t, std::string>& entry, pb::SchedExport* out) {
  out->set_index(entry.first);
  out->set_data(entry.second);
}

void ToProto(const rt::Operation& op, pb::SchedOperation* out) {
  out->set_id(op.id);
  out->set_function_name(op.task.function_name);
  for (const rt::TaskArg& arg : op.task.args) {
    pb::SchedTaskArg* a = out->add_args();
    a->set_id(arg.id);
    a->set_value(arg.value);
  }
  for (rt::ObjectId r : op.task.results) out->add_results(r);
  out->set_creator(op.creator);
  out->set_submitter(op.submitter);
  out->set_state(static_cast<int32_t>(op.state));
  out->set_worker(op.worker);
  out->set_retries(op.retries);
  out->set_rebuilds(op.rebuilds);
  out->set_holds_args(op.holds_args);
  out->set_error(op.error);
  out->set_put_object(op.put_object);
}

void ToProto(const std::pair<rt::ObjectId, rt::ObjectRecord>& entry, pb::SchedObject* out) {
  const rt::ObjectRecord& r = entry.second;
  out->set_id(entry.first);
  out->set_alias_of(r.alias_of);
  out->set_refs(r.refs);
  out->set_released(r.released);
  for (rt::StoreId s : r.locations) out->add_locations(s);
  out->set_size(r.size);
  out->set_failed(r.failed);
  out->set_error(r.error);
  out->set_producer(r.producer);
  out->set_put_by(r.put_by);
  for (rt::ObjectId c : r.contained) out->add_contained(c);
}

using Waiting = absl::btree_set<std::pair<rt::StoreId, rt::ObjectId>>;

void ToProto(const std::pair<rt::ObjectId, Waiting>& entry, pb::SchedWanted* out) {
  out->set_canonical(entry.first);
  for (const auto& [store, requested] : entry.second) {
    out->add_stores(store);
    out->add_requested(requested);
  }
}

void ToProto(const std::pair<std::pair<rt::StoreId, rt::ObjectId>, std::optional<rt::Delivery>>& e,
             pb::SchedDelivery* out) {
  out->set_to(e.first.first);
  out->set_canonical(e.first.second);
  out->set_present(e.second.has_value());
  if (!e.second.has_value()) return;
  out->set_from(e.second->from);
  out->set_attempt(e.second->attempt);
  for (rt::ObjectId a : e.second->aliases) out->add_aliases(a);
}

void ToProto(const rt::RememberedCall& call, pb::SchedCall* out) {
  out->set_worker(call.worker);
  out->set_call(call.call);
  pb::Status* status = out->mutable_status();
  status->set_code(static_cast<int32_t>(call.outcome.status.code()));
  status->set_message(std::string(call.outcome.status.message()));
  out->set_function_registered(call.outcome.function_registered);
  for (rt::ObjectId id : call.outcome.ids) out->add_ids(id);
}

absl::Status Damaged(const std::string& what) {
  return absl::DataLossError(absl::StrCat("a scheduler record is damaged: ", what));
}

}  // namespace

void SchedulerChangesToProto(const rt::SchedulerChanges& c, pb::SchedulerChanges* out) {
  for (const auto& s : c.stores) ToProto(s, out->add_stores());
  for (const auto& w : c.workers) ToProto(w, out->add_workers());
  for (const auto& [name, f] : c.functions) ToProto(name, f, out->add_functions());
  out->set_exports_cleared(c.exports_cleared);
  for (const auto& e : c.exported_functions) ToProto(e, out->add_exported_functions());
  for (const auto& e : c.exported_variables) ToProto(e, out->add_exported_variables());
  for (const auto& op : c.operations) ToProto(op, out->add_operations());
  for (const auto& o : c.objects) ToProto(o, out->add_objects());
  for (const auto& w : c.wanted) ToProto(w, out->add_wanted());
  for (const auto& d : c.deliveries) ToProto(d, out->add_deliveries());
  for (const auto& call : c.calls) ToProto(call, out->add_calls());
  if (c.next_port.has_value()) {
    out->set_has_next_port(true);
    out->set_next_port(*c.next_port);
  }
  if (c.counters.has_value()) {
    out->set_has_counters(true);
    for (uint64_t v : *c.counters) out->add_counters(v);
  }
  for (uint64_t id : c.forgotten_operations) out->add_forgotten_operations(id);
  for (uint64_t id : c.forgotten_objects) out->add_forgotten_objects(id);
  if (c.next_operation.has_value()) out->set_next_operation(*c.next_operation);
  if (c.next_object.has_value()) out->set_next_object(*c.next_object);
}

absl::StatusOr<rt::SchedulerChanges> SchedulerChangesFromProto(const pb::SchedulerChanges& r) {
  rt::SchedulerChanges c;
  for (const pb::SchedStore& s : r.stores()) {
    if (s.id() == 0) return Damaged("a store has id 0");
    c.stores.push_back(rt::Store{s.id(), s.address(), s.alive(), {}});
  }
  for (const pb::SchedWorker& w : r.workers()) {
    if (w.id() == 0) return Damaged("a worker has id 0");
    if (w.state() < 0 || w.state() > static_cast<int32_t>(rt::WorkerState::kDead)) {
      return Damaged(absl::StrCat("worker ", w.id(), " has state ", w.state()));
    }
    rt::Worker worker;
    worker.id = w.id();
    worker.store = w.store();
    worker.address = w.address();
    worker.is_driver = w.is_driver();
    worker.state = static_cast<rt::WorkerState>(w.state());
    worker.current = w.current();
    worker.functions_sent = w.functions_sent();
    worker.variables_sent = w.variables_sent();
    c.workers.push_back(std::move(worker));
  }
  for (const pb::SchedFunction& f : r.functions()) {
    std::optional<rt::Function> function;
    if (f.present()) {
      function.emplace();
      function->num_return_vals = f.num_return_vals();
      function->workers.insert(f.workers().begin(), f.workers().end());
    }
    c.functions.emplace_back(f.name(), std::move(function));
  }
  c.exports_cleared = r.exports_cleared();
  // An index past this many exports is damage (each export is a whole function).
  constexpr uint64_t kMaxExports = uint64_t{1} << 20;
  for (const pb::SchedExport& e : r.exported_functions()) {
    if (e.index() >= kMaxExports) return Damaged(absl::StrCat("export index ", e.index()));
    c.exported_functions.emplace_back(e.index(), e.data());
  }
  for (const pb::SchedExport& e : r.exported_variables()) {
    if (e.index() >= kMaxExports) return Damaged(absl::StrCat("export index ", e.index()));
    c.exported_variables.emplace_back(e.index(), e.data());
  }
  for (const pb::SchedOperation& o : r.operations()) {
    if (o.id() == 0) return Damaged("an operation has id 0");
    if (o.state() < 0 || o.state() > static_cast<int32_t>(rt::OpState::kFailed)) {
      return Damaged(absl::StrCat("operation ", o.id(), " has state ", o.state()));
    }
    rt::Operation op;
    op.id = o.id();
    op.task.function_name = o.function_name();
    for (const pb::SchedTaskArg& a : o.args()) op.task.args.push_back({a.id(), a.value()});
    op.task.results.assign(o.results().begin(), o.results().end());
    op.creator = o.creator();
    op.submitter = o.submitter();
    op.state = static_cast<rt::OpState>(o.state());
    op.worker = o.worker();
    op.retries = o.retries();
    op.rebuilds = o.rebuilds();
    op.holds_args = o.holds_args();
    op.error = o.error();
    op.put_object = o.put_object();
    c.operations.push_back(std::move(op));
  }
  for (const pb::SchedObject& o : r.objects()) {
    if (o.id() == 0) return Damaged("an object has id 0");
    rt::ObjectRecord record;
    record.alias_of = o.alias_of();
    record.refs = o.refs();
    record.released = o.released();
    record.locations.insert(o.locations().begin(), o.locations().end());
    record.size = o.size();
    record.failed = o.failed();
    record.error = o.error();
    record.producer = o.producer();
    record.put_by = o.put_by();
    record.contained.assign(o.contained().begin(), o.contained().end());
    c.objects.emplace_back(o.id(), std::move(record));
  }
  for (const pb::SchedWanted& w : r.wanted()) {
    if (w.stores_size() != w.requested_size()) {
      return Damaged(absl::StrCat("the stores waiting for object ", w.canonical(),
                                  " do not pair up with the ids they asked for"));
    }
    Waiting waiting;
    for (int i = 0; i < w.stores_size(); ++i) waiting.insert({w.stores(i), w.requested(i)});
    c.wanted.emplace_back(w.canonical(), std::move(waiting));
  }
  for (const pb::SchedDelivery& d : r.deliveries()) {
    std::optional<rt::Delivery> delivery;
    if (d.present()) {
      delivery.emplace();
      delivery->from = d.from();
      delivery->attempt = d.attempt();
      delivery->aliases.insert(d.aliases().begin(), d.aliases().end());
    }
    c.deliveries.emplace_back(std::make_pair(d.to(), d.canonical()), std::move(delivery));
  }
  for (const pb::SchedCall& call : r.calls()) {
    if (call.status().code() < 0 || call.status().code() > 16) {
      return Damaged(absl::StrCat("call ", call.call(), " has status code ", call.status().code()));
    }
    rt::CallOutcome outcome;
    outcome.status =
        absl::Status(static_cast<absl::StatusCode>(call.status().code()), call.status().message());
    outcome.function_registered = call.function_registered();
    outcome.ids.assign(call.ids().begin(), call.ids().end());
    c.calls.push_back({call.worker(), call.call(), std::move(outcome)});
  }
  if (r.has_next_port()) c.next_port = r.next_port();
  if (r.has_counters()) c.counters.emplace(r.counters().begin(), r.counters().end());
  for (const auto& [ids, what] : {std::pair{&r.forgotten_operations(), "operation"},
                                  std::pair{&r.forgotten_objects(), "object"}}) {
    for (uint64_t id : *ids) {
      if (id == 0) return Damaged(absl::StrCat("a forgotten ", what, " has id 0"));
    }
  }
  c.forgotten_operations.assign(r.forgotten_operations().begin(), r.forgotten_operations().end());
  c.forgotten_objects.assign(r.forgotten_objects().begin(), r.forgotten_objects().end());
  if (r.next_operation() != 0) c.next_operation = r.next_operation();
  if (r.next_object() != 0) c.next_object = r.next_object();
  return c;
}

void SplitSchedulerState(const rt::SchedulerChanges& state, size_t max_bytes,
                         const std::function<void(const pb::SchedulerChanges&)>& emit) {
  pb::SchedulerChanges record;
  size_t bytes = 0;
  auto flush = [&] {
    emit(record);
    record.Clear();
    bytes = 0;
  };
  // The first record: what a snapshot starts from.
  record.set_exports_cleared(state.exports_cleared);
  if (state.next_port.has_value()) {
    record.set_has_next_port(true);
    record.set_next_port(*state.next_port);
  }
  if (state.counters.has_value()) {
    record.set_has_counters(true);
    for (uint64_t v : *state.counters) record.add_counters(v);
  }
  if (state.next_operation.has_value()) record.set_next_operation(*state.next_operation);
  if (state.next_object.has_value()) record.set_next_object(*state.next_object);
  auto add = [&](auto* item, const auto& value) {
    ToProto(value, item);
    bytes += item->ByteSizeLong();
    if (bytes >= max_bytes) flush();
  };
  for (const auto& s : state.stores) add(record.add_stores(), s);
  for (const auto& w : state.workers) add(record.add_workers(), w);
  for (const auto& [name, f] : state.functions) {
    pb::SchedFunction* item = record.add_functions();
    ToProto(name, f, item);
    bytes += item->ByteSizeLong();
    if (bytes >= max_bytes) flush();
  }
  for (const auto& e : state.exported_functions) add(record.add_exported_functions(), e);
  for (const auto& e : state.exported_variables) add(record.add_exported_variables(), e);
  for (const auto& op : state.operations) add(record.add_operations(), op);
  for (const auto& o : state.objects) add(record.add_objects(), o);
  for (const auto& w : state.wanted) add(record.add_wanted(), w);
  for (const auto& d : state.deliveries) add(record.add_deliveries(), d);
  for (const auto& c : state.calls) add(record.add_calls(), c);
  if (record.ByteSizeLong() > 0 || bytes > 0) flush();
}

}  // namespace cohort
