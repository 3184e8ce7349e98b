#include "sidecar/stack_dump.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/subprocess.h"

namespace cohort {
namespace {

// Each thread's innermost frames kept in a summary, and each line's bytes.
constexpr int kSummaryFramesPerThread = 3;
constexpr size_t kSummaryLineBytes = 160;
constexpr size_t kFailureLineBytes = 200;
constexpr char kEllipsis[] = "\xE2\x80\xA6";  // "…"

struct StackTool {
  std::string name;
  std::vector<std::string> args;  // after the program's path
};

std::vector<StackTool> StackToolsFor(pid_t pid, bool python) {
  const std::string id = std::to_string(pid);
  std::vector<StackTool> tools;
  if (python) tools.push_back({"py-spy", {"dump", "--pid", id}});
  tools.push_back({"eu-stack", {"-p", id}});
  tools.push_back({"gdb", {"-batch", "-nx", "-p", id, "-ex", "thread apply all bt"}});
  return tools;
}

std::vector<std::string> ToolDirectories(const StackDumpOptions& options) {
  if (!options.tools_search_path.empty()) return options.tools_search_path;
  const char* path = std::getenv("PATH");
  std::vector<std::string> dirs = absl::StrSplit(
      path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin", ':', absl::SkipEmpty());
  return dirs;
}

// The tool's path in the first of `dirs` that has it as an executable file; empty: none.
std::string FindTool(const std::string& name, const std::vector<std::string>& dirs) {
  for (const std::string& dir : dirs) {
    std::string path = absl::StrCat(dir, "/", name);
    struct stat st {};
    if (stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0) {
      return path;
    }
  }
  return "";
}

// At most `max_bytes` of `line`, "…" after it when cut (never inside a UTF-8 sequence).
std::string Shortened(absl::string_view line, size_t max_bytes) {
  if (line.size() <= max_bytes) return std::string(line);
  size_t end = max_bytes;
  while (end > 0 && (static_cast<unsigned char>(line[end]) & 0xC0) == 0x80) --end;
  return absl::StrCat(line.substr(0, end), kEllipsis);
}

// The last line of a tool's output that says something: why it failed, usually.
std::string LastLine(const std::string& output) {
  std::vector<absl::string_view> lines = absl::StrSplit(output, '\n');
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    absl::string_view line = absl::StripAsciiWhitespace(*it);
    if (!line.empty()) return Shortened(line, kFailureLineBytes);
  }
  return "";
}

// `text` with each byte that is not part of valid UTF-8 replaced by '?': a tool may print
// anything, and an Event's message must be valid UTF-8.
std::string ValidUtf8(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
    const unsigned char lead = byte(i);
    size_t length = 0;
    unsigned char low = 0x80, high = 0xBF;  // the second byte's range
    if (lead < 0x80) {
      length = 1;
    } else if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) low = 0xA0;   // no overlong forms
      if (lead == 0xED) high = 0x9F;  // no surrogates
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) low = 0x90;
      if (lead == 0xF4) high = 0x8F;  // nothing past U+10FFFF
    }
    bool valid = length > 0 && i + length <= text.size();
    for (size_t k = 1; valid && k < length; ++k) {
      const unsigned char c = byte(i + k);
      valid = k == 1 ? c >= low && c <= high : (c & 0xC0) == 0x80;
    }
    if (valid) {
      out.append(text.data() + i, length);
      i += length;
    } else {
      out.push_back('?');
      ++i;
    }
  }
  return out;
}

// A frame line without what costs bytes and says little: indentation, and gdb's and
// eu-stack's program counters ("#3  0x00007f... in f ()" -> "#3 f ()").
std::string CompactFrame(absl::string_view line) {
  line = absl::StripAsciiWhitespace(line);
  if (!absl::StartsWith(line, "#")) return absl::StrCat("  ", line);
  size_t number_end = 1;
  while (number_end < line.size() && absl::ascii_isdigit(line[number_end])) ++number_end;
  absl::string_view number = line.substr(0, number_end);
  absl::string_view rest = absl::StripLeadingAsciiWhitespace(line.substr(number_end));
  if (absl::StartsWith(rest, "0x")) {
    size_t hex_end = 2;
    while (hex_end < rest.size() && absl::ascii_isxdigit(rest[hex_end])) ++hex_end;
    absl::string_view after = absl::StripLeadingAsciiWhitespace(rest.substr(hex_end));
    if (absl::StartsWith(after, "in ")) after.remove_prefix(3);
    if (!after.empty()) rest = after;
  }
  return absl::StrCat("  ", number, " ", rest);
}

bool IsThreadHeader(absl::string_view line) {
  // py-spy and gdb: "Thread 123 ..."; eu-stack: "TID 123:".
  return absl::StartsWith(line, "Thread ") || absl::StartsWith(line, "TID ");
}

// py-spy's frames are indented under their thread; gdb's and eu-stack's start with "#N".
bool IsFrame(absl::string_view line, bool indented_frames) {
  if (indented_frames) return !line.empty() && (line[0] == ' ' || line[0] == '\t');
  return absl::StartsWith(line, "#");
}

bool IsMainThread(absl::string_view header) {
  // py-spy names it; gdb numbers it 1 (eu-stack lists it first anyway).
  return absl::StrContains(header, "\"MainThread\"") || absl::StartsWith(header, "Thread 1 (");
}

