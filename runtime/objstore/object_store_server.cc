#include "runtime/objstore/object_store_server.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "runtime/rpc/task_messages.h"
#include "spdlog/spdlog.h"

namespace cohort::runtime {

namespace {

// Channels to the scheduler and to other stores: what comes back is bounded like what comes in.
grpc::ChannelArguments Bounded(int max_message_bytes) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(max_message_bytes);
  args.SetMaxSendMessageSize(-1);
  return args;
}

// Directories of stores that died without cleaning up (SIGKILL, a crash): shared memory is
// held until they are removed. A store's directory names its process in "pid".
void RemoveStaleDirectories(const std::string& shm_dir) {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(shm_dir, error)) {
    std::string name = entry.path().filename().string();
    if (name.rfind("cohort-store-", 0) != 0) continue;
    std::ifstream in(entry.path() / "pid");
    pid_t pid = 0;
    if (!(in >> pid) || pid <= 0) continue;  // being made right now, or not ours
    std::ifstream comm(absl::StrCat("/proc/", pid, "/comm"));
    std::string command;
    std::getline(comm, command);
    if (kill(pid, 0) == 0 && command.rfind("cohort-objstore", 0) == 0) continue;
    if (kill(pid, 0) != 0 && errno == EPERM) continue;  // someone else's, alive
    spdlog::info("removing {}: its object store (pid {}) is gone", entry.path().string(), pid);
    std::filesystem::remove_all(entry.path(), error);
  }
}

}  // namespace

ObjectStoreServer::ObjectStoreServer(ObjectStoreOptions options)
    : options_(std::move(options)),
      store_(options_.capacity_bytes),
      auth_(options_.auth_token.empty() ? nullptr
                                        : std::make_unique<CallAuth>(options_.auth_token)) {}

ObjectStoreServer::~ObjectStoreServer() {
  Shutdown();
  if (server_) server_->Wait();
  // The objects' files go with the objects; then the directory, and whatever a client left
  // there without handing it over.
  store_.Clear();
  if (!shm_dir_.empty()) std::filesystem::remove_all(shm_dir_);
}

absl::Status ObjectStoreServer::Start() {
  if (options_.scheduler.empty()) {
    return absl::InvalidArgumentError("--scheduler is required: the coordinator's gRPC address");
  }
  if (options_.auth_token.empty() && !options_.insecure_no_auth &&
      !IsLoopbackListenAddress(options_.listen)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--", options_.flag_prefix, "listen ", options_.listen,
        " reaches beyond this machine and no --auth-token-file is given: anyone who reaches "
        "the port could read, replace and delete the job's objects. Give the job's token, "
        "listen on loopback (127.0.0.1), or pass --",
        options_.flag_prefix, "insecure-no-auth to serve everyone"));
  }
  grpc::ServerBuilder builder;
  int port = 0;
  // With the token, a call without it is refused before its message is read.
  builder.AddListeningPort(options_.listen, PlainServerCredentials(options_.auth_token), &port);
  builder.RegisterService(static_cast<::ObjStore::Service*>(this));
  builder.RegisterService(static_cast<v1::LocalStore::Service*>(this));
  builder.SetMaxReceiveMessageSize(options_.max_message_bytes);
  // As the coordinator's (coordinator_server.cc): no window grown ahead of a read.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  builder.SetMaxSendMessageSize(-1);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve gRPC on ", options_.listen,
                                               ": the address is invalid or already in use"));
  }
  address_ = options_.advertise;
  if (address_.empty()) {
    address_ = options_.listen.substr(0, options_.listen.rfind(':'));
    if (address_ == "0.0.0.0" || address_ == "[::]") address_ = "127.0.0.1";
    address_ = absl::StrCat(address_, ":", port);
  }
  if (!options_.shm_dir.empty()) {
    RemoveStaleDirectories(options_.shm_dir);
    std::string pattern = options_.shm_dir + "/cohort-store-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot make a directory in --shm-dir ", options_.shm_dir, ": ", std::strerror(errno),
          " (an empty --shm-dir keeps objects in the store's memory)"));
    }
    shm_dir_ = pattern;
    std::ofstream(shm_dir_ + "/pid") << getpid() << "\n";
    std::ifstream boot("/proc/sys/kernel/random/boot_id");
    std::getline(boot, boot_id_);
  }
  scheduler_ = ::Scheduler::NewStub(
      CreateChannelWithToken(options_.scheduler, grpc::InsecureChannelCredentials(),
                             Bounded(options_.max_message_bytes), options_.auth_token));
  v1::RegisterObjStoreRequest request;
  request.set_objstore_address(address_);
  v1::RegisterObjStoreReply reply;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  ctx.set_wait_for_ready(true);
  grpc::Status s = scheduler_->RegisterObjStore(&ctx, request, &reply);
  if (!s.ok()) {
    return absl::Status(FromGrpc(s).code(),
                        absl::StrCat("registering with the scheduler at ", options_.scheduler, ": ",
                                     s.error_message()));
  }
  id_ = reply.objstoreid();
  spdlog::info("object store {} serving on {} (capacity {} bytes), registered with {}", id_,
               address_, options_.capacity_bytes, options_.scheduler);
  return absl::OkStatus();
}

