#pragma once
// ControllerService: the CSI Controller service of wisp-gateway (role controller or both). Volumes
// are wisp-populator's: CreateVolume, DeleteVolume, ListVolumes and ValidateVolumeCapabilities go
// over the bus (wisp.v1.volume.*, proto/wisp/v1/volume.proto); GetCapacity asks the chosen node's
// gateway (wisp.v1.node.<node>.csi.capacity).
//
// Contract:
//   - CreateVolume picks the node from accessibility_requirements (preferred first, then
//     requisite; segment topology.wisp.dev/node), or options.default_node when there are none; it
//     is idempotent by name (an existing volume whose capacity does not fit the request is
//     AlreadyExists) and answers only once the volume is ready (phase SUCCEEDED), within the
//     caller's deadline. With `events` (wisp-populator's wisp.v1.events.volume.<id>, one
//     subscription for all waits) it answers as soon as the populator reports the volume done;
//     it also reads the volume every poll_interval, as events are best effort. Without events it
//     reads the volume at growing intervals (10 ms at first, at most poll_interval).
//   - DeleteVolume of an unknown volume is OK. An invalid ListVolumes starting_token is Aborted.
//   - A PVC's volume gets the CA bundle its recorded source names (certConfigMap) from
//     options.read_source_ca, when set, in VolumeSpec.source_ca.
//   - Only mount access to node-local volumes is offered: block access and multi-node access
//     modes are refused.
//
// Example:
//   ControllerService controller({.default_node = "node-a"}, bus, clock, metrics);
//   builder.RegisterService(&controller);
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "csi/csi.grpc.pb.h"
#include "csi/csi_metrics.hpp"
#include "csi/source_ca_reader.hpp"
#include "wisp/bus/bus.hpp"
#include "wisp/status/clock.hpp"
#include "wisp/v1/volume.pb.h"

namespace wisp::gateway::csi {

struct ControllerOptions {
  std::string default_node;  // used when CreateVolume carries no accessibility requirements
  int64_t default_capacity_bytes = int64_t{1} << 30;
  std::chrono::milliseconds bus_timeout{5000};
  std::chrono::milliseconds create_timeout{std::chrono::minutes(10)};  // cap on waiting for ready
  // The most between two reads of a waited-for volume (with events: between any two).
  std::chrono::milliseconds poll_interval{200};
  // Set when the gateway reads the apiserver (--in-cluster / --kubeconfig): CreateVolume of a PVC
  // (external-provisioner's --extra-create-metadata) carries the CA bundle its source names, and
  // an error reading it (a ConfigMap not there yet: Unavailable) fails the call, to be retried.
  SourceCaReader read_source_ca;
};

// Checks capabilities for node-local mount volumes; the message names the field.
absl::Status CheckVolumeCapabilities(
    const google::protobuf::RepeatedPtrField<::csi::v1::VolumeCapability>& caps,
    const std::string& field);

class ControllerService final : public ::csi::v1::Controller::Service {
 public:
  // `events`, when set, must outlive the service; without it, CreateVolume polls alone.
  ControllerService(ControllerOptions options, bus::Requester& requester, const Clock& clock,
                    CsiMetrics& metrics, bus::Subscriber* events = nullptr);
  ~ControllerService() override;

  // ---- Logic (budget: the time left before the caller's deadline) ----
  absl::StatusOr<::csi::v1::CreateVolumeResponse> Create(const ::csi::v1::CreateVolumeRequest& req,
                                                         std::chrono::milliseconds budget);
  absl::StatusOr<::csi::v1::DeleteVolumeResponse> Delete(const ::csi::v1::DeleteVolumeRequest& req,
                                                         std::chrono::milliseconds budget);
  absl::StatusOr<::csi::v1::ValidateVolumeCapabilitiesResponse> Validate(
      const ::csi::v1::ValidateVolumeCapabilitiesRequest& req, std::chrono::milliseconds budget);
  absl::StatusOr<::csi::v1::ListVolumesResponse> List(const ::csi::v1::ListVolumesRequest& req,
                                                      std::chrono::milliseconds budget);
  absl::StatusOr<::csi::v1::GetCapacityResponse> Capacity(const ::csi::v1::GetCapacityRequest& req,
                                                          std::chrono::milliseconds budget);
  ::csi::v1::ControllerGetCapabilitiesResponse Capabilities() const;

  // ---- gRPC ----
  grpc::Status CreateVolume(grpc::ServerContext* context, const ::csi::v1::CreateVolumeRequest* req,
                            ::csi::v1::CreateVolumeResponse* resp) override;
  grpc::Status DeleteVolume(grpc::ServerContext* context, const ::csi::v1::DeleteVolumeRequest* req,
                            ::csi::v1::DeleteVolumeResponse* resp) override;
  grpc::Status ValidateVolumeCapabilities(
      grpc::ServerContext* context, const ::csi::v1::ValidateVolumeCapabilitiesRequest* req,
      ::csi::v1::ValidateVolumeCapabilitiesResponse* resp) override;
  grpc::Status ListVolumes(grpc::ServerContext* context, const ::csi::v1::ListVolumesRequest* req,
                           ::csi::v1::ListVolumesResponse* resp) override;
  grpc::Status GetCapacity(grpc::ServerContext* context, const ::csi::v1::GetCapacityRequest* req,
                           ::csi::v1::GetCapacityResponse* resp) override;
  grpc::Status ControllerGetCapabilities(
      grpc::ServerContext* context, const ::csi::v1::ControllerGetCapabilitiesRequest* req,
      ::csi::v1::ControllerGetCapabilitiesResponse* resp) override;

 private:
  absl::StatusOr<std::string> ChooseNode(const ::csi::v1::CreateVolumeRequest& req) const;
  absl::StatusOr<v1::VolumeStatus> WaitReady(v1::VolumeStatus volume,
                                             std::chrono::steady_clock::time_point deadline);
  ::csi::v1::Volume ToCsi(const v1::VolumeStatus& volume) const;

  // Waits of CreateVolume by volume id, woken when the populator reports the volume done.
  struct Waiter {
    int users = 0;
    uint64_t done_events = 0;  // events with a terminal phase seen for the volume
    std::condition_variable cv;
  };
  std::shared_ptr<Waiter> Register(const std::string& volume_id);
  void Unregister(const std::string& volume_id);
  void OnVolumeEvent(const bus::Message& message);

  ControllerOptions options_;
  bus::Requester& requester_;
  bus::Subscriber* events_;
  std::mutex waiters_mu_;
  bus::SubscriptionPtr events_sub_;  // subscribed at the first wait; guarded by waiters_mu_
  std::unordered_map<std::string, std::shared_ptr<Waiter>> waiters_;
  const Clock& clock_;
  CsiMetrics& metrics_;
  std::shared_ptr<spdlog::logger> logger_;
};

}  // namespace wisp::gateway::csi
