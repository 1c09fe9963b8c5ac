#pragma once
// IdentityService: the CSI Identity service. GetPluginInfo answers csi.wisp.dev and wisp's
// version; GetPluginCapabilities offers CONTROLLER_SERVICE (when this gateway serves the
// controller role) and VOLUME_ACCESSIBILITY_CONSTRAINTS; Probe is ready only when the bus is
// connected and every service this role needs answers a NATS micro ping ($SRV.PING.<name>):
// wisp-token for the node role, wisp-populator for the controller role.
//
// Example:
//   IdentityService identity({.controller = true, .needed_services = {"wisp-token"}}, bus,
//   metrics);
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "csi/csi.grpc.pb.h"
#include "csi/csi_metrics.hpp"
#include "wisp/bus/bus.hpp"

namespace wisp::gateway::csi {

struct IdentityOptions {
  bool controller = false;                   // advertise CONTROLLER_SERVICE
  std::vector<std::string> needed_services;  // NATS micro service names that must answer
  std::chrono::milliseconds ping_timeout{1000};
  std::chrono::milliseconds cache_for{2000};  // a ready answer is reused this long
};

class IdentityService final : public ::csi::v1::Identity::Service {
 public:
  IdentityService(IdentityOptions options, bus::Bus& bus, CsiMetrics& metrics);

  ::csi::v1::GetPluginInfoResponse PluginInfo() const;
  ::csi::v1::GetPluginCapabilitiesResponse PluginCapabilities() const;
  // OK when ready; otherwise the reason (Unavailable).
  absl::Status Ready();

  grpc::Status GetPluginInfo(grpc::ServerContext* context,
                             const ::csi::v1::GetPluginInfoRequest* request,
                             ::csi::v1::GetPluginInfoResponse* response) override;
  grpc::Status GetPluginCapabilities(grpc::ServerContext* context,
                                     const ::csi::v1::GetPluginCapabilitiesRequest* request,
                                     ::csi::v1::GetPluginCapabilitiesResponse* response) override;
  grpc::Status Probe(grpc::ServerContext* context, const ::csi::v1::ProbeRequest* request,
                     ::csi::v1::ProbeResponse* response) override;

 private:
  IdentityOptions options_;
  bus::Bus& bus_;
  CsiMetrics& metrics_;
  std::shared_ptr<spdlog::logger> logger_;
  std::mutex mu_;
  std::chrono::steady_clock::time_point ready_until_{};
};

}  // namespace wisp::gateway::csi
