#include "wisp/k8s/json_writer.hpp"

#include <gtest/gtest.h>

#include "wisp/k8s/json.hpp"

namespace wisp::k8s {
namespace {

// Tests that the writer's text is the text nlohmann's dump() writes for the same value, strings
// with escapes and multi-byte characters included.
TEST(JsonWriterTest, WritesWhatDumpWrites) {
  const Json expected = Json::parse(R"({"a":[1,-2,true,false,{"b\"q":"t\tab\n\u0001\\ é €"}],
    "e":{},"f":[],"g":[[]],"h":"𝄞"})");
  JsonWriter w;
  w.BeginObject();
  w.Key("a").BeginArray().Int(1).Int(-2).Bool(true).Bool(false);
  w.BeginObject().Key("b\"q").String("t\tab\n\x01\\ é €").EndObject().EndArray();
  w.Key("e").BeginObject().EndObject();
  w.Key("f").BeginArray().EndArray();
  w.Key("g").BeginArray().BeginArray().EndArray().EndArray();
  w.Key("h").String("𝄞");
  w.EndObject();
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w.text(), expected.dump());
  EXPECT_EQ(Json::parse(w.Take()), expected);
  EXPECT_TRUE(w.empty());
}

// Tests that Raw inserts a value with its comma, and that invalid UTF-8 is reported, not written
// as if it were good.
TEST(JsonWriterTest, RawValuesAndInvalidUtf8) {
  JsonWriter w;
  w.BeginArray().Raw(R"({"x":1})").Raw("2").EndArray();
  EXPECT_EQ(w.Take(), R"([{"x":1},2])");
  for (std::string_view bad :
       {"\xff", "\xc3", "\xe0\x80\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80"}) {
    JsonWriter b;
    b.BeginArray().String(bad).EndArray();
    EXPECT_FALSE(b.ok()) << testing::PrintToString(bad);
    std::string out;
    EXPECT_FALSE(AppendJsonString(out, bad));
  }
}

// Tests the eight-bytes-at-a-time scan: a character that needs escaping (or is not ASCII) at every
// position of strings longer than one block is written as dump() writes it.
TEST(JsonWriterTest, EscapesAtEveryPosition) {
  for (std::string_view special : {"\"", "\\", "\n", "\x01", "\x1f", "\x7f", "é", "€", "𝄞"}) {
    for (size_t at = 0; at <= 19; ++at) {
      std::string s = std::string(at, 'a') + std::string(special) + std::string(19 - at, ' ');
      std::string out;
      ASSERT_TRUE(AppendJsonString(out, s));
      EXPECT_EQ(out, Json(s).dump()) << testing::PrintToString(s);
    }
  }
  std::string out;
  EXPECT_FALSE(AppendJsonString(out, std::string(11, 'x') + "\xff" + std::string(9, 'y')));
}

}  // namespace
}  // namespace wisp::k8s
