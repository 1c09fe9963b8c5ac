#include "wisp/k8s/json_patch.hpp"

#include <gtest/gtest.h>

namespace wisp::k8s {
namespace {

Json J(const char* text) { return Json::parse(text); }

struct DiffCase {
  const char* name;
  const char* from;
  const char* to;
  const char* expected_patch;  // nullptr: only check the round trip
};

// Tests that Diff produces minimal operations and that applying them (ours and nlohmann's
// independent implementation) reproduces the target.
TEST(JsonPatchTest, DiffRoundTripsAndIsMinimal) {
  const DiffCase cases[] = {
      {"equal", R"({"a":1})", R"({"a":1})", "[]"},
      {"add member", R"({"a":1})", R"({"a":1,"b":{"c":2}})",
       R"([{"op":"add","path":"/b","value":{"c":2}}])"},
      {"remove member", R"({"a":1,"b":2})", R"({"a":1})", R"([{"op":"remove","path":"/b"}])"},
      {"replace scalar", R"({"a":1})", R"({"a":"x"})",
       R"([{"op":"replace","path":"/a","value":"x"}])"},
      {"append to array", R"({"c":[{"name":"app"}]})", R"({"c":[{"name":"app"},{"name":"s"}]})",
       R"([{"op":"add","path":"/c/-","value":{"name":"s"}}])"},
      {"insert at front", R"({"c":[{"name":"app"}]})", R"({"c":[{"name":"s"},{"name":"app"}]})",
       R"([{"op":"add","path":"/c/0","value":{"name":"s"}}])"},
      {"escaped keys", R"({"metadata":{"annotations":{}}})",
       R"({"metadata":{"annotations":{"wisp.dev/x":"1","a~b":"2"}}})",
       R"([{"op":"add","path":"/metadata/annotations/a~0b","value":"2"},)"
       R"({"op":"add","path":"/metadata/annotations/wisp.dev~1x","value":"1"}])"},
      {"element changed in place", R"({"c":[{"name":"a","env":[]}]})",
       R"({"c":[{"name":"a","env":[{"name":"X"}]}]})",
       R"([{"op":"add","path":"/c/0/env/-","value":{"name":"X"}}])"},
      {"remove middle", R"([1,2,3,4])", R"([1,4])",
       R"([{"op":"remove","path":"/2"},{"op":"remove","path":"/1"}])"},
      {"type change", R"({"a":[1]})", R"({"a":{"b":1}})",
       R"([{"op":"replace","path":"/a","value":{"b":1}}])"},
      {"mixed arrays", R"([1,2,3])", R"([0,1,9,3,4])", nullptr},
      {"empty to many", R"([])", R"([1,2,3])", nullptr},
      {"many to empty", R"([1,2,3])", R"([])", nullptr},
      {"whole doc", R"(1)", R"("x")", R"([{"op":"replace","path":"","value":"x"}])"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Json from = J(c.from);
    Json to = J(c.to);
    Json patch = Diff(from, to);
    if (c.expected_patch != nullptr) {
      EXPECT_EQ(patch, J(c.expected_patch)) << patch.dump();
    }
    auto applied = ApplyPatch(from, patch);
    ASSERT_TRUE(applied.ok()) << applied.status();
    EXPECT_EQ(*applied, to);
    EXPECT_EQ(from.patch(patch), to);  // nlohmann's own RFC 6902 applier agrees
  }
}

// Tests that every RFC 6902 operation applies as the RFC's examples say.
TEST(JsonPatchTest, AppliesAllOperations) {
  Json doc = J(R"({"a":{"b":[1,2]},"c":"x"})");
  Json patch = J(R"([
    {"op":"add","path":"/a/b/1","value":9},
    {"op":"remove","path":"/c"},
    {"op":"replace","path":"/a/b/0","value":0},
    {"op":"copy","from":"/a/b","path":"/d"},
    {"op":"move","from":"/d","path":"/e"},
    {"op":"test","path":"/e","value":[0,9,2]},
    {"op":"add","path":"/f~1g","value":true}
  ])");
  auto out = ApplyPatch(doc, patch);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, J(R"({"a":{"b":[0,9,2]},"e":[0,9,2],"f/g":true})"));
}

// Tests that bad patches fail with a message naming the operation and path, leaving input intact.
TEST(JsonPatchTest, RejectsBadOperationsWithNamedErrors) {
  Json doc = J(R"({"a":[1]})");
  struct Case {
    const char* patch;
    const char* message;
  } cases[] = {
      {R"({"op":"add"})", "patch must be a JSON array"},
      {R"([{"op":"remove","path":"/b"}])", "patch[0] (remove /b): path does not exist"},
      {R"([{"op":"add","path":"/a/5","value":1}])",
       "patch[0] (add /a/5): array index out of range"},
      {R"([{"op":"add","path":"/x/y","value":1}])", "patch[0] (add /x/y): path does not exist"},
      {R"([{"op":"test","path":"/a","value":[2]}])",
       "patch[0] (test /a): test failed: value differs"},
      {R"([{"op":"replace","path":"/a/01","value":2}])",
       "patch[0] (replace /a/01): path does not exist"},
      {R"([{"op":"frob","path":"/a"}])", "patch[0] (frob /a): unknown op"},
      {R"([{"op":"add","path":"a","value":1}])",
       "patch[0] (add a): JSON pointer \"a\" must be empty or start with '/'"},
      {R"([{"op":"add","path":"/~2","value":1}])",
       "patch[0] (add /~2): JSON pointer token \"~2\" has '~' not followed by 0 or 1"},
      {R"([{"op":"move","from":"/a","path":"/a/0"}])",
       "patch[0] (move /a/0): cannot move a value into one of its children"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.patch);
    auto out = ApplyPatch(doc, J(c.patch));
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(std::string(out.status().message()), c.message);
  }
  EXPECT_EQ(doc, J(R"({"a":[1]})"));
}

// Tests that pointer escaping round-trips ~ and / in both orders (~01 is "~1", not "/").
TEST(JsonPatchTest, PointerEscaping) {
  EXPECT_EQ(EscapePointerToken("a/b~c"), "a~1b~0c");
  EXPECT_EQ(*UnescapePointerToken("~01"), "~1");
  EXPECT_EQ(*UnescapePointerToken("~10"), "/0");
  auto tokens = SplitPointer("/metadata/annotations/wisp.dev~1token-sidecar/");
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ(*tokens,
            (std::vector<std::string>{"metadata", "annotations", "wisp.dev/token-sidecar", ""}));
  EXPECT_EQ(JoinPointer(*tokens), "/metadata/annotations/wisp.dev~1token-sidecar/");
}

// Tests that malformed JSON is an InvalidArgument naming what was parsed.
TEST(JsonPatchTest, ParseJsonNamesTheInput) {
  auto bad = ParseJson("{\"a\":", "request.object");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(std::string(bad.status().message()).rfind("request.object is not valid JSON", 0) == 0)
      << bad.status();
}

// Tests that ParseJson (simdjson, then a tree) accepts exactly what nlohmann's parser accepts and
// builds the same value, numbers of the same kind included, on the texts where parsers differ.
TEST(JsonPatchTest, ParseJsonBuildsWhatNlohmannBuilds) {
  std::string deep;
  for (int i = 0; i < 1100; ++i) deep += "[";  // past simdjson's default depth of 1024
  for (int i = 0; i < 1100; ++i) deep += "]";
  const std::string texts[] = {
      R"({"a":1,"a":{"b":[true,false,null]}})",  // duplicate key: the last wins
      R"({"n":[0,1,-1,18446744073709551615,9223372036854775807,-9223372036854775808]})",
      R"([18446744073709551616,-9223372036854775809,1e400,-1e400,1.5e-400])",  // past 64 bits
      R"([1.0,-0.0,1e2,1E+2,0.1,2.5e-3,123456789012345678901234567890.5])",
      R"(["\u00e9\ud83d\ude00","a\u0000b","\/\b\f\n\r\t\"\\"])",
      R"(["\ud800"])",
      R"(["\udc00x"])",
      R"(["\ud800\u0041"])",  // lone surrogates
      "[\"\xc3\xa9\"]",
      "[\"\xff\"]",
      "[\"\xc3\"]",
      "\xef\xbb\xbf{}",  // UTF-8, bad UTF-8, BOM
      "[\"a\x01\"]",
      "[\"tab\there\"]",  // control characters
      " \t\r\n{ } \n",
      "",
      " ",
      "{",
      "[1,]",
      "{\"a\":1,}",
      "01",
      "-",
      "1.",
      ".5",
      "+1",
      "1e",
      "[1] x",
      "[1] [2]",
      "nul",
      "true",
      "\"s\"",
      "-0",
      "[NaN]",
      "[Infinity]",
      "{'a':1}",
      "{\"a\" 1}",
      "[1 2]",
      "\"\\x41\"",
      "\"\\u12\"",
      deep,
  };
  // Past the size whose parser a thread keeps (256 KiB): a parser of its own, same answers.
  std::string big = "[";
  for (int i = 0; i < 40000; ++i) big += R"({"name":"c)" + std::to_string(i) + R"(","n":-1},)";
  const std::string big_texts[] = {big.substr(0, big.size() - 1) + "]", big + "]"};  // good, bad
  std::vector<std::string> all(std::begin(texts), std::end(texts));
  all.insert(all.end(), std::begin(big_texts), std::end(big_texts));
  for (const std::string& text : all) {
    auto ours = ParseJson(text, "t");
    Json theirs;
    bool theirs_ok = true;
    try {
      theirs = Json::parse(text);
    } catch (const Json::exception&) {
      theirs_ok = false;
    }
    ASSERT_EQ(ours.ok(), theirs_ok) << text.substr(0, 80) << ": " << ours.status();
    if (!theirs_ok) continue;
    EXPECT_EQ(*ours, theirs) << text.substr(0, 80);
    EXPECT_EQ(ours->dump(), theirs.dump()) << text.substr(0, 80);
    if (text != "-0") {
      EXPECT_EQ(ours->dump(-1, ' ', false, Json::error_handler_t::strict),
                theirs.dump(-1, ' ', false, Json::error_handler_t::strict));
      // Same kinds all the way down: a flattened dump tags nothing, so compare types leaf by leaf.
      if (!ours->is_structured()) {
        EXPECT_EQ(ours->type(), theirs.type()) << text;
      } else {
        const Json flat_ours = ours->flatten();
        const Json flat_theirs = theirs.flatten();
        for (auto it = flat_ours.begin(); it != flat_ours.end(); ++it) {
          EXPECT_EQ(it->type(), flat_theirs.at(it.key()).type()) << text.substr(0, 80) << it.key();
        }
      }
    }
  }
}

}  // namespace
}  // namespace wisp::k8s
