#include "upload.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "wisp/http/testing/fake_client.hpp"

namespace wisp::wispctl {
namespace {

using http::testing::FakeClient;

constexpr const char* kUrl = "https://gw:8443/v1/upload/v-1";

class PutFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = ::testing::TempDir() + "/wispctl-upload-" + std::to_string(::getpid()) + ".img";
    std::ofstream(file_, std::ios::binary) << content_;
  }
  void TearDown() override { std::filesystem::remove(file_); }

  PutRequest Request() const {
    PutRequest r;
    r.url = kUrl;
    r.file = file_;
    r.bearer_token = "upload-token";
    r.headers["X-Wisp-Sha256"] = "abc";
    r.finish_timeout = std::chrono::minutes(3);
    return r;
  }

  std::string file_;
  const std::string content_ = std::string(300 * 1024, 'q') + "end";
  FakeClient fake_;
};

// Tests that the file goes out as the PUT's streamed body (sized, after 100-continue), with the
// token, the extra headers and the finish timeout, and that progress reaches the total.
TEST_F(PutFileTest, StreamsTheFileWithTokenAndHeaders) {
  fake_.On("PUT", kUrl, FakeClient::Ok(R"({"phase":"Succeeded"})"));
  uint64_t last_sent = 0, last_total = 0;
  int calls = 0;
  auto r = PutFile(fake_, Request(), [&](uint64_t sent, uint64_t total) {
    EXPECT_GE(sent, last_sent);
    last_sent = sent;
    last_total = total;
    ++calls;
  });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, R"({"phase":"Succeeded"})");
  EXPECT_EQ(last_sent, content_.size());
  EXPECT_EQ(last_total, content_.size());
  EXPECT_GE(calls, 2);
  const auto requests = fake_.requests();
  ASSERT_EQ(requests.size(), 1u);
  const http::ClientRequest& req = requests[0];
  EXPECT_EQ(req.body, content_);
  EXPECT_EQ(req.body_size, content_.size());
  EXPECT_TRUE(req.expect_continue);
  EXPECT_EQ(req.bearer_token, "upload-token");
  EXPECT_EQ(req.response_timeout, std::chrono::minutes(3));
  std::map<std::string, std::string> headers(req.headers.begin(), req.headers.end());
  EXPECT_EQ(headers["Content-Type"], "application/octet-stream");
  EXPECT_EQ(headers["X-Wisp-Sha256"], "abc");
  EXPECT_EQ(headers.count("Authorization"), 0u);  // the client adds it from bearer_token
}

// Tests that a refusal is a result with the gateway's answer, and transport failures come back
// in the client's mapping.
TEST_F(PutFileTest, RefusalsAreResultsAndFailuresStatuses) {
  fake_.On("PUT", kUrl, FakeClient::Ok(R"({"error":"not an upload target"})", 409));
  auto refused = PutFile(fake_, Request(), [](uint64_t, uint64_t) {});
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(refused->status, 409);
  EXPECT_NE(refused->body.find("not an upload target"), std::string::npos);
  fake_.On("PUT", kUrl,
           absl::FailedPreconditionError("PUT https://gw:8443/v1/upload/v-1: TLS handshake with "
                                         "gw:8443 failed: certificate verify failed (x)"));
  auto tls = PutFile(fake_, Request(), [](uint64_t, uint64_t) {});
  ASSERT_FALSE(tls.ok());
  EXPECT_EQ(tls.status().code(), absl::StatusCode::kFailedPrecondition);
}

// Tests that a non-https gateway URL and an unreadable file are refused naming what is wrong,
// before anything is sent, and so is an unreadable CA file.
TEST_F(PutFileTest, RefusesBadArgumentsNamingThem) {
  PutRequest plain = Request();
  plain.url = "http://gw:8080/v1/upload/v-1";
  auto r = PutFile(fake_, plain, [](uint64_t, uint64_t) {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(r.status().message()).find("--gateway-url"), std::string::npos);
  PutRequest missing = Request();
  missing.file = file_ + ".nonexistent";
  r = PutFile(fake_, missing, [](uint64_t, uint64_t) {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("FILE"), std::string::npos);
  EXPECT_TRUE(fake_.requests().empty());
  auto client =
      NewUploadClient("/nonexistent/ca.pem", std::chrono::seconds(1), std::chrono::seconds(1));
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(client.status().message()).find("--ca-file"), std::string::npos)
      << client.status();
}

}  // namespace
}  // namespace wisp::wispctl