void ObjectStoreServer::Shutdown() {
  store_.Close();
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

void ObjectStoreServer::Wait() {
  if (server_) server_->Wait();
}

absl::Status ObjectStoreServer::Refused(const grpc::ServerContext& ctx) const {
  return auth_ ? auth_->Check(ctx) : absl::OkStatus();
}

std::shared_ptr<grpc::Channel> ObjectStoreServer::ChannelTo(const std::string& address) {
  absl::MutexLock lock(&mu_);
  // Pulls come from the cluster's few stores; a bound keeps a stream of made-up addresses
  // from holding a channel each.
  if (peers_.size() >= 256 && !peers_.contains(address)) peers_.erase(peers_.begin());
  std::shared_ptr<grpc::Channel>& channel = peers_[address];
  if (channel == nullptr) {
    channel = CreateChannelWithToken(address, grpc::InsecureChannelCredentials(),
                                     Bounded(options_.max_message_bytes), options_.auth_token);
  }
  return channel;
}

absl::StatusOr<std::shared_ptr<const ObjectBytes>> ObjectStoreServer::Hold(ObjectId id,
                                                                           std::string data) {
  if (shm_dir_.empty()) return InMemory(std::move(data));
  return WriteFile(shm_dir_, absl::StrCat("obj-", id, "-", files_++), data);
}

absl::Status ObjectStoreServer::Keep(ObjectId id, std::shared_ptr<const ObjectBytes> data,
                                     uint64_t metadata_offset, uint64_t reserved) {
  uint64_t size = data->size();
  bool had = store_.Contains(id);
  store_.Commit(id, StoredObject{std::move(data), metadata_offset}, reserved);
  v1::ObjReadyRequest request;
  request.set_objectid(id);
  request.set_objstoreid(id_);
  request.set_size(size);
  v1::AckReply reply;
  grpc::Status s;
  // Sent again while the coordinator cannot be reached (restarting from its --state-dir, say):
  // ObjReady takes effect once however often it is sent.
  const absl::Time give_up = absl::Now() + options_.reconnect;
  absl::Duration pause = absl::Milliseconds(100);
  while (true) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    ctx.set_wait_for_ready(true);
    s = scheduler_->ObjReady(&ctx, request, &reply);
    bool again = s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                 s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    if (!again || absl::Now() + pause > give_up) break;
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Seconds(1));
  }
  if (!s.ok()) {
    if (!had) store_.Deallocate(id);
    return absl::Status(FromGrpc(s).code(),
                        absl::StrCat("the scheduler refused object ", id, ": ", s.error_message()));
  }
  return absl::OkStatus();
}

