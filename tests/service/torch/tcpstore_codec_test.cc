#include "service/torch/tcpstore_codec.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/service/torch/decode_all.h"

namespace cohort::torch {
namespace {

using ::cohort::torch::testing::DecodeAll;
using ::testing::HasSubstr;

bool operator==(const Command& a, const Command& b) {
  return a.query == b.query && a.keys == b.keys && a.values == b.values && a.number == b.number;
}

Command Validate() { return {Query::kValidate, {}, {}, kValidationMagic}; }

// One of each command, with the fields torch's client sends.
std::vector<Command> EveryCommand() {
  return {
      Validate(),
      {Query::kSet, {"/k"}, {std::string("v\0w", 3)}, 0},
      {Query::kCompareSet, {"/k"}, {"", "new"}, 0},
      {Query::kGet, {"/k"}, {}, 0},
      {Query::kAdd, {"init/"}, {}, -3},
      {Query::kCheck, {"/a", "/b"}, {}, 0},
      {Query::kWait, {"/a"}, {}, 0},
      {Query::kGetNumKeys, {}, {}, 0},
      {Query::kDeleteKey, {"/a"}, {}, 0},
      {Query::kAppend, {"/a"}, {"more"}, 0},
      {Query::kMultiGet, {"/a", "", "/c"}, {}, 0},
      {Query::kMultiSet, {"/a", "/b"}, {"1", ""}, 0},
      {Query::kCancelWait, {}, {}, 0},
      {Query::kPing, {}, {}, 4242},
      {Query::kQueuePush, {"/q"}, {"item"}, 0},
      {Query::kQueuePop, {"/q"}, {}, 0},
      {Query::kQueueLen, {"/q"}, {}, 0},
      {Query::kListKeys, {}, {}, 0},
      {Query::kBarrier, {"/b"}, {}, 4000},
  };
}

std::string Encode(const std::vector<Command>& commands) {
  std::string bytes;
  for (const Command& c : commands) bytes += EncodeCommand(c);
  return bytes;
}

TEST(TcpStoreCodecTest, EveryCommandDecodesAsSentHoweverTheBytesAreSplit) {
  const std::vector<Command> sent = EveryCommand();
  const std::string bytes = Encode(sent);
  for (size_t piece : {size_t{1}, size_t{2}, size_t{7}, size_t{1440}, bytes.size()}) {
    absl::Status error;
    std::vector<Command> got = DecodeAll(bytes, piece, &error);
    ASSERT_TRUE(error.ok()) << error << " in pieces of " << piece;
    ASSERT_EQ(got.size(), sent.size()) << "in pieces of " << piece;
    for (size_t i = 0; i < sent.size(); ++i) {
      EXPECT_TRUE(got[i] == sent[i]) << QueryName(sent[i].query) << " in pieces of " << piece;
    }
  }
}

TEST(TcpStoreCodecTest, TheWireBytesAreTorchs) {
  // VALIDATE: 00, then the magic little-endian; SET: 01, u64 length and bytes twice.
  EXPECT_EQ(EncodeCommand(Validate()), std::string("\x00\xce\xf7\x85\x3c", 5));
  EXPECT_EQ(EncodeCommand({Query::kSet, {"/k"}, {"v"}, 0}),
            std::string("\x01\x02\0\0\0\0\0\0\0/k\x01\0\0\0\0\0\0\0v", 20));
  std::string reply;
  AppendI64(-2, &reply);
  AppendBytes("ab", &reply);
  AppendU8(kWaitCanceled, &reply);
  EXPECT_EQ(reply, std::string("\xfe\xff\xff\xff\xff\xff\xff\xff\x02\0\0\0\0\0\0\0ab\x01", 19));
}

TEST(TcpStoreCodecTest, AManyKeyCommandArrivingInPiecesIsWhole) {
  Command big{Query::kMultiSet, {}, {}, 0};
  for (int i = 0; i < 3000; ++i) {
    big.keys.push_back("/key/" + std::to_string(i));
    big.values.push_back(std::string(i % 50, 'x'));
  }
  absl::Status error;
  std::vector<Command> got = DecodeAll(Encode({Validate(), big, Validate()}), 1440, &error);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(got[1] == big);
  EXPECT_THAT(std::string(error.message()), HasSubstr("VALIDATE again"));
}

TEST(TcpStoreCodecTest, TheFirstCommandMustBeValidateWithTheMagic) {
  absl::Status error;
  EXPECT_TRUE(DecodeAll(EncodeCommand({Query::kGet, {"/k"}, {}, 0}), 64, &error).empty());
  EXPECT_EQ(error.code(), absl::StatusCode::kFailedPrecondition) << error;
  EXPECT_THAT(std::string(error.message()), HasSubstr("not VALIDATE"));
  EXPECT_TRUE(DecodeAll(EncodeCommand({Query::kValidate, {}, {}, 0x12345678}), 64, &error).empty());
  EXPECT_EQ(error.code(), absl::StatusCode::kInvalidArgument) << error;
  EXPECT_THAT(std::string(error.message()), HasSubstr("magic"));
}

TEST(TcpStoreCodecTest, AnUnknownCommandIsAnError) {
  absl::Status error;
  std::vector<Command> got =
      DecodeAll(EncodeCommand(Validate()) + std::string(1, '\x13'), 64, &error);
  EXPECT_EQ(got.size(), 1u);
  EXPECT_EQ(error.code(), absl::StatusCode::kInvalidArgument) << error;
  EXPECT_THAT(std::string(error.message()), HasSubstr("unknown TCPStore command 19"));
}

TEST(TcpStoreCodecTest, AFieldPastItsLimitIsRefusedBeforeItsBytesArrive) {
  CodecLimits limits;
  limits.max_key_bytes = 16;
  limits.max_value_bytes = 32;
  limits.max_keys = 4;
  limits.max_command_bytes = 128;
  auto refused = [&](const std::string& header, const std::string& what) {
    absl::Status error;
    DecodeAll(EncodeCommand(Validate()) + header, 4096, &error, limits);
    EXPECT_EQ(error.code(), absl::StatusCode::kResourceExhausted) << error;
    EXPECT_THAT(std::string(error.message()), HasSubstr(what));
  };
  // Only the length or count of each: the decoder need not wait for the rest.
  refused(std::string("\x03\x11\0\0\0\0\0\0\0", 9), "a key of 17 bytes (at most 16)");
  refused(std::string("\x01\x01\0\0\0\0\0\0\0k\x21\0\0\0\0\0\0\0", 18),
          "a value of 33 bytes (at most 32)");
  refused(std::string("\x06\x05\0\0\0\0\0\0\0", 9), "5 keys in one command (at most 4)");
  Command many{Query::kMultiSet, {"/1", "/2", "/3", "/4"}, {}, 0};
  for (int i = 0; i < 4; ++i) many.values.push_back(std::string(30, 'v'));
  refused(EncodeCommand(many), "a command of more than 128 bytes");
}

TEST(TcpStoreCodecTest, NothingIsDecodedUntilACommandIsWhole) {
  CommandDecoder decoder;
  decoder.Feed(EncodeCommand(Validate()));
  ASSERT_TRUE(decoder.Next().ok());
  std::string get = EncodeCommand({Query::kGet, {"/key"}, {}, 0});
  decoder.Feed(get.substr(0, get.size() - 1));
  absl::StatusOr<std::optional<Command>> next = decoder.Next();
  ASSERT_TRUE(next.ok());
  EXPECT_FALSE(next->has_value());
  decoder.Feed(get.substr(get.size() - 1));
  next = decoder.Next();
  ASSERT_TRUE(next.ok() && next->has_value());
  EXPECT_EQ((*next)->keys, std::vector<std::string>{"/key"});
  EXPECT_EQ(decoder.buffered(), 0u);
}

}  // namespace
}  // namespace cohort::torch
