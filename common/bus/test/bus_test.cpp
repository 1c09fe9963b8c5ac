#include "wisp/bus/bus.hpp"

#include <gtest/gtest.h>

namespace wisp::bus {
namespace {

using namespace std::chrono_literals;

// Tests that every non-OK code survives SetErrorHeaders -> StatusFromHeaders unchanged.
TEST(BusHeadersTest, ErrorHeadersRoundTripEveryCode) {
  for (int c = 1; c <= 16; ++c) {
    SCOPED_TRACE(c);
    const absl::Status in(static_cast<absl::StatusCode>(c), "boom " + std::to_string(c));
    Headers h;
    SetErrorHeaders(in, h);
    EXPECT_EQ(h[std::string(kHeaderErrorCode)], std::to_string(c));
    EXPECT_EQ(StatusFromHeaders(h), in);
  }
}

// Tests that an OK status sets no headers and no headers read as OK.
TEST(BusHeadersTest, OkHasNoHeaders) {
  Headers h;
  SetErrorHeaders(absl::OkStatus(), h);
  EXPECT_TRUE(h.empty());
  EXPECT_TRUE(StatusFromHeaders(h).ok());
}

// Tests that foreign or partial micro error headers still read as an error.
TEST(BusHeadersTest, ForeignCodesReadAsUnknown) {
  EXPECT_EQ(StatusFromHeaders({{"Nats-Service-Error-Code", "500"}, {"Nats-Service-Error", "x"}}),
            absl::UnknownError("x"));
  EXPECT_EQ(StatusFromHeaders({{"Nats-Service-Error", "only message"}}),
            absl::UnknownError("only message"));
  EXPECT_EQ(StatusFromHeaders({{"Nats-Service-Error-Code", "NOT_FOUND"}}).code(),
            absl::StatusCode::kNotFound);
}

// Tests that a multi-line message is flattened into one header line.
TEST(BusHeadersTest, MessageNewlinesAreFlattened) {
  Headers h;
  SetErrorHeaders(absl::InternalError("a\r\nb"), h);
  EXPECT_EQ(h[std::string(kHeaderError)], "a  b");
}

// Tests NATS wildcard matching.
TEST(SubjectMatchesTest, Wildcards) {
  struct Case {
    const char* pattern;
    const char* subject;
    bool match;
  } cases[] = {
      {"a.b", "a.b", true},
      {"a.b", "a.c", false},
      {"a.*", "a.b", true},
      {"a.*", "a.b.c", false},
      {"a.>", "a.b.c", true},
      {"a.>", "a", false},
      {">", "a", true},
      {"*.b", "a.b", true},
      {"a.b.c", "a.b", false},
      {"a.b", "a.b.c", false},
      {"$SRV.PING", "$SRV.PING", true},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(c.pattern) + " ~ " + c.subject);
    EXPECT_EQ(SubjectMatches(c.pattern, c.subject), c.match);
  }
}

// Tests that ServeRequest passes the deadline and request id to the handler.
TEST(ServeRequestTest, PassesDeadlineAndRequestId) {
  Message msg{"s", "r", "body", {{"Wisp-Timeout-Ms", "5000"}, {"Wisp-Request-Id", "rid-1"}}};
  const auto received = std::chrono::steady_clock::now();
  Reply reply = ServeRequest(
      [&](const Request& req) {
        EXPECT_EQ(req.deadline, received + 5000ms);
        EXPECT_EQ(req.request_id, "rid-1");
        EXPECT_EQ(req.msg.data, "body");
        EXPECT_FALSE(req.Expired());
        EXPECT_GT(req.Remaining(), 4000ms);
        return Reply::Ok("ok");
      },
      msg, received);
  EXPECT_TRUE(reply.status.ok());
  EXPECT_EQ(reply.data, "ok");
  EXPECT_TRUE(reply.headers.empty());
}

// Tests that an expired request is answered DeadlineExceeded without calling the handler.
TEST(ServeRequestTest, ExpiredRequestSkipsHandler) {
  Message msg{"s", "r", "", {{"Wisp-Timeout-Ms", "10"}}};
  bool called = false;
  Reply reply = ServeRequest(
      [&](const Request&) {
        called = true;
        return Reply::Ok("");
      },
      msg, std::chrono::steady_clock::now() - 1s);
  EXPECT_FALSE(called);
  EXPECT_EQ(reply.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(StatusFromHeaders(reply.headers).code(), absl::StatusCode::kDeadlineExceeded);
}

// Tests that a malformed timeout header is InvalidArgument naming the header.
TEST(ServeRequestTest, MalformedTimeoutIsInvalidArgument) {
  for (const char* bad : {"", "-1", "12x", "abc"}) {
    SCOPED_TRACE(bad);
    Message msg{"s", "r", "", {{"Wisp-Timeout-Ms", bad}}};
    Reply reply = ServeRequest([](const Request&) { return Reply::Ok(""); }, msg,
                               std::chrono::steady_clock::now());
    EXPECT_EQ(reply.status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(reply.status.message()).find("Wisp-Timeout-Ms"), std::string::npos);
  }
}

// Tests that a request without a timeout header never expires and handler errors get headers.
TEST(ServeRequestTest, NoTimeoutHeaderAndErrorHeaders) {
  Message msg{"s", "r", "", {}};
  Reply reply = ServeRequest(
      [](const Request& req) {
        EXPECT_EQ(req.deadline, std::chrono::steady_clock::time_point::max());
        EXPECT_EQ(req.Remaining(), std::chrono::milliseconds::max());
        return Reply::Error(absl::PermissionDeniedError("no"));
      },
      msg, std::chrono::steady_clock::now());
  EXPECT_EQ(StatusFromHeaders(reply.headers), absl::PermissionDeniedError("no"));
}

}  // namespace
}  // namespace wisp::bus
