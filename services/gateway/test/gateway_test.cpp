#include "gateway.hpp"

#include <gtest/gtest.h>

namespace wisp::gateway {
namespace {

GatewaySettings Valid() {
  GatewaySettings s;
  s.tls_cert = "/etc/wisp/tls.crt";
  s.tls_key = "/etc/wisp/tls.key";
  s.node_name = "node-a";
  return s;
}

// Tests that each invalid combination names the setting that is wrong.
TEST(GatewaySettingsTest, RejectsInvalidSettingsNamingThem) {
  EXPECT_TRUE(ValidateGatewaySettings(Valid()).ok());
  struct Case {
    std::function<void(GatewaySettings&)> mutate;
    std::string want;
  };
  std::vector<Case> cases = {
      {[](GatewaySettings& s) { s.tls_cert.clear(); }, "tls-cert: required with --tls-key"},
      {[](GatewaySettings& s) {
         s.tls_cert.clear();
         s.tls_key.clear();
       },
       "tls-cert: required"},
      {[](GatewaySettings& s) { s.listen_address.clear(); }, "listen-address: empty"},
      {[](GatewaySettings& s) { s.listen_address = "8443"; }, "listen-address"},
      {[](GatewaySettings& s) { s.listen_address = "0.0.0.0:99999"; }, "listen-address"},
      {[](GatewaySettings& s) { s.csi_endpoint = "/run/csi.sock"; }, "csi-endpoint"},
      {[](GatewaySettings& s) { s.node_name.clear(); }, "node-name: required"},
  };
  // A node-only gateway needs no certificate.
  auto node_only = Valid();
  node_only.listen_address.clear();
  node_only.tls_cert.clear();
  node_only.tls_key.clear();
  node_only.csi_endpoint = "unix:///run/wisp/csi.sock";
  EXPECT_TRUE(ValidateGatewaySettings(node_only).ok());
  for (const auto& c : cases) {
    SCOPED_TRACE(c.want);
    auto s = Valid();
    c.mutate(s);
    auto st = ValidateGatewaySettings(s);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(st.message()).rfind(c.want, 0), 0u) << st.message();
  }
}

}  // namespace
}  // namespace wisp::gateway
