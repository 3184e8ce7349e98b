#include "agent/progress.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace cohort {
namespace {

constexpr char kProgressFileVariable[] = "COHORT_PROGRESS_FILE";

// All of `content` to `fd`; false on an error.
bool WriteAllTo(int fd, const std::string& content) {
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// A file beside `path`, then renamed over it: the sidecar never reads half a report, and
// each report is a new file (a new inode), a change it cannot miss. Unique per call, for
// the several processes of one pod that may report to the same file.
bool ReplaceFile(const std::string& path, const std::string& content) {
  std::string temp = absl::StrCat(path, ".XXXXXX");
  const int fd = mkstemp(temp.data());
  if (fd < 0) return false;
  // mkstemp makes it 0600; the sidecar may run as another user.
  bool written = fchmod(fd, 0644) == 0 && WriteAllTo(fd, content);
  written = close(fd) == 0 && written;
  if (written && rename(temp.c_str(), path.c_str()) == 0) return true;
  unlink(temp.c_str());
  return false;
}

// The file rewritten in place, for a directory the workload may not create files in.
bool RewriteFile(const std::string& path, const std::string& content) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const bool written = WriteAllTo(fd, content);
  return close(fd) == 0 && written;
}

}  // namespace

bool ReportProgress(const std::string& path, std::optional<int64_t> step) {
  // "." is no step to ParseProgressStep, and still a write.
  const std::string content = step ? absl::StrCat(*step, "\n") : ".\n";
  if (ReplaceFile(path, content) || RewriteFile(path, content)) return true;
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true)) {
    spdlog::warn("cannot report progress to {}: {} (further failures are not logged)", path,
                 std::strerror(errno));
  }
  return false;
}

bool ReportProgress(std::optional<int64_t> step) {
  const char* path = std::getenv(kProgressFileVariable);
  if (path == nullptr || *path == '\0') return false;
  return ReportProgress(std::string(path), step);
}

}  // namespace cohort
