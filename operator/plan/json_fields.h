// Reading the API server's JSON objects without exceptions: a missing field or one of
// another type reads as null or as the fallback given.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "nlohmann/json.hpp"

namespace cohort::controller::planning {

using json = nlohmann::json;

// Field `key` of `object`; null when `object` is no object or lacks it.
inline const json& Field(const json& object, const char* key) {
  static const json kNull;
  if (!object.is_object()) return kNull;
  auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}
inline std::string Text(const json& v, std::string fallback = "") {
  return v.is_string() ? v.get<std::string>() : std::move(fallback);
}
inline int64_t Int(const json& v, int64_t fallback) {
  return v.is_number_integer() ? v.get<int64_t>() : fallback;
}
// The elements of an array; none for anything else.
inline const json& Items(const json& v) {
  static const json kEmpty = json::array();
  return v.is_array() ? v : kEmpty;
}

inline int IntLabel(const json& labels, const char* key) {
  int v = -1;
  const json& label = Field(labels, key);
  if (!label.is_string() || !absl::SimpleAtoi(label.get<std::string>(), &v)) return -1;
  return v;
}

}  // namespace cohort::controller::planning
