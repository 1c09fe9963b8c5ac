#include "wisp/metrics/metrics.hpp"

#include <gtest/gtest.h>

#include <utility>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace wisp::metrics {
namespace {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

std::pair<int, std::string> Get(uint16_t port, const std::string& target) {
  boost::asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  stream.connect({boost::asio::ip::make_address("127.0.0.1"), port});
  bhttp::request<bhttp::empty_body> req{bhttp::verb::get, target, 11};
  bhttp::write(stream, req);
  beast::flat_buffer buf;
  bhttp::response<bhttp::string_body> res;
  bhttp::read(stream, buf, res);
  return {static_cast<int>(res.result_int()), res.body()};
}

// Tests that /metrics renders registered metrics, build info and process metrics.
TEST(EndpointTest, ServesMetricsHealthAndReadiness) {
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildCounter()
      .Name("wisp_test_things_total")
      .Help("things")
      .Register(*registry)
      .Add({})
      .Increment(3);
  Endpoint endpoint(registry, "wisp-test");
  bool ready = false;
  endpoint.AddReadinessCheck(
      "bus", [&] { return ready ? absl::OkStatus() : absl::UnavailableError("not connected"); });
  ASSERT_TRUE(endpoint.Start("127.0.0.1:0").ok());
  auto [code, body] = Get(endpoint.port(), "/metrics");
  EXPECT_EQ(code, 200);
  EXPECT_NE(body.find("wisp_test_things_total 3"), std::string::npos) << body;
  EXPECT_NE(body.find("wisp_build_info{service=\"wisp-test\""), std::string::npos);
  EXPECT_NE(body.find("process_resident_memory_bytes"), std::string::npos);
  EXPECT_EQ(Get(endpoint.port(), "/healthz").first, 200);
  auto not_ready = Get(endpoint.port(), "/readyz");
  EXPECT_EQ(not_ready.first, 503);
  EXPECT_EQ(not_ready.second, "bus: not connected\n");
  ready = true;
  EXPECT_EQ(Get(endpoint.port(), "/readyz").first, 200);
}

// Tests that a malformed address is refused naming the setting.
TEST(EndpointTest, RejectsBadAddress) {
  Endpoint endpoint(std::make_shared<prometheus::Registry>(), "wisp-test");
  for (const char* bad : {"9090", "host:", "host:99999", "host:abc"}) {
    SCOPED_TRACE(bad);
    auto s = endpoint.Start(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(s.message()).find("metrics-address"), std::string::npos);
  }
}

}  // namespace
}  // namespace wisp::metrics
