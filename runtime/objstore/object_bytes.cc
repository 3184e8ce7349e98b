// Shared-memory files by hand (open, mmap, rename, unlink): no library in the build maps
// files, and these few system calls are all it takes.
#include "runtime/objstore/object_bytes.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cohort::runtime {

namespace {

class StringBytes final : public ObjectBytes {
 public:
  explicit StringBytes(std::string bytes) : bytes_(std::move(bytes)) {}
  absl::string_view view() const override { return bytes_; }
  const std::string& file() const override { return none_; }

 private:
  const std::string bytes_;
  const std::string none_;
};

class MappedFile final : public ObjectBytes {
 public:
  MappedFile(std::string path, std::string name, const char* data, size_t size)
      : path_(std::move(path)), name_(std::move(name)), data_(data), size_(size) {}
  ~MappedFile() override {
    if (size_ > 0) munmap(const_cast<char*>(data_), size_);
    unlink(path_.c_str());
  }
  absl::string_view view() const override { return absl::string_view(data_, size_); }
  const std::string& file() const override { return name_; }

 private:
  const std::string path_;
  const std::string name_;
  const char* const data_;
  const size_t size_;
};

absl::Status Errno(const std::string& what) {
  return absl::Status(
      errno == ENOENT ? absl::StatusCode::kNotFound : absl::StatusCode::kFailedPrecondition,
      absl::StrCat(what, ": ", std::strerror(errno)));
}

// Maps the open file `fd` (of `size` bytes) read-only, known as `path`/`name` from now on.
absl::StatusOr<std::shared_ptr<const ObjectBytes>> Map(int fd, std::string path, std::string name,
                                                       uint64_t size) {
  const char* data = nullptr;
  if (size > 0) {
    void* mapped = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (mapped == MAP_FAILED) {
      absl::Status s = Errno(absl::StrCat("mapping ", path));
      close(fd);
      unlink(path.c_str());
      return s;
    }
    data = static_cast<const char*>(mapped);
  }
  close(fd);
  return std::make_shared<const MappedFile>(std::move(path), std::move(name), data, size);
}

}  // namespace

std::shared_ptr<const ObjectBytes> InMemory(std::string bytes) {
  return std::make_shared<const StringBytes>(std::move(bytes));
}

absl::StatusOr<std::shared_ptr<const ObjectBytes>> AdoptFile(const std::string& dir,
                                                             const std::string& name, uint64_t size,
                                                             const std::string& kept_name) {
  std::string path = absl::StrCat(dir, "/", name);
  int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Errno(absl::StrCat("opening ", path));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) != size) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file of the ", size,
                                                   " bytes announced (it has ",
                                                   static_cast<int64_t>(st.st_size), ")"));
  }
  std::string kept = absl::StrCat(dir, "/", kept_name);
  if (rename(path.c_str(), kept.c_str()) != 0) {
    absl::Status s = Errno(absl::StrCat("renaming ", path));
    close(fd);
    return s;
  }
  return Map(fd, std::move(kept), kept_name, size);
}

absl::StatusOr<std::shared_ptr<const ObjectBytes>> WriteFile(const std::string& dir,
                                                             const std::string& name,
                                                             absl::string_view bytes) {
  std::string path = absl::StrCat(dir, "/", name);
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return Errno(absl::StrCat("creating ", path));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      absl::Status s = Errno(absl::StrCat("writing ", path));
      close(fd);
      unlink(path.c_str());
      return s;
    }
    done += static_cast<size_t>(n);
  }
  return Map(fd, std::move(path), name, bytes.size());
}

}  // namespace cohort::runtime
