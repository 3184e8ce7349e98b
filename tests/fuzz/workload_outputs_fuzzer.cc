// libFuzzer target: what the sidecar reads from its workload and from the tools it runs on it,
// none of which it controls: the progress file's content (ParseProgressStep) and a stack
// tool's output (SummarizeStacks, for each tool's format). The input's first byte picks the
// tool and the summary's size (16 to 1039 bytes); the rest is the text.
//
// Whatever the bytes: no crash, leak or out-of-bounds read (ASan, UBSan); a step found is a
// line of the content that reads as that number; a summary is never longer than asked, is
// valid UTF-8 (an Event's message must be), and names the tool it summarises.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "sidecar/progress_tracker.h"
#include "sidecar/stack_dump.h"

namespace {

bool ValidUtf8(const std::string& text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > text.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(text[i + k]) >> 6) != 0x2) return false;
    }
    i += n;
  }
  return true;
}

void Check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "workload_outputs_fuzzer: %s\n", what);
    abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t pick = data[0];
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);

  if (std::optional<int64_t> step = cohort::ParseProgressStep(text)) {
    bool found = false;
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      int64_t n = 0;
      if (absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &n) && n == *step) found = true;
    }
    Check(found, "a step that is no line of the content");
  }

  static const char* const kTools[] = {"py-spy", "eu-stack", "gdb", ""};
  cohort::StackDump dump;
  dump.tool = kTools[pick % 4];
  dump.command = dump.tool + " 1";
  dump.output = text;
  dump.truncated = (pick & 0x80) != 0;
  const size_t max_bytes = 16 + (pick >> 2) * 16;
  const std::string summary = cohort::SummarizeStacks(dump, max_bytes);
  Check(summary.size() <= max_bytes, "a summary longer than asked");
  Check(ValidUtf8(summary), "a summary that is not valid UTF-8");
  Check(dump.tool.empty() || max_bytes < 64 || summary.rfind(dump.tool, 0) == 0,
        "a summary that does not begin with its tool");
  return 0;
}