grpc::Status ObjectStoreServer::StartDelivery(grpc::ServerContext* ctx,
                                              const v1::StartDeliveryRequest* request,
                                              v1::AckReply* /*reply*/) {
  if (absl::Status s = Refused(*ctx); !s.ok()) return ToGrpc(s);
  ObjectId id = request->objectid();
  if (request->objstore_address().empty()) {
    return ToGrpc(absl::InvalidArgumentError("StartDelivery names no store to pull from"));
  }
  if (store_.Contains(id)) {
    // Already here (a delivery sent twice): tell the scheduler again.
    absl::StatusOr<StoredObject> have = store_.Get(id);
    if (!have.ok()) return ToGrpc(have.status());
    return ToGrpc(Keep(id, have->data, have->metadata_offset, 0));
  }
  auto source = ::ObjStore::NewStub(ChannelTo(request->objstore_address()));
  grpc::ClientContext pull;
  pull.set_deadline(ctx->deadline());
  v1::StreamObjToRequest ask;
  ask.set_objectid(id);
  std::unique_ptr<grpc::ClientReader<v1::ObjChunk>> reader = source->StreamObjTo(&pull, ask);
  v1::ObjChunk chunk;
  std::string data;
  uint64_t reserved = 0;
  uint64_t metadata_offset = 0;
  bool first = true;
  while (reader->Read(&chunk)) {
    if (first) {
      first = false;
      if (absl::Status s = store_.Reserve(id, chunk.total_size()); !s.ok()) {
        pull.TryCancel();
        reader->Finish();
        return ToGrpc(s);
      }
      reserved = chunk.total_size();
      metadata_offset = chunk.metadata_offset();
      data.reserve(reserved);
    }
    if (data.size() + chunk.data().size() > reserved) {
      store_.Unreserve(reserved);
      pull.TryCancel();
      reader->Finish();
      return ToGrpc(
          absl::DataLossError(absl::StrCat("object ", id, " from ", request->objstore_address(),
                                           " is longer than its ", reserved, " bytes")));
    }
    data += chunk.data();
  }
  grpc::Status s = reader->Finish();
  if (!s.ok() || first || data.size() != reserved) {
    if (!first) store_.Unreserve(reserved);
    // ABORTED, not the source's code: this store is fine, the copy is not.
    return grpc::Status(
        grpc::StatusCode::ABORTED,
        absl::StrCat("pulling object ", id, " from ", request->objstore_address(), ": ",
                     !s.ok() ? s.error_message()
                             : absl::StrCat("got ", data.size(), " of ", reserved, " bytes")));
  }
  absl::StatusOr<std::shared_ptr<const ObjectBytes>> held = Hold(id, std::move(data));
  if (!held.ok()) {
    store_.Unreserve(reserved);
    return ToGrpc(held.status());
  }
  return ToGrpc(Keep(id, *std::move(held), metadata_offset, reserved));
}

grpc::Status ObjectStoreServer::Stream(const StoredObject& object,
                                       grpc::ServerWriter<v1::ObjChunk>* writer) const {
  absl::string_view data = object.data->view();
  uint64_t offset = 0;
  do {
    v1::ObjChunk chunk;
    chunk.set_total_size(data.size());
    chunk.set_metadata_offset(object.metadata_offset);
    uint64_t n = std::min<uint64_t>(options_.chunk_bytes, data.size() - offset);
    chunk.set_data(std::string(data.substr(offset, n)));
    offset += n;
    if (!writer->Write(chunk)) return grpc::Status(grpc::StatusCode::CANCELLED, "reader gone");
  } while (offset < data.size());
  return grpc::Status::OK;
}

grpc::Status ObjectStoreServer::StreamObjTo(grpc::ServerContext* ctx,
                                            const v1::StreamObjToRequest* request,
                                            grpc::ServerWriter<v1::ObjChunk>* writer) {
  if (absl::Status s = Refused(*ctx); !s.ok()) return ToGrpc(s);
  absl::StatusOr<StoredObject> object = store_.Get(request->objectid());
  if (!object.ok()) return ToGrpc(object.status());
  return Stream(*object, writer);
}

grpc::Status ObjectStoreServer::NotifyAlias(grpc::ServerContext* ctx,
                                            const v1::NotifyAliasRequest* request,
                                            v1::AckReply* /*reply*/) {
  if (absl::Status s = Refused(*ctx); !s.ok()) return ToGrpc(s);
  store_.Alias(request->alias_objectid(), request->canonical_objectid());
  return grpc::Status::OK;
}

grpc::Status ObjectStoreServer::DeallocateObject(grpc::ServerContext* ctx,
                                                 const v1::DeallocateObjectRequest* request,
                                                 v1::AckReply* /*reply*/) {
  if (absl::Status s = Refused(*ctx); !s.ok()) return ToGrpc(s);
  store_.Deallocate(request->canonical_objectid());
  return grpc::Status::OK;
}

grpc::Status ObjectStoreServer::ObjStoreInfo(grpc::ServerContext* ctx,
                                             const v1::ObjStoreInfoRequest* request,
                                             v1::ObjStoreInfoReply* reply) {
  if (absl::Status s = Refused(*ctx); !s.ok()) return ToGrpc(s);
  for (ObjectId id : store_.Ids()) reply->add_objectid(id);
  for (ObjectId id : request->objectid()) {
    absl::StatusOr<StoredObject> object = store_.Get(id);
    if (!object.ok()) return ToGrpc(object.status());
    absl::string_view bytes = object->data->view();
    if (object->metadata_offset != 0 ||
        !reply->add_obj()->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      return ToGrpc(
          absl::FailedPreconditionError(absl::StrCat("object ", id, " is not a serialized Obj")));
    }
  }
  return grpc::Status::OK;
}

