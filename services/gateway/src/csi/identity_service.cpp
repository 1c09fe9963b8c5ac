#include "csi/identity_service.hpp"

#include "csi/grpc_call.hpp"
#include "csi/plugin.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/log/log.hpp"

#ifndef WISP_VERSION
#define WISP_VERSION "0.0.0"
#endif

namespace wisp::gateway::csi {

IdentityService::IdentityService(IdentityOptions options, bus::Bus& bus, CsiMetrics& metrics)
    : options_(std::move(options)), bus_(bus), metrics_(metrics), logger_(log::Get("csi")) {}

::csi::v1::GetPluginInfoResponse IdentityService::PluginInfo() const {
  ::csi::v1::GetPluginInfoResponse response;
  response.set_name(kDriverName);
  response.set_vendor_version(WISP_VERSION);
  return response;
}

::csi::v1::GetPluginCapabilitiesResponse IdentityService::PluginCapabilities() const {
  ::csi::v1::GetPluginCapabilitiesResponse response;
  if (options_.controller) {
    response.add_capabilities()->mutable_service()->set_type(
        ::csi::v1::PluginCapability::Service::CONTROLLER_SERVICE);
  }
  response.add_capabilities()->mutable_service()->set_type(
      ::csi::v1::PluginCapability::Service::VOLUME_ACCESSIBILITY_CONSTRAINTS);
  return response;
}

absl::Status IdentityService::Ready() {
  {
    std::lock_guard lock(mu_);
    if (std::chrono::steady_clock::now() < ready_until_) return absl::OkStatus();
  }
  if (bus_.State() != bus::ConnectionState::kConnected) {
    return absl::UnavailableError("bus is not connected");
  }
  for (const std::string& service : options_.needed_services) {
    const std::string subject = std::string(bus::subjects::kSrvPing) + "." + service;
    auto reply = bus_.Request(subject, "", options_.ping_timeout);
    if (!reply.ok()) {
      return absl::UnavailableError(service +
                                    " does not answer: " + std::string(reply.status().message()));
    }
  }
  std::lock_guard lock(mu_);
  ready_until_ = std::chrono::steady_clock::now() + options_.cache_for;
  return absl::OkStatus();
}

grpc::Status IdentityService::GetPluginInfo(grpc::ServerContext*,
                                            const ::csi::v1::GetPluginInfoRequest* request,
                                            ::csi::v1::GetPluginInfoResponse* response) {
  return Instrument(
      metrics_, logger_, "GetPluginInfo", "", *request, response,
      [&]() -> absl::StatusOr<::csi::v1::GetPluginInfoResponse> { return PluginInfo(); });
}

grpc::Status IdentityService::GetPluginCapabilities(
    grpc::ServerContext*, const ::csi::v1::GetPluginCapabilitiesRequest* request,
    ::csi::v1::GetPluginCapabilitiesResponse* response) {
  return Instrument(metrics_, logger_, "GetPluginCapabilities", "", *request, response,
                    [&]() -> absl::StatusOr<::csi::v1::GetPluginCapabilitiesResponse> {
                      return PluginCapabilities();
                    });
}

grpc::Status IdentityService::Probe(grpc::ServerContext*, const ::csi::v1::ProbeRequest* request,
                                    ::csi::v1::ProbeResponse* response) {
  return Instrument(metrics_, logger_, "Probe", "", *request, response,
                    [&]() -> absl::StatusOr<::csi::v1::ProbeResponse> {
                      ::csi::v1::ProbeResponse out;
                      absl::Status ready = Ready();
                      if (!ready.ok()) {
                        SPDLOG_LOGGER_INFO(logger_, "not ready: {}", std::string(ready.message()));
                      }
                      out.mutable_ready()->set_value(ready.ok());
                      return out;
                    });
}

}  // namespace wisp::gateway::csi
