#include "wisp/k8s/objects.hpp"

#include <gtest/gtest.h>

namespace wisp::k8s {
namespace {

// Tests that readers treat missing or mistyped members as absent without inserting.
TEST(ObjectsTest, ReadersNeverThrowOrInsert) {
  const Json pod = Json::parse(
      R"({"metadata":{"annotations":{"a/b":"x","n":1},"labels":{"l":"v"}},"spec":{"x":[1]}})");
  EXPECT_EQ(Annotation(pod, "a/b"), "x");
  EXPECT_EQ(Annotation(pod, "n"), "");
  EXPECT_FALSE(FindAnnotation(pod, "missing").has_value());
  EXPECT_EQ(Label(pod, "l"), "v");
  EXPECT_EQ(Find(pod, {"spec", "x", "y"}), nullptr);
  EXPECT_EQ(GetArray(pod, {"spec", "containers"}).size(), 0u);
  EXPECT_EQ(GetString(pod, {"spec", "x"}, "d"), "d");
}

// Tests that editors create the intermediate members.
TEST(ObjectsTest, EditorsCreatePath) {
  Json pod = Json::object();
  EnsureArray(pod, {"spec", "volumes"}).push_back(1);
  EnsureObject(pod, {"metadata", "annotations"})["k"] = "v";
  EXPECT_EQ(pod, Json::parse(R"({"spec":{"volumes":[1]},"metadata":{"annotations":{"k":"v"}}})"));
}

// Tests that only the four GCSFuse spellings are booleans.
TEST(ObjectsTest, StrictBool) {
  EXPECT_EQ(ParseStrictBool("True"), true);
  EXPECT_EQ(ParseStrictBool("true"), true);
  EXPECT_EQ(ParseStrictBool("False"), false);
  EXPECT_EQ(ParseStrictBool("false"), false);
  for (const char* v : {"TRUE", "1", "yes", "", "t"}) EXPECT_FALSE(ParseStrictBool(v).has_value());
}

// Tests DNS-1123 subdomain validation.
TEST(ObjectsTest, Dns1123Subdomain) {
  EXPECT_TRUE(ValidateDns1123Subdomain("s3-reader").empty());
  EXPECT_TRUE(ValidateDns1123Subdomain("a.b").empty());
  EXPECT_EQ(ValidateDns1123Subdomain("Bad_Name").size(), 1u);
  EXPECT_EQ(ValidateDns1123Subdomain(std::string(254, 'a')).size(), 1u);
  EXPECT_EQ(Quote("a\"b"), "\"a\\\"b\"");
}

}  // namespace
}  // namespace wisp::k8s