// "Thread ..." headers each with their innermost frames (all tools print those first), the
// main thread's first: it is the one a cut summary must not lose. Empty when no thread header
// is found.
std::string ThreadSummaries(const StackDump& dump, int* threads) {
  const bool indented_frames = dump.tool == "py-spy";
  std::vector<std::string> blocks;
  size_t main_block = 0;
  int frames = 0;
  for (absl::string_view line : absl::StrSplit(dump.output, '\n')) {
    line = absl::StripTrailingAsciiWhitespace(line);
    if (IsThreadHeader(line)) {
      if (IsMainThread(line)) main_block = blocks.size();
      blocks.push_back(absl::StrCat(Shortened(line, kSummaryLineBytes), "\n"));
      frames = 0;
    } else if (!blocks.empty() && IsFrame(line, indented_frames) &&
               frames < kSummaryFramesPerThread) {
      ++frames;
      absl::StrAppend(&blocks.back(), Shortened(CompactFrame(line), kSummaryLineBytes), "\n");
    }
  }
  *threads = static_cast<int>(blocks.size());
  if (main_block > 0) {
    std::rotate(blocks.begin(), blocks.begin() + main_block, blocks.begin() + main_block + 1);
  }
  return absl::StrJoin(blocks, "");
}

// /proc/PID/<name>, or empty when it cannot be read.
std::string ProcEntryText(pid_t pid, const char* name) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/", name), std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

bool BaseNameHasPython(absl::string_view path) {
  const size_t slash = path.rfind('/');
  if (slash != absl::string_view::npos) path.remove_prefix(slash + 1);
  return absl::StrContains(absl::AsciiStrToLower(path), "python");
}

}  // namespace

StackDump DumpStacks(pid_t pid, bool python, const StackDumpOptions& options) {
  const std::vector<std::string> dirs = ToolDirectories(options);
  StackDump dump;
  std::vector<std::string> not_found;
  absl::StatusCode last_code = absl::StatusCode::kNotFound;
  for (const StackTool& tool : StackToolsFor(pid, python)) {
    const std::string path = FindTool(tool.name, dirs);
    if (path.empty()) {
      not_found.push_back(tool.name);
      continue;
    }
    std::vector<std::string> argv = {path};
    argv.insert(argv.end(), tool.args.begin(), tool.args.end());
    dump.tool = tool.name;
    dump.command = CommandLineText(argv);
    dump.output.clear();
    dump.truncated = false;
    absl::StatusOr<SubprocessResult> run =
        RunSubprocess(argv, options.timeout, options.max_output_bytes);
    if (run.ok()) {
      dump.output = std::move(run->output);
      dump.truncated = run->truncated;
      if (run->Succeeded()) {
        dump.status = absl::OkStatus();
        return dump;
      }
      std::string why = LastLine(dump.output);
      dump.failed.push_back(
          absl::StrCat(tool.name, ": ", run->Describe(), why.empty() ? "" : ": ", why));
      last_code = absl::StatusCode::kInternal;
    } else {
      dump.failed.push_back(absl::StrCat(tool.name, ": ", run.status().message()));
      last_code = run.status().code();
      // A tracer killed while the process was stopped for it may leave it stopped.
      if (absl::IsDeadlineExceeded(run.status())) kill(pid, SIGCONT);
    }
  }
  const std::string where =
      absl::StrCat(options.tools_search_path.empty() ? "PATH " : "", absl::StrJoin(dirs, ":"),
                   python ? "" : "; py-spy only for Python");
  if (dump.tool.empty()) {
    dump.status = absl::NotFoundError(absl::StrCat(
        "no stack tool found (tried ", absl::StrJoin(not_found, ", "), " on ", where, ")"));
    return dump;
  }
  dump.status = absl::Status(
      last_code, absl::StrCat("no stack tool succeeded: ", absl::StrJoin(dump.failed, "; "),
                              not_found.empty() ? "" : " (not found: ",
                              absl::StrJoin(not_found, ", "), not_found.empty() ? "" : ")"));
  // The last tool's failure is the status's; `failed` keeps those before it.
  dump.failed.pop_back();
  return dump;
}

bool LooksLikePython(pid_t pid) {
  char exe[4096];
  const std::string link = absl::StrCat("/proc/", pid, "/exe");
  const ssize_t n = readlink(link.c_str(), exe, sizeof exe - 1);
  if (n > 0 && BaseNameHasPython(absl::string_view(exe, static_cast<size_t>(n)))) return true;
  const std::string cmdline = ProcEntryText(pid, "cmdline");
  return BaseNameHasPython(absl::string_view(cmdline.c_str()));  // argv[0]
}

std::string SummarizeStacks(const StackDump& dump, size_t max_bytes) {
  std::string text;
  if (!dump.status.ok()) {
    text = absl::StrCat("no stacks: ", dump.status.message());
  } else {
    int threads = 0;
    std::string summaries = ThreadSummaries(dump, &threads);
    if (threads > 0) {
      text = absl::StrCat(dump.tool, " (", threads, threads == 1 ? " thread" : " threads", "):\n",
                          summaries);
    } else {
      // A format not known here: its first lines.
      text = absl::StrCat(dump.tool, ":\n", dump.output);
    }
  }
  text = ValidUtf8(absl::StripTrailingAsciiWhitespace(text));
  if (text.size() <= max_bytes) return text;
  const size_t ellipsis = sizeof kEllipsis - 1;
  size_t end = max_bytes >= ellipsis ? max_bytes - ellipsis : max_bytes;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  text.resize(end);
  if (max_bytes >= ellipsis) {
    text = absl::StrCat(absl::StripTrailingAsciiWhitespace(text), kEllipsis);
  }
  return text;
}

}  // namespace cohort
