#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cohort::runtime {

// An object's bytes: in memory, or a file in shared memory (/dev/shm) mapped read-only, which
// the workers and drivers of the node map too instead of copying the bytes over gRPC.
class ObjectBytes {
 public:
  virtual ~ObjectBytes() = default;
  virtual absl::string_view view() const = 0;
  // The file's name in the store's shared-memory directory; empty for bytes in memory.
  virtual const std::string& file() const = 0;
  uint64_t size() const { return view().size(); }
};

std::shared_ptr<const ObjectBytes> InMemory(std::string bytes);

// Takes over `dir`/`name` (a regular file, not a link, of exactly `size` bytes), renames it
// `dir`/`kept_name` and maps it; the file is removed when the last reference goes.
absl::StatusOr<std::shared_ptr<const ObjectBytes>> AdoptFile(const std::string& dir,
                                                             const std::string& name, uint64_t size,
                                                             const std::string& kept_name);

// Writes `bytes` to the new file `dir`/`name` and maps it, as AdoptFile.
absl::StatusOr<std::shared_ptr<const ObjectBytes>> WriteFile(const std::string& dir,
                                                             const std::string& name,
                                                             absl::string_view bytes);

}  // namespace cohort::runtime