grpc::Status ObjectStoreServer::PutError(grpc::ServerContext* ctx,
                                         const v1::PutErrorRequest* request,
                                         v1::AckReply* /*reply*/) {
  if (absl::Status s = Refused(*ctx); !s.ok()) return ToGrpc(s);
  v1::Obj obj;
  *obj.mutable_error_data() = request->error();
  std::string data = obj.SerializeAsString();
  uint64_t size = data.size();
  if (absl::Status s = store_.Reserve(request->objectid(), size); !s.ok()) return ToGrpc(s);
  return ToGrpc(Keep(request->objectid(), InMemory(std::move(data)), 0, size));
}

grpc::Status ObjectStoreServer::Put(grpc::ServerContext* ctx,
                                    grpc::ServerReader<v1::PutChunk>* reader,
                                    v1::AckReply* /*reply*/) {
  if (absl::Status s = Refused(*ctx); !s.ok()) return ToGrpc(s);
  v1::PutChunk chunk;
  if (!reader->Read(&chunk)) {
    return ToGrpc(absl::InvalidArgumentError("a put needs at least one chunk"));
  }
  ObjectId id = chunk.objectid();
  uint64_t total = chunk.total_size();
  uint64_t chunk_metadata_offset = chunk.metadata_offset();
  if (chunk_metadata_offset > total) {
    return ToGrpc(absl::InvalidArgumentError(absl::StrCat("object ", id, "'s metadata offset ",
                                                          chunk_metadata_offset, " is past its ",
                                                          total, " bytes")));
  }
  if (id == 0) return ToGrpc(absl::InvalidArgumentError("a put names no object id"));
  if (absl::Status s = store_.Reserve(id, total); !s.ok()) return ToGrpc(s);
  std::string data;
  data.reserve(total);
  do {
    if (chunk.objectid() != 0 && chunk.objectid() != id) {
      store_.Unreserve(total);
      return ToGrpc(absl::InvalidArgumentError(
          absl::StrCat("a put of object ", id, " carries a chunk of object ", chunk.objectid())));
    }
    if (data.size() + chunk.data().size() > total) {
      store_.Unreserve(total);
      return ToGrpc(absl::InvalidArgumentError(
          absl::StrCat("object ", id, " is longer than the ", total, " bytes it announced")));
    }
    data += chunk.data();
  } while (reader->Read(&chunk));
  if (data.size() != total) {
    store_.Unreserve(total);
    return ToGrpc(absl::InvalidArgumentError(
        absl::StrCat("object ", id, " announced ", total, " bytes and sent ", data.size())));
  }
  absl::StatusOr<std::shared_ptr<const ObjectBytes>> held = Hold(id, std::move(data));
  if (!held.ok()) {
    store_.Unreserve(total);
    return ToGrpc(held.status());
  }
  return ToGrpc(Keep(id, *std::move(held), chunk_metadata_offset, total));
}

grpc::Status ObjectStoreServer::PutInline(grpc::ServerContext* ctx, const v1::PutChunk* request,
                                          v1::AckReply* /*reply*/) {
  if (absl::Status s = Refused(*ctx); !s.ok()) return ToGrpc(s);
  ObjectId id = request->objectid();
  uint64_t size = request->data().size();
  if (id == 0) return ToGrpc(absl::InvalidArgumentError("a put names no object id"));
  if (request->total_size() != size || request->metadata_offset() > size) {
    return ToGrpc(absl::InvalidArgumentError(
        absl::StrCat("an inline put of object ", id, " holds ", size, " bytes; it announced ",
                     request->total_size(), " with metadata at ", request->metadata_offset())));
  }
  if (absl::Status s = store_.Reserve(id, size); !s.ok()) return ToGrpc(s);
  absl::StatusOr<std::shared_ptr<const ObjectBytes>> held = Hold(id, request->data());
  if (!held.ok()) {
    store_.Unreserve(size);
    return ToGrpc(held.status());
  }
  return ToGrpc(Keep(id, *std::move(held), request->metadata_offset(), size));
}

grpc::Status ObjectStoreServer::Get(grpc::ServerContext* ctx, const v1::GetRequest* request,
                                    grpc::ServerWriter<v1::ObjChunk>* writer) {
  if (absl::Status s = Refused(*ctx); !s.ok()) return ToGrpc(s);
  absl::StatusOr<StoredObject> object = Await(ctx, request->objectid(), request->timeout_ms());
  if (!object.ok()) return ToGrpc(object.status());
  return Stream(*object, writer);
}

