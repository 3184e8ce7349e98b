#include "service/torch/torch_keys.h"

#include "absl/strings/str_cat.h"

namespace cohort::torch {

namespace {

constexpr char kHex[] = "0123456789ABCDEF";

bool KeptAsIs(unsigned char c) { return c >= '!' && c <= '~' && c != '/' && c != '%'; }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// "dir/" and the torch key, escaped.
std::string Escaped(absl::string_view dir, absl::string_view torch_key) {
  std::string out = absl::StrCat(dir, "/");
  if (torch_key.empty()) return out + "%";
  for (char ch : torch_key) {
    auto c = static_cast<unsigned char>(ch);
    if (KeptAsIs(c)) {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xf]);
    }
  }
  return out;
}

}  // namespace

std::string StoreKey(absl::string_view torch_key) { return Escaped(kTorchKeyDir, torch_key); }

std::string QueueKey(absl::string_view torch_queue) { return Escaped(kTorchQueueDir, torch_queue); }

std::optional<std::string> TorchKey(absl::string_view store_key) {
  std::string prefix = absl::StrCat(kTorchKeyDir, "/");
  if (store_key.substr(0, prefix.size()) != prefix) return std::nullopt;
  absl::string_view escaped = store_key.substr(prefix.size());
  if (escaped == "%") return std::string();
  if (escaped.empty()) return std::nullopt;
  std::string out;
  for (size_t i = 0; i < escaped.size(); ++i) {
    auto c = static_cast<unsigned char>(escaped[i]);
    if (KeptAsIs(c)) {
      out.push_back(escaped[i]);
      continue;
    }
    if (c != '%' || i + 2 >= escaped.size()) return std::nullopt;
    int high = HexValue(escaped[i + 1]), low = HexValue(escaped[i + 2]);
    if (high < 0 || low < 0) return std::nullopt;
    auto byte = static_cast<unsigned char>(high * 16 + low);
    if (KeptAsIs(byte)) return std::nullopt;  // not how StoreKey writes it
    out.push_back(static_cast<char>(byte));
    i += 2;
  }
  return out;
}

}  // namespace cohort::torch
