#include "wisp/http/testing/fake_client.hpp"

#include <gtest/gtest.h>

namespace wisp::http::testing {
namespace {

// Tests that the fake answers what was registered, records requests (bodies drained), and
// refuses what was not.
TEST(FakeClientTest, AnswersRegisteredRequestsAndRecordsThem) {
  FakeClient fake;
  fake.On("GET", "https://idp/keys", FakeClient::Ok("{}"));
  fake.On("POST", "https://sts/token", absl::UnavailableError("POST https://sts/token: down"));
  fake.On("GET", "https://idp/gone?x=1", FakeClient::Ok("", 404));
  auto ok = fake.Send({.url = "https://idp/keys"});
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->body, "{}");
  EXPECT_EQ(ok->url, "https://idp/keys");
  EXPECT_EQ(ok->method, "GET");
  // Addressed as the real client does, so StatusOf names the (redacted) URL.
  auto gone = fake.Send({.url = "https://idp/gone?x=1"});
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ(StatusOf(*gone).message(), "HTTP 404 from https://idp/gone");
  EXPECT_EQ(fake.Send({.method = "POST", .url = "https://sts/token"}).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(fake.Send({.url = "https://else/"}).status().code(), absl::StatusCode::kUnimplemented);
  ClientRequest put{.method = "PUT", .url = "https://up/x"};
  bool once = false;
  put.body_reader = [&](char* buf, size_t) -> absl::StatusOr<size_t> {
    if (once) return 0;
    once = true;
    buf[0] = 'z';
    return 1;
  };
  (void)fake.Send(put);
  auto seen = fake.requests();
  ASSERT_EQ(seen.size(), 5u);
  EXPECT_EQ(seen[4].body, "z");
}

// Tests that Open() yields the chunks as lines and then the registered end.
TEST(FakeClientTest, StreamsChunksThenTheEnd) {
  FakeClient fake;
  fake.On("GET", "https://api/watch",
          FakeClient::Answer{
              FakeClient::Ok(""), {"{\"a\":1}\n{\"b\"", ":2}\n"}, absl::UnavailableError("cut")});
  auto s = fake.Open({.url = "https://api/watch"});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*(*s)->ReadLine(), "{\"a\":1}");
  EXPECT_EQ(*(*s)->ReadLine(), "{\"b\":2}");
  EXPECT_EQ((*s)->ReadLine().status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace wisp::http::testing
