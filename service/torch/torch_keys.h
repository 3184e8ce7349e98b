// PyTorch's store keys in the coordinator's key-value store. A TCPStore key is any bytes ("/x",
// "init/", "a//b"); the coordinator's keys are paths whose slashes it normalises, so each torch
// key is kept as one path segment under "torch/", escaped: bytes from '!' to '~' stay, except
// '/' and '%', and every other byte is "%XX" (hex). The empty key is "%". Escaping changes
// nothing the normalisation would, keeps keys printable for `cohortctl kv ls torch`, and makes
// a delete of the key exactly that key.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace cohort::torch {

inline constexpr absl::string_view kTorchKeyDir = "torch";
// torch's queues (queue_push, queue_pop, queue_len), a namespace apart from its keys, as in
// torch's server: queue "q" is "torch-queue/<escaped q>", its items keys under it
// (KeyValueStore::QueuePush).
inline constexpr absl::string_view kTorchQueueDir = "torch-queue";

// "torch/" and the escaped key.
std::string StoreKey(absl::string_view torch_key);
// "torch-queue/" and the escaped queue name.
std::string QueueKey(absl::string_view torch_queue);
// What an item's key adds to its queue's: "/" and a 20-digit sequence number.
inline constexpr size_t kQueueItemSuffixBytes = 21;
// The torch key a store key under "torch/" stands for; nullopt if it is not one StoreKey made.
std::optional<std::string> TorchKey(absl::string_view store_key);

}  // namespace cohort::torch
