#pragma once

// A small streaming JSON writer, written by hand because this module must build with the C++
// standard library alone (cohort-gpu-info is copied to GPU machines by itself); the rest of
// cohort uses a JSON library.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace cohort::gpu {

// Writes one JSON document, indented two spaces per level. The caller keeps the calls
// balanced (every Begin* has its End*, every object member starts with Key).
class JsonWriter {
 public:
  void BeginObject();
  void EndObject();
  void BeginArray();
  void EndArray();
  void Key(std::string_view key);

  void String(std::string_view value);
  void Int(int64_t value);
  void Uint(uint64_t value);
  // Six significant digits; null when not finite (JSON has no NaN or infinity).
  void Double(double value);
  void Bool(bool value);
  void Null();

  // A member whose value may be absent (written as null).
  void Member(std::string_view key, std::string_view value);
  void Member(std::string_view key, const char* value) { Member(key, std::string_view(value)); }
  void Member(std::string_view key, bool value);
  template <typename Integer>
  void Member(std::string_view key, std::optional<Integer> value) {
    static_assert(std::is_integral_v<Integer>, "a number that is not an integer is a double");
    Key(key);
    if (!value) {
      Null();
    } else if constexpr (std::is_signed_v<Integer>) {
      Int(*value);
    } else {
      Uint(*value);
    }
  }
  void Member(std::string_view key, std::optional<bool> value);
  void Member(std::string_view key, std::optional<double> value);
  void IntMember(std::string_view key, int64_t value);

  // The document so far, with a final newline once the outermost value is closed.
  const std::string& text() const { return out_; }

 private:
  // Writes the separator and indentation a new value needs at this point.
  void BeforeValue();
  void Open(char bracket);
  void Close(char bracket);
  void Newline();
  void WriteQuoted(std::string_view value);

  std::string out_;
  // One entry per open object/array: whether it has a member yet.
  std::vector<bool> has_members_;
  bool after_key_ = false;
};

}  // namespace cohort::gpu
