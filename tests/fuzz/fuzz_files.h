#pragma once
// Files for fuzz targets whose parser reads a path: a scratch directory of the process, and
// the input written into it.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace cohort::fuzz {

// A directory of this process under /tmp, made on first use and removed at exit.
inline const std::string& ScratchDir() {
  static const std::string* dir = [] {
    char pattern[] = "/tmp/cohort-fuzz-XXXXXX";
    if (!mkdtemp(pattern)) std::abort();
    auto* made = new std::string(pattern);
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(ScratchDir(), ignored);
    });
    return made;
  }();
  return *dir;
}

// Writes `size` bytes to `path`, replacing it; aborts (a harness fault) when it cannot.
inline void WriteFile(const std::string& path, const uint8_t* data, size_t size) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) std::abort();
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n <= 0) std::abort();
    data += n;
    size -= static_cast<size_t>(n);
  }
  ::close(fd);
}

}  // namespace cohort::fuzz
