#include "sidecar/gpu/json_writer.h"

#include <cmath>
#include <cstdio>

namespace cohort::gpu {

void JsonWriter::BeginObject() { Open('{'); }
void JsonWriter::EndObject() { Close('}'); }
void JsonWriter::BeginArray() { Open('['); }
void JsonWriter::EndArray() { Close(']'); }

void JsonWriter::Key(std::string_view key) {
  BeforeValue();
  WriteQuoted(key);
  out_ += ": ";
  after_key_ = true;
}

void JsonWriter::String(std::string_view value) {
  BeforeValue();
  WriteQuoted(value);
}

void JsonWriter::WriteQuoted(std::string_view value) {
  out_ += '"';
  for (char c : value) {
    switch (c) {
      case '"':
        out_ += "\\\"";
        break;
      case '\\':
        out_ += "\\\\";
        break;
      case '\n':
        out_ += "\\n";
        break;
      case '\t':
        out_ += "\\t";
        break;
      case '\r':
        out_ += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof(escaped), "\\u%04x", static_cast<unsigned int>(c));
          out_ += escaped;
        } else {
          out_ += c;  // UTF-8 passes through unchanged
        }
    }
  }
  out_ += '"';
}

void JsonWriter::Int(int64_t value) {
  BeforeValue();
  out_ += std::to_string(value);
}

void JsonWriter::Uint(uint64_t value) {
  BeforeValue();
  out_ += std::to_string(value);
}

void JsonWriter::Double(double value) {
  if (!std::isfinite(value)) {
    Null();
    return;
  }
  BeforeValue();
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  out_ += text;
}

void JsonWriter::Bool(bool value) {
  BeforeValue();
  out_ += value ? "true" : "false";
}

void JsonWriter::Null() {
  BeforeValue();
  out_ += "null";
}

void JsonWriter::Member(std::string_view key, std::string_view value) {
  Key(key);
  String(value);
}

void JsonWriter::Member(std::string_view key, bool value) {
  Key(key);
  Bool(value);
}

void JsonWriter::Member(std::string_view key, std::optional<bool> value) {
  Key(key);
  if (value) {
    Bool(*value);
  } else {
    Null();
  }
}

void JsonWriter::Member(std::string_view key, std::optional<double> value) {
  Key(key);
  if (value) {
    Double(*value);
  } else {
    Null();
  }
}

void JsonWriter::IntMember(std::string_view key, int64_t value) {
  Key(key);
  Int(value);
}

void JsonWriter::BeforeValue() {
  if (after_key_) {
    after_key_ = false;  // the key already placed this value
    return;
  }
  if (has_members_.empty()) return;
  if (has_members_.back()) out_ += ',';
  has_members_.back() = true;
  Newline();
}

void JsonWriter::Open(char bracket) {
  BeforeValue();
  out_ += bracket;
  has_members_.push_back(false);
}

void JsonWriter::Close(char bracket) {
  bool had_members = has_members_.back();
  has_members_.pop_back();
  if (had_members) Newline();
  out_ += bracket;
  if (has_members_.empty()) out_ += '\n';
}

void JsonWriter::Newline() {
  out_ += '\n';
  out_.append(2 * has_members_.size(), ' ');
}

}  // namespace cohort::gpu
