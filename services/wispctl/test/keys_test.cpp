#include "keys.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace wisp::wispctl {
namespace {

v1::KeyAdminResponse Sample() {
  v1::KeyAdminResponse r;
  r.set_rotation_period_seconds(86400);
  r.set_publish_ahead_seconds(43200);
  v1::KeyStatus* active = r.add_keys();
  active->set_kid("active-kid");
  active->set_algorithm("RS256");
  active->set_state("active");
  active->set_created_unix(1796169600);  // 2026-12-02T00:00:00Z
  active->set_activated_unix(1796169600);
  v1::KeyStatus* retired = r.add_keys();
  retired->set_kid("tainted-kid");
  retired->set_algorithm("ES256");
  retired->set_state("retired");
  retired->set_tainted(true);
  retired->set_created_unix(1796083200);
  retired->set_activated_unix(1796083200);
  retired->set_retired_unix(1796169600);
  retired->set_published_until_unix(1796177100);  // 2026-12-02T02:05:00Z
  return r;
}

// Tests that each verb builds its request, and that bad usage names what is wrong.
TEST(KeysTest, RequestsForEachVerb) {
  EXPECT_EQ(KeyAdminRequestFor("list", {}, "")->action(), v1::KeyAdminRequest::LIST);
  auto rotate = KeyAdminRequestFor("rotate", {}, "ES256");
  ASSERT_TRUE(rotate.ok());
  EXPECT_EQ(rotate->action(), v1::KeyAdminRequest::ROTATE);
  EXPECT_EQ(rotate->algorithm(), "ES256");
  auto taint = KeyAdminRequestFor("taint", {"abc"}, "");
  ASSERT_TRUE(taint.ok());
  EXPECT_EQ(taint->action(), v1::KeyAdminRequest::TAINT);
  EXPECT_EQ(taint->kid(), "abc");
  EXPECT_EQ(KeyAdminRequestFor("revoke", {"abc"}, "")->action(), v1::KeyAdminRequest::REVOKE);

  EXPECT_EQ(KeyAdminRequestFor("revoke", {}, "").status().message(),
            "KID: required (wispctl keys list shows the kids)");
  EXPECT_EQ(KeyAdminRequestFor("taint", {"a", "b"}, "").status().message(),
            "KID: one key at a time (got 2)");
  EXPECT_EQ(KeyAdminRequestFor("rotate", {}, "HS256").status().message(),
            "algorithm: \"HS256\" is not RS256 or ES256");
  EXPECT_EQ(KeyAdminRequestFor("taint", {"a"}, "RS256").status().message(),
            "algorithm: only rotate takes it");
  EXPECT_EQ(KeyAdminRequestFor("list", {"extra"}, "").status().message(),
            "unexpected argument \"extra\"");
  EXPECT_EQ(KeyAdminRequestFor("delete", {}, "").status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Tests that the table shows each key's state, taint and times, and the schedule.
TEST(KeysTest, TableShowsStatesAndTimes) {
  const std::string table = FormatKeys(Sample());
  EXPECT_NE(table.find("active-kid"), std::string::npos) << table;
  EXPECT_NE(table.find("tainted-kid"), std::string::npos);
  EXPECT_NE(table.find("yes"), std::string::npos);
  EXPECT_NE(table.find("2026-12-02T02:05:00Z"), std::string::npos) << table;
  EXPECT_NE(table.find("2 keys published; each key signs for 86400 s, and the next one is "
                       "published 43200 s before it signs"),
            std::string::npos)
      << table;
}

// Tests that the JSON form carries the same facts and the message of a change.
TEST(KeysTest, JsonCarriesKeysAndMessage) {
  auto r = Sample();
  r.set_message("key tainted-kid (ES256, active) tainted");
  auto doc = nlohmann::json::parse(FormatKeysJson(r));
  EXPECT_EQ(doc["message"], r.message());
  ASSERT_EQ(doc["keys"].size(), 2u);
  EXPECT_EQ(doc["keys"][1]["tainted"], true);
  EXPECT_EQ(doc["keys"][1]["published_until_unix"], 1796177100);
  EXPECT_EQ(doc["publish_ahead_seconds"], 43200);
}

}  // namespace
}  // namespace wisp::wispctl
