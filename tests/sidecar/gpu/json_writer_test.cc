// The hand-written JSON writer produces JSON a real parser accepts, with the values given.

#include "sidecar/gpu/json_writer.h"

#include <cmath>
#include <optional>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace cohort::gpu {
namespace {

TEST(JsonWriterTest, NestedDocumentParsesBackToTheSameValues) {
  JsonWriter json;
  json.BeginObject();
  json.Member("name", "NVIDIA H100");
  json.IntMember("index", -3);
  json.Member("free", std::optional<uint64_t>(85520809984u));
  json.Member("numa", std::optional<int>());
  json.Member("ecc", std::optional<bool>(true));
  json.Key("empty");
  json.BeginArray();
  json.EndArray();
  json.Key("list");
  json.BeginArray();
  json.Uint(1);
  json.BeginObject();
  json.Member("ok", false);
  json.EndObject();
  json.Null();
  json.EndArray();
  json.EndObject();

  nlohmann::json parsed = nlohmann::json::parse(json.text());
  EXPECT_EQ(parsed["name"], "NVIDIA H100");
  EXPECT_EQ(parsed["index"], -3);
  EXPECT_EQ(parsed["free"], 85520809984u);
  EXPECT_TRUE(parsed["numa"].is_null());
  EXPECT_EQ(parsed["ecc"], true);
  EXPECT_TRUE(parsed["empty"].empty());
  EXPECT_EQ(parsed["list"][0], 1);
  EXPECT_EQ(parsed["list"][1]["ok"], false);
  EXPECT_TRUE(parsed["list"][2].is_null());
  EXPECT_EQ(json.text().back(), '\n');
}

TEST(JsonWriterTest, DoublesAreNumbersAndNotANumberIsNull) {
  JsonWriter json;
  json.BeginObject();
  json.Member("sm_activity", std::optional<double>(0.8125));
  json.Member("small", std::optional<double>(1.5e-7));
  json.Member("none", std::optional<double>());
  json.Member("nan", std::optional<double>(std::nan("")));
  json.Key("list");
  json.BeginArray();
  json.Double(1.0 / 3);
  json.Double(-2);
  json.EndArray();
  json.EndObject();

  nlohmann::json parsed = nlohmann::json::parse(json.text());
  EXPECT_DOUBLE_EQ(parsed["sm_activity"].get<double>(), 0.8125);
  EXPECT_DOUBLE_EQ(parsed["small"].get<double>(), 1.5e-7);
  EXPECT_TRUE(parsed["none"].is_null());
  EXPECT_TRUE(parsed["nan"].is_null());
  EXPECT_NEAR(parsed["list"][0].get<double>(), 1.0 / 3, 1e-6);
  EXPECT_EQ(parsed["list"][1], -2);
}

TEST(JsonWriterTest, StringsAreEscaped) {
  JsonWriter json;
  json.BeginArray();
  json.String("quote \" backslash \\ newline \n tab \t bell \x07 é");
  json.EndArray();

  EXPECT_EQ(nlohmann::json::parse(json.text())[0],
            "quote \" backslash \\ newline \n tab \t bell \x07 é");
  EXPECT_NE(json.text().find("\\u0007"), std::string::npos);
}

TEST(JsonWriterTest, OutputIsIndented) {
  JsonWriter json;
  json.BeginObject();
  json.Key("a");
  json.BeginArray();
  json.Int(1);
  json.Int(2);
  json.EndArray();
  json.EndObject();

  EXPECT_EQ(json.text(), "{\n  \"a\": [\n    1,\n    2\n  ]\n}\n");
}

}  // namespace
}  // namespace cohort::gpu
