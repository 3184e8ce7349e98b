// PyTorch's store keys in the coordinator's key-value store. A TCPStore key is any bytes ("/x",
// "init/", "a//b"); the coordinator's keys are paths whose slashes it normalises, so each torch
// key is kept as one path segment under "torch/", escaped: bytes from '!' to '~' stay, except
// '/' and '%', and every other byte is "%XX" (hex). The empty key is "%". Escaping changes
// nothing the normalisation would, keeps keys printable for `cohortctl kv ls torch`, and makes
// a delete of the key exactly that key.
#pragma once

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace cohort::torch {

inline constexpr absl::string_view kTorchKeyDir = "torch";

// "torch/" and the escaped key.
std::string StoreKey(absl::string_view torch_key);
// The torch key a store key under "torch/" stands for; nullopt if it is not one StoreKey made.
std::optional<std::string> TorchKey(absl::string_view store_key);

}  // namespace cohort::torch
