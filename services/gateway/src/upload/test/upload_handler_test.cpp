#include "upload/upload_handler.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/bus/testing/in_memory_bus.hpp"
#include "wisp/status/fake_clock.hpp"
#include "wisp/v1/volume.pb.h"

namespace wisp::gateway::upload {
namespace {

namespace subjects = bus::subjects;
constexpr char kId[] = "v-0123456789abcdef01234567";

class FakeVerifier final : public TokenVerifier {
 public:
  absl::StatusOr<jwt::UploadGrant> Verify(std::string_view token) override {
    if (token.substr(0, 3) != "ok:") return absl::UnauthenticatedError("token expired");
    return jwt::UploadGrant{.volume_id = std::string(token.substr(3))};
  }
};

// A body served from a string in small reads, failing after `fail_after` bytes when set.
class FakeBody final : public http::BodyReader {
 public:
  explicit FakeBody(std::string data, std::optional<size_t> fail_after = {})
      : data_(std::move(data)), fail_after_(fail_after) {}
  absl::StatusOr<size_t> Read(char* buf, size_t n) override {
    if (fail_after_ && pos_ >= *fail_after_) {
      return absl::UnavailableError("the client closed the connection");
    }
    size_t take = std::min({n, data_.size() - pos_, size_t{1000}});
    std::memcpy(buf, data_.data() + pos_, take);
    pos_ += take;
    return take;
  }
  std::optional<uint64_t> content_length() const override { return data_.size(); }
  uint64_t bytes_read() const override { return pos_; }

 private:
  std::string data_;
  std::optional<size_t> fail_after_;
  size_t pos_ = 0;
};

class UploadHandlerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    volume_.set_volume_id(kId);
    volume_.mutable_spec()->set_name("disk");
    volume_.mutable_spec()->set_node("node-a");
    volume_.mutable_spec()->set_capacity_bytes(1 << 20);
    volume_.mutable_spec()->mutable_source()->mutable_upload();
    volume_.set_phase(v1::UPLOAD_READY);
    subs_.push_back(*bus_.Serve(subjects::kVolumeGet, "", [this](const bus::Request& r) {
      auto req = bus::ParseBody<v1::GetVolumeRequest>(r);
      if (req->volume_id() != kId && req->name() != "disk") {
        return bus::Reply::Error(absl::NotFoundError("volume not found"));
      }
      v1::GetVolumeResponse resp;
      *resp.mutable_volume() = volume_;
      return bus::ProtoReply(resp);
    }));
    subs_.push_back(*bus_.Serve(subjects::Node("node-a", subjects::kNodeUploadOpen), "",
                                [this](const bus::Request& r) {
                                  auto req = bus::ParseBody<v1::UploadOpenRequest>(r);
                                  total_ = req->total_bytes();
                                  v1::UploadOpenResponse resp;
                                  resp.set_session_id("s1");
                                  resp.set_chunk_subject("chunks");
                                  resp.set_max_chunk_bytes(4096);
                                  return bus::ProtoReply(resp);
                                }));
    subs_.push_back(*bus_.Serve("chunks", "", [this](const bus::Request& r) {
      auto c = bus::ParseBody<v1::UploadChunk>(r);
      if (c->abort()) {
        aborted_ = c->abort_reason();
        return bus::ProtoReply(v1::UploadChunkResponse());
      }
      EXPECT_EQ(c->seq(), static_cast<int64_t>(chunks_.size()));
      chunks_.push_back(c->data());
      v1::UploadChunkResponse resp;
      if (c->last()) {
        *resp.mutable_volume() = volume_;
        resp.mutable_volume()->set_phase(v1::SUCCEEDED);
        resp.mutable_volume()->set_format("raw");
      }
      return bus::ProtoReply(resp);
    }));
  }

  http::Response Put(const std::string& path, const std::string& token, FakeBody& body) {
    http::Request r;
    r.method = "PUT";
    r.path = path;
    r.remote = "10.0.0.1";
    if (!token.empty()) r.headers["authorization"] = "Bearer " + token;
    return handler_.Handle(r, body);
  }

  FakeClock clock_;
  bus::testing::InMemoryBus bus_{clock_};
  std::vector<bus::SubscriptionPtr> subs_;
  FakeVerifier verifier_;
  prometheus::Registry registry_;
  UploadHandler handler_{bus_, verifier_, registry_, clock_, {}};
  v1::VolumeStatus volume_;
  std::vector<std::string> chunks_;
  std::optional<std::string> aborted_;
  int64_t total_ = 0;
};

// Tests that a body arrives at the populator in order, in chunks of its size, and the answer
// carries the volume.
TEST_F(UploadHandlerTest, StreamsBodyInChunks) {
  std::string data(10000, 'x');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i);
  FakeBody body(data);
  auto r = Put("/v1/upload/disk", std::string("ok:") + kId, body);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find("\"phase\":\"SUCCEEDED\""), std::string::npos) << r.body;
  ASSERT_EQ(chunks_.size(), 3u);
  EXPECT_EQ(chunks_[0].size(), 4096u);
  EXPECT_EQ(chunks_[0] + chunks_[1] + chunks_[2], data);
  EXPECT_EQ(total_, 10000);
  EXPECT_FALSE(aborted_);
}

// Tests each refusal: bad path, no token, bad token, token for another volume, unknown volume,
// a volume that is no upload target, a body larger than the volume.
TEST_F(UploadHandlerTest, RefusesWithStatusAndMessage) {
  FakeBody body("abc");
  struct Case {
    std::string path, token;
    int status;
    std::string message;
  } cases[] = {
      {"/v1/upload/../x", "ok:x", 400, "path"},
      {"/v1/upload/disk", "", 401, "missing upload token"},
      {"/v1/upload/disk", "bad", 401, "token expired"},
      {"/v1/upload/disk", "ok:v-ffffffffffffffffffffffff", 403, "is for volume v-fff"},
      {"/v1/upload/nope", "ok:x", 404, "volume nope not found"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.path + " " + c.token);
    auto r = Put(c.path, c.token, body);
    EXPECT_EQ(r.status, c.status) << r.body;
    EXPECT_NE(r.body.find(c.message), std::string::npos) << r.body;
  }
  volume_.mutable_spec()->mutable_source()->mutable_blank();
  auto r = Put("/v1/upload/disk", std::string("ok:") + kId, body);
  EXPECT_EQ(r.status, 409) << r.body;
  EXPECT_NE(r.body.find("not an upload target"), std::string::npos);
  volume_.mutable_spec()->mutable_source()->mutable_upload();
  FakeBody big(std::string((1 << 20) + (17 << 20), 'x'));
  r = Put("/v1/upload/disk", std::string("ok:") + kId, big);
  EXPECT_EQ(r.status, 413) << r.body;
  EXPECT_TRUE(chunks_.empty());
}

// Tests that a client that goes away mid-body makes the gateway abort the session.
TEST_F(UploadHandlerTest, AbortsWhenTheClientGoesAway) {
  FakeBody body(std::string(20000, 'x'), 9000);
  auto r = Put("/v1/upload/" + std::string(kId), std::string("ok:") + kId, body);
  EXPECT_EQ(r.status, 400) << r.body;
  ASSERT_TRUE(aborted_.has_value());
  EXPECT_NE(aborted_->find("closed the connection"), std::string::npos);
  EXPECT_EQ(chunks_.size(), 2u);
}

}  // namespace
}  // namespace wisp::gateway::upload
