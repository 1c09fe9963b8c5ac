#include "csi/identity_service.hpp"

#include <gtest/gtest.h>

#include "csi/csi_metrics.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/bus/testing/in_memory_bus.hpp"
#include "wisp/status/fake_clock.hpp"

namespace wisp::gateway::csi {
namespace {

class IdentityServiceTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  bus::testing::InMemoryBus bus_{clock_};
  prometheus::Registry registry_;
  CsiMetrics metrics_{registry_};
};

// Tests the plugin name, version and capabilities for each role.
TEST_F(IdentityServiceTest, PluginInfoAndCapabilities) {
  IdentityService node({.controller = false}, bus_, metrics_);
  EXPECT_EQ(node.PluginInfo().name(), "csi.wisp.dev");
  EXPECT_FALSE(node.PluginInfo().vendor_version().empty());
  ASSERT_EQ(node.PluginCapabilities().capabilities_size(), 1);
  EXPECT_EQ(node.PluginCapabilities().capabilities(0).service().type(),
            ::csi::v1::PluginCapability::Service::VOLUME_ACCESSIBILITY_CONSTRAINTS);
  IdentityService both({.controller = true}, bus_, metrics_);
  ASSERT_EQ(both.PluginCapabilities().capabilities_size(), 2);
  EXPECT_EQ(both.PluginCapabilities().capabilities(0).service().type(),
            ::csi::v1::PluginCapability::Service::CONTROLLER_SERVICE);
}

// Tests that Probe is ready only while the bus is up and the needed service answers its ping.
TEST_F(IdentityServiceTest, ProbeNeedsBusAndServices) {
  IdentityOptions options;
  options.needed_services = {"wisp-token"};
  options.cache_for = std::chrono::milliseconds(0);
  IdentityService identity(options, bus_, metrics_);
  EXPECT_EQ(identity.Ready().code(), absl::StatusCode::kUnavailable);
  auto sub = *bus_.Serve(std::string(bus::subjects::kSrvPing) + ".wisp-token", "",
                         [](const bus::Request&) { return bus::Reply::Ok("{}"); });
  EXPECT_TRUE(identity.Ready().ok());
  bus_.SetConnected(false);
  EXPECT_EQ(identity.Ready().code(), absl::StatusCode::kUnavailable);
  bus_.SetConnected(true);
  ::csi::v1::ProbeRequest req;
  ::csi::v1::ProbeResponse resp;
  grpc::ServerContext ctx;
  ASSERT_TRUE(identity.Probe(&ctx, &req, &resp).ok());
  EXPECT_TRUE(resp.ready().value());
}

}  // namespace
}  // namespace wisp::gateway::csi
