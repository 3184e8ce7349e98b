#include "service/state/earlier_gangs.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cohort {

namespace fs = std::filesystem;

GangStateName ParseGangStateName(absl::string_view name) {
  GangStateName out;
  // YYYYMMDDTHHMMSSZ-gang-N
  constexpr absl::string_view kGang = "-gang-";
  if (name.size() < 16 + kGang.size() + 1) return out;
  const absl::string_view start = name.substr(0, 16);
  for (size_t i = 0; i < start.size(); ++i) {
    const bool digit = absl::ascii_isdigit(static_cast<unsigned char>(start[i]));
    if (i == 8 ? start[i] != 'T' : i == 15 ? start[i] != 'Z' : !digit) return out;
  }
  if (name.substr(16, kGang.size()) != kGang) return out;
  const absl::string_view number = name.substr(16 + kGang.size());
  if (number.size() > 1 && number[0] == '0') return out;
  for (char c : number) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return out;
  }
  if (!absl::SimpleAtoi(number, &out.gang)) return out;
  out.start = std::string(start);
  out.ok = true;
  return out;
}

absl::StatusOr<std::vector<RemovedState>> RemoveEarlierGangStates(const std::string& path) {
  const fs::path own(path);
  const std::string name = own.filename().string();
  const GangStateName mine = ParseGangStateName(name);
  if (!mine.ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("--state-prune-before ", path,
                     ": its last part must be named as the operator names a gang's state "
                     "directory (YYYYMMDDTHHMMSSZ-gang-N), got \"",
                     name, "\""));
  }
  const fs::path parent = own.parent_path().empty() ? fs::path(".") : own.parent_path();
  std::error_code error;
  if (!fs::is_directory(parent, error)) {
    return absl::NotFoundError(absl::StrCat("--state-prune-before ", path, ": ", parent.string(),
                                            " is not a directory",
                                            error ? absl::StrCat(" (", error.message(), ")") : ""));
  }
  std::vector<std::pair<GangStateName, fs::path>> earlier;
  for (fs::directory_iterator it(parent, error), end; !error && it != end; it.increment(error)) {
    const GangStateName other = ParseGangStateName(it->path().filename().string());
    std::error_code kind;
    if (!other.ok || !it->is_directory(kind) || it->is_symlink(kind)) continue;
    if (std::tie(other.start, other.gang) < std::tie(mine.start, mine.gang)) {
      earlier.emplace_back(other, it->path());
    }
  }
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("cannot list ", parent.string(), ": ", error.message()));
  }
  std::sort(earlier.begin(), earlier.end(), [](const auto& a, const auto& b) {
    return std::tie(a.first.start, a.first.gang) < std::tie(b.first.start, b.first.gang);
  });
  std::vector<RemovedState> removed;
  for (const auto& [gang, dir] : earlier) {
    RemovedState r;
    r.path = dir.string();
    for (fs::recursive_directory_iterator it(dir, error), end; !error && it != end;
         it.increment(error)) {
      std::error_code size_error;
      if (it->is_regular_file(size_error)) r.bytes += it->file_size(size_error);
    }
    error.clear();
    fs::remove_all(dir, error);
    if (error) {
      return absl::PermissionDeniedError(absl::StrCat(
          "cannot remove the state of an earlier gang, ", r.path, ": ", error.message()));
    }
    removed.push_back(std::move(r));
  }
  return removed;
}

}  // namespace cohort
