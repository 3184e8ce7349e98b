// cohortctl's kv commands: get, put, ls, rm, watch and incr on the coordinator's store.
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "agent/cohortctl.h"
#include "agent/key_watcher.h"
#include "nlohmann/json.hpp"

namespace cohort::ctl {
namespace {

using Json = nlohmann::json;

// Set by SIGINT/SIGTERM. An atomic, not a volatile sig_atomic_t: the signal may land on any
// thread (the watch's, gRPC's), and only an atomic orders that write with the main thread's
// read (ThreadSanitizer reported the volatile flag as a race once).
std::atomic<bool> g_interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free, "a signal handler needs a lock-free flag");

void OnSignal(int) { g_interrupted.store(true, std::memory_order_relaxed); }

}  // namespace

int KvGet(Client& client, const std::string& key, const std::string& wait) {
  absl::Duration wait_for;
  if (!absl::ParseDuration(wait, &wait_for) || wait_for < absl::ZeroDuration()) {
    return Fail(
        absl::InvalidArgumentError(absl::StrCat("--wait \"", wait, "\" is not a duration")));
  }
  grpc::Status s;
  std::string out;
  if (wait_for == absl::ZeroDuration()) {
    tensorflow::TryGetKeyValueRequest request;
    request.set_key(key);
    tensorflow::TryGetKeyValueResponse response;
    s = client.tf().TryGetKeyValue(client.Context().get(), request, &response);
    out = response.kv().value();
  } else {
    tensorflow::GetKeyValueRequest request;
    request.set_key(key);
    tensorflow::GetKeyValueResponse response;
    s = client.tf().GetKeyValue(client.Context(wait_for).get(), request, &response);
    if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      return Fail(absl::NotFoundError(absl::StrCat("key \"", key, "\" was not set within ", wait)));
    }
    out = response.kv().value();
  }
  if (!s.ok()) return Check(s);
  std::fwrite(out.data(), 1, out.size(), stdout);
  if (isatty(STDOUT_FILENO)) std::fputc('\n', stdout);
  return 0;
}

int KvPut(Client& client, const std::string& key, std::string value, bool overwrite) {
  if (value == "-") {
    value.assign(std::istreambuf_iterator<char>(std::cin), {});
    // `echo 0.01 | cohortctl kv put lr -` stores 0.01, as $(...) would read it.
    if (!value.empty() && value.back() == '\n') value.pop_back();
    if (!value.empty() && value.back() == '\r') value.pop_back();
  }
  tensorflow::InsertKeyValueRequest request;
  request.mutable_kv()->set_key(key);
  request.mutable_kv()->set_value(value);
  request.set_allow_overwrite(overwrite);
  tensorflow::InsertKeyValueResponse response;
  auto s = client.tf().InsertKeyValue(client.Context().get(), request, &response);
  if (s.error_code() == grpc::StatusCode::ALREADY_EXISTS) {
    return Fail(absl::AlreadyExistsError(
        absl::StrCat("key \"", key, "\" exists; use --overwrite to replace it")));
  }
  return Check(s);
}

int KvList(Client& client, const std::string& directory) {
  tensorflow::GetKeyValueDirRequest request;
  request.set_directory_key(directory);
  tensorflow::GetKeyValueDirResponse response;
  auto s = client.tf().GetKeyValueDir(client.Context().get(), request, &response);
  if (!s.ok()) return Check(s);
  if (client.json()) {
    Json out = Json::object();
    for (const auto& kv : response.kv()) out[kv.key()] = kv.value();
    std::cout << out.dump(2) << "\n";
  } else {
    for (const auto& kv : response.kv()) {
      std::cout << kv.key() << "\t" << OneLine(kv.value()) << "\n";
    }
  }
  return 0;
}

int KvRemove(Client& client, const std::string& key, bool prefix) {
  if (!prefix) {
    // The coordinator's delete takes the whole subtree; refuse rather than surprise.
    tensorflow::GetKeyValueDirRequest dir;
    dir.set_directory_key(key);
    tensorflow::GetKeyValueDirResponse under;
    auto s = client.tf().GetKeyValueDir(client.Context().get(), dir, &under);
    if (!s.ok()) return Check(s);
    if (under.kv_size() > 0) {
      return Fail(absl::FailedPreconditionError(absl::StrCat(
          under.kv_size(), " keys are under \"", key, "/\"; use --prefix to remove them with it")));
    }
    tensorflow::TryGetKeyValueRequest probe;
    probe.set_key(key);
    tensorflow::TryGetKeyValueResponse found;
    s = client.tf().TryGetKeyValue(client.Context().get(), probe, &found);
    if (!s.ok()) return Check(s);
  }
  tensorflow::DeleteKeyValueRequest request;
  request.set_key(key);
  request.set_is_directory(prefix);
  tensorflow::DeleteKeyValueResponse response;
  return Check(client.tf().DeleteKeyValue(client.Context().get(), request, &response));
}

int KvWatch(Client& client, const std::string& key, int64_t revision) {
  absl::Notification done;
  absl::Status end;
  bool json = client.json();
  KeyWatcher::Options options;
  options.start_revision = revision;
  auto watcher = KeyWatcher::Start(
      client.channel(), key,
      [&](absl::StatusOr<KeyChange> change) {
        if (!change.ok()) {
          end = change.status();
          done.Notify();
          return;
        }
        if (json) {
          Json line = {{"type", KeyChangeTypeName(change->type)},
                       {"key", change->key},
                       {"revision", change->revision}};
          if (change->type != KeyChange::Type::kDeleted) line["value"] = change->value;
          std::cout << line.dump() << std::endl;
        } else {
          std::cout << KeyChangeTypeName(change->type) << " " << change->key;
          if (change->type != KeyChange::Type::kDeleted) {
            std::cout << " " << OneLine(change->value);
          }
          std::cout << std::endl;
        }
      },
      options);
  if (!watcher.ok()) return Fail(watcher.status());
  // Before the line that says Ctrl-C stops it: a Ctrl-C right after that line is a stop too,
  // not a kill (a test sends SIGINT as soon as it reads the line).
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  if (revision > 0) {
    std::fprintf(stderr, "watching \"%s\" from revision %lld (now %lld; Ctrl-C to stop)\n",
                 key.c_str(), static_cast<long long>(revision),
                 static_cast<long long>((*watcher)->created_revision()));
  } else {
    std::fprintf(stderr, "watching \"%s\" after revision %lld (Ctrl-C to stop)\n", key.c_str(),
                 static_cast<long long>((*watcher)->created_revision()));
  }
  while (!done.HasBeenNotified() && !g_interrupted.load(std::memory_order_relaxed)) {
    done.WaitForNotificationWithTimeout(absl::Milliseconds(100));
  }
  (*watcher)->Stop();
  return done.HasBeenNotified() ? Fail(end) : 0;
}

int KvIncrement(Client& client, const std::string& key, int64_t delta) {
  tensorflow::IncrementKeyValueRequest request;
  request.set_key(key);
  request.set_increment(delta);
  tensorflow::IncrementKeyValueResponse response;
  auto s = client.tf().IncrementKeyValue(client.Context().get(), request, &response);
  if (!s.ok()) return Check(s);
  std::cout << response.kv().value() << "\n";
  return 0;
}

}  // namespace cohort::ctl
