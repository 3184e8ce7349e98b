#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/runtime/v1/local_store.grpc.pb.h"
#include "cohort/runtime/v1/services.grpc.pb.h"
#include "common/grpc_auth.h"
#include "grpcpp/grpcpp.h"
#include "runtime/objstore/object_store.h"

namespace cohort::runtime {

struct ObjectStoreOptions {
  std::string listen = "0.0.0.0:0";
  // The address the scheduler, the other stores and this node's workers reach this store at
  // (empty: the listen address, with the port actually bound).
  std::string advertise;
  std::string scheduler;
  uint64_t capacity_bytes = uint64_t{2} << 30;
  uint64_t chunk_bytes = uint64_t{1} << 20;
  // Where objects live as files that this machine's clients map instead of copying them
  // (a directory of the store's own is made inside); empty: in the store's memory only.
  std::string shm_dir = "/dev/shm";
  std::string auth_token;  // carried on every call, and required of every call when set
  // How long a report to the scheduler (ObjReady) keeps trying while the coordinator cannot be
  // reached, before the object is refused.
  absl::Duration reconnect = absl::Minutes(2);
  // Serving beyond loopback without a token is refused unless this says so (--insecure-no-auth).
  bool insecure_no_auth = false;
  // Before the flags' names in messages: "objstore-" in cohort-sidecar, "" in cohort-objstore.
  std::string flag_prefix;
  // The largest message a caller may send (and this store read from another): a chunk of an
  // object, an inline object or an error's text is at most 1 MiB, so this leaves room.
  int max_message_bytes = 16 << 20;
};

// cohort-objstore: serves ObjStore (the protocol's, to the scheduler and the other stores)
// and LocalStore (cohort's, to this node's workers and drivers) over one ObjectStore, and
// tells the scheduler about every object that arrives.
class ObjectStoreServer final : public ::ObjStore::Service,
                                public cohort::runtime::v1::LocalStore::Service {
 public:
  explicit ObjectStoreServer(ObjectStoreOptions options);
  ~ObjectStoreServer() override;

  // Listens, then registers with the scheduler.
  absl::Status Start();
  void Shutdown();
  // Blocks until Shutdown.
  void Wait();

  StoreId id() const { return id_; }
  const std::string& address() const { return address_; }
  ObjectStore& store() { return store_; }

  grpc::Status StartDelivery(grpc::ServerContext* ctx, const v1::StartDeliveryRequest* request,
                             v1::AckReply* reply) override;
  grpc::Status StreamObjTo(grpc::ServerContext* ctx, const v1::StreamObjToRequest* request,
                           grpc::ServerWriter<v1::ObjChunk>* writer) override;
  grpc::Status NotifyAlias(grpc::ServerContext* ctx, const v1::NotifyAliasRequest* request,
                           v1::AckReply* reply) override;
  grpc::Status DeallocateObject(grpc::ServerContext* ctx,
                                const v1::DeallocateObjectRequest* request,
                                v1::AckReply* reply) override;
  grpc::Status ObjStoreInfo(grpc::ServerContext* ctx, const v1::ObjStoreInfoRequest* request,
                            v1::ObjStoreInfoReply* reply) override;
  grpc::Status PutError(grpc::ServerContext* ctx, const v1::PutErrorRequest* request,
                        v1::AckReply* reply) override;
  grpc::Status Put(grpc::ServerContext* ctx, grpc::ServerReader<v1::PutChunk>* reader,
                   v1::AckReply* reply) override;
  grpc::Status PutInline(grpc::ServerContext* ctx, const v1::PutChunk* request,
                         v1::AckReply* reply) override;
  grpc::Status Get(grpc::ServerContext* ctx, const v1::GetRequest* request,
                   grpc::ServerWriter<v1::ObjChunk>* writer) override;
  grpc::Status Wait(grpc::ServerContext* ctx, const v1::WaitRequest* request,
                    v1::WaitReply* reply) override;
  grpc::Status Describe(grpc::ServerContext* ctx, const v1::DescribeRequest* request,
                        v1::DescribeReply* reply) override;
  grpc::Status PutShared(grpc::ServerContext* ctx, const v1::PutSharedRequest* request,
                         v1::AckReply* reply) override;
  grpc::Status GetShared(grpc::ServerContext* ctx, const v1::GetRequest* request,
                         v1::SharedObject* reply) override;

 private:
  // Stores the object, then tells the scheduler; undone when the scheduler refuses it.
  absl::Status Keep(ObjectId id, std::shared_ptr<const ObjectBytes> data, uint64_t metadata_offset,
                    uint64_t reserved);
  // The bytes of an object that arrived: a file in the shared-memory directory when there is
  // one, else memory.
  absl::StatusOr<std::shared_ptr<const ObjectBytes>> Hold(ObjectId id, std::string data);
  // Waits for the object as Get does.
  absl::StatusOr<StoredObject> Await(grpc::ServerContext* ctx, ObjectId id, uint64_t timeout_ms);
  absl::Status Refused(const grpc::ServerContext& ctx) const;
  std::shared_ptr<grpc::Channel> ChannelTo(const std::string& address);
  grpc::Status Stream(const StoredObject& object, grpc::ServerWriter<v1::ObjChunk>* writer) const;

  const ObjectStoreOptions options_;
  ObjectStore store_;
  std::unique_ptr<CallAuth> auth_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<::Scheduler::Stub> scheduler_;
  StoreId id_ = 0;
  std::string address_;
  std::string shm_dir_;  // the store's own directory inside options_.shm_dir; empty: none
  std::string boot_id_;
  std::atomic<uint64_t> files_{0};
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<grpc::Channel>> peers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort::runtime