absl::StatusOr<StoredObject> ObjectStoreServer::Await(grpc::ServerContext* ctx, ObjectId id,
                                                      uint64_t timeout_ms) {
  absl::Time deadline = absl::FromChrono(ctx->deadline());
  if (timeout_ms > 0) deadline = std::min(deadline, absl::Now() + absl::Milliseconds(timeout_ms));
  // In slices, so a client that went away frees this thread.
  while (true) {
    absl::Time slice = std::min(deadline, absl::Now() + absl::Milliseconds(200));
    absl::StatusOr<StoredObject> object = store_.WaitFor(id, slice);
    if (object.ok()) return object;
    if (object.status().code() != absl::StatusCode::kDeadlineExceeded || slice == deadline) {
      return object.status();
    }
    if (ctx->IsCancelled()) return absl::CancelledError("the client went away");
  }
}

grpc::Status ObjectStoreServer::Describe(grpc::ServerContext* ctx,
                                         const v1::DescribeRequest* /*request*/,
                                         v1::DescribeReply* reply) {
  if (absl::Status s = Refused(*ctx); !s.ok()) return ToGrpc(s);
  reply->set_shm_dir(shm_dir_);
  reply->set_boot_id(boot_id_);
  reply->set_objstoreid(id_);
  return grpc::Status::OK;
}

grpc::Status ObjectStoreServer::PutShared(grpc::ServerContext* ctx,
                                          const v1::PutSharedRequest* request,
                                          v1::AckReply* /*reply*/) {
  if (absl::Status s = Refused(*ctx); !s.ok()) return ToGrpc(s);
  const std::string& name = request->name();
  if (shm_dir_.empty()) {
    return ToGrpc(absl::FailedPreconditionError(
        "this store keeps no objects in shared memory (--shm-dir is empty): use Put"));
  }
  if (name.rfind("put-", 0) != 0 || name.find('/') != std::string::npos || name.size() > 200) {
    return ToGrpc(absl::InvalidArgumentError(absl::StrCat(
        "a shared put names a file \"put-...\" in ", shm_dir_, ", not \"", name, "\"")));
  }
  if (request->objectid() == 0) {
    return ToGrpc(absl::InvalidArgumentError("a put names no object id"));
  }
  if (request->metadata_offset() > request->size()) {
    return ToGrpc(absl::InvalidArgumentError(
        absl::StrCat("object ", request->objectid(), "'s metadata offset ",
                     request->metadata_offset(), " is past its ", request->size(), " bytes")));
  }
  if (absl::Status s = store_.Reserve(request->objectid(), request->size()); !s.ok()) {
    return ToGrpc(s);
  }
  absl::StatusOr<std::shared_ptr<const ObjectBytes>> bytes = AdoptFile(
      shm_dir_, name, request->size(), absl::StrCat("obj-", request->objectid(), "-", files_++));
  if (!bytes.ok()) {
    store_.Unreserve(request->size());
    return ToGrpc(bytes.status());
  }
  return ToGrpc(
      Keep(request->objectid(), *std::move(bytes), request->metadata_offset(), request->size()));
}

grpc::Status ObjectStoreServer::GetShared(grpc::ServerContext* ctx, const v1::GetRequest* request,
                                          v1::SharedObject* reply) {
  if (absl::Status s = Refused(*ctx); !s.ok()) return ToGrpc(s);
  absl::StatusOr<StoredObject> object = Await(ctx, request->objectid(), request->timeout_ms());
  if (!object.ok()) return ToGrpc(object.status());
  if (object->data->file().empty()) {
    return ToGrpc(absl::FailedPreconditionError(
        absl::StrCat("object ", request->objectid(), " is in memory, not shared memory: use Get")));
  }
  reply->set_name(object->data->file());
  reply->set_size(object->data->size());
  reply->set_metadata_offset(object->metadata_offset);
  return grpc::Status::OK;
}

grpc::Status ObjectStoreServer::Wait(grpc::ServerContext* ctx, const v1::WaitRequest* request,
                                     v1::WaitReply* reply) {
  if (absl::Status s = Refused(*ctx); !s.ok()) return ToGrpc(s);
  std::vector<ObjectId> ids(request->objectid().begin(), request->objectid().end());
  size_t count = std::min<size_t>(request->num_ready(), ids.size());
  absl::Time deadline = absl::FromChrono(ctx->deadline());
  if (request->timeout_ms() > 0) {
    deadline = std::min(deadline, absl::Now() + absl::Milliseconds(request->timeout_ms()));
  }
  std::vector<ObjectId> ready;
  // In slices, so a client that went away frees this thread.
  do {
    absl::Time slice = std::min(deadline, absl::Now() + absl::Milliseconds(200));
    ready = store_.WaitForAny(ids, count, slice);
  } while (ready.size() < count && absl::Now() < deadline && !ctx->IsCancelled());
  for (ObjectId id : ready) reply->add_ready(id);
  return grpc::Status::OK;
}

}  // namespace cohort::runtime
