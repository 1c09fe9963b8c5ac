#include "csi/node_service.hpp"

#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>

#include "csi/grpc_call.hpp"
#include "csi/strip_secrets.hpp"
#include "wisp/fsutil/path_safety.hpp"
#include "wisp/log/log.hpp"

namespace wisp::gateway::csi {
using ::csi::v1::VolumeCapability;

namespace {

absl::Status CheckCapability(const ::csi::v1::NodePublishVolumeRequest& request) {
  if (!request.has_volume_capability()) {
    return absl::InvalidArgumentError("volume_capability is required");
  }
  const VolumeCapability& cap = request.volume_capability();
  if (cap.has_block() && IsEphemeral(request.volume_context())) {
    return absl::InvalidArgumentError(
        "volume_capability: block access is not supported for an inline token volume");
  }
  if (!cap.has_mount() && !cap.has_block()) {
    return absl::InvalidArgumentError("volume_capability: access_type mount or block is required");
  }
  if (!cap.has_access_mode() || cap.access_mode().mode() == VolumeCapability::AccessMode::UNKNOWN) {
    return absl::InvalidArgumentError("volume_capability.access_mode is required");
  }
  return absl::OkStatus();
}

bool ReadOnlyMode(const VolumeCapability& cap) {
  const auto mode = cap.access_mode().mode();
  return mode == VolumeCapability::AccessMode::SINGLE_NODE_READER_ONLY ||
         mode == VolumeCapability::AccessMode::MULTI_NODE_READER_ONLY;
}

}  // namespace

NodeService::NodeService(NodeOptions options, bus::Requester& requester, TokenIssuer& issuer,
                         ProjectionStore& store, fsutil::Mounter& mounter, const Clock& clock,
                         CsiMetrics& metrics)
    : options_(std::move(options)),
      metrics_(metrics),
      logger_(log::Get("csi-node")),
      tokens_(options_, issuer, store, mounter, clock, metrics, locks_),
      binds_(options_, requester, mounter) {}

NodeService::~NodeService() { StopRotation(); }

absl::Status NodeService::Recover() { return tokens_.Recover(); }

absl::Status NodeService::RotateNow(const std::string& volume_id) {
  return tokens_.RotateNow(volume_id);
}

void NodeService::RotateDue(const std::vector<std::string>& volume_ids) {
  tokens_.RotateDue(volume_ids);
}

// ---- NodePublishVolume, NodeUnpublishVolume ---------------------------------------------------

absl::StatusOr<::csi::v1::NodePublishVolumeResponse> NodeService::Publish(
    const ::csi::v1::NodePublishVolumeRequest& request, std::chrono::milliseconds budget) {
  if (request.volume_id().empty()) return absl::InvalidArgumentError("volume_id is required");
  if (request.target_path().empty()) return absl::InvalidArgumentError("target_path is required");
  WISP_RETURN_IF_ERROR(CheckCapability(request));
  WISP_RETURN_IF_ERROR(
      fsutil::CheckPathUnder("target_path", request.target_path(), options_.target_roots));
  if (!request.staging_target_path().empty()) {
    WISP_RETURN_IF_ERROR(fsutil::CheckPathUnder(
        "staging_target_path", request.staging_target_path(), options_.target_roots));
  }
  std::lock_guard volume_lock(locks_.For(request.volume_id()));
  if (IsEphemeral(request.volume_context())) {
    WISP_RETURN_IF_ERROR(tokens_.Publish(request));
  } else {
    const bool read_only = request.readonly() || ReadOnlyMode(request.volume_capability());
    if (budget.count() <= 0) budget = options_.bus_timeout;
    WISP_RETURN_IF_ERROR(binds_.Publish(request, read_only, budget));
  }
  return ::csi::v1::NodePublishVolumeResponse();
}

absl::StatusOr<::csi::v1::NodeUnpublishVolumeResponse> NodeService::Unpublish(
    const ::csi::v1::NodeUnpublishVolumeRequest& request) {
  if (request.volume_id().empty()) return absl::InvalidArgumentError("volume_id is required");
  if (request.target_path().empty()) return absl::InvalidArgumentError("target_path is required");
  WISP_RETURN_IF_ERROR(
      fsutil::CheckPathUnder("target_path", request.target_path(), options_.target_roots));
  const std::string& id = request.volume_id();
  const std::string target = fsutil::CleanPath(request.target_path());
  std::lock_guard volume_lock(locks_.For(id));
  if (tokens_.Holds(id, target)) {
    WISP_RETURN_IF_ERROR(tokens_.Unpublish(id, target));
  } else {
    WISP_RETURN_IF_ERROR(binds_.Unpublish(target));
  }
  return ::csi::v1::NodeUnpublishVolumeResponse();
}

// ---- Stats, capabilities, info ----------------------------------------------------------------

absl::StatusOr<::csi::v1::NodeGetVolumeStatsResponse> NodeService::VolumeStats(
    const ::csi::v1::NodeGetVolumeStatsRequest& request) {
  if (request.volume_id().empty()) return absl::InvalidArgumentError("volume_id is required");
  if (request.volume_path().empty()) return absl::InvalidArgumentError("volume_path is required");
  const std::string& id = request.volume_id();
  const std::string path = fsutil::CleanPath(request.volume_path());
  if (!tokens_.PublishedAt(id, path) && !binds_.Holds(id, path)) {
    return absl::NotFoundError("volume " + id + " is not published at " + path);
  }
  struct statvfs vfs;
  if (::statvfs(path.c_str(), &vfs) != 0) {
    return absl::NotFoundError("volume_path " + path + ": " + std::strerror(errno));
  }
  ::csi::v1::NodeGetVolumeStatsResponse response;
  auto* bytes = response.add_usage();
  bytes->set_unit(::csi::v1::VolumeUsage::BYTES);
  bytes->set_total(static_cast<int64_t>(vfs.f_blocks * vfs.f_frsize));
  bytes->set_available(static_cast<int64_t>(vfs.f_bavail * vfs.f_frsize));
  bytes->set_used(static_cast<int64_t>((vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize));
  auto* inodes = response.add_usage();
  inodes->set_unit(::csi::v1::VolumeUsage::INODES);
  inodes->set_total(static_cast<int64_t>(vfs.f_files));
  inodes->set_available(static_cast<int64_t>(vfs.f_favail));
  inodes->set_used(static_cast<int64_t>(vfs.f_files - vfs.f_ffree));
  return response;
}

::csi::v1::NodeGetCapabilitiesResponse NodeService::Capabilities() const {
  ::csi::v1::NodeGetCapabilitiesResponse response;
  response.add_capabilities()->mutable_rpc()->set_type(
      ::csi::v1::NodeServiceCapability::RPC::GET_VOLUME_STATS);
  return response;
}

::csi::v1::NodeGetInfoResponse NodeService::Info() const {
  ::csi::v1::NodeGetInfoResponse response;
  response.set_node_id(options_.node_id);
  (*response.mutable_accessible_topology()->mutable_segments())[kTopologyKey] = options_.node_id;
  return response;
}

absl::StatusOr<std::pair<int64_t, int64_t>> NodeService::Capacity() const {
  struct statvfs vfs;
  if (::statvfs(options_.volume_root.c_str(), &vfs) != 0) {
    return absl::UnavailableError("volume root " + options_.volume_root + ": " +
                                  std::strerror(errno));
  }
  return std::make_pair(static_cast<int64_t>(vfs.f_bavail * vfs.f_frsize),
                        static_cast<int64_t>(vfs.f_blocks * vfs.f_frsize));
}

// ---- gRPC -------------------------------------------------------------------------------------

grpc::Status NodeService::NodePublishVolume(grpc::ServerContext* context,
                                            const ::csi::v1::NodePublishVolumeRequest* request,
                                            ::csi::v1::NodePublishVolumeResponse* response) {
  return Instrument(metrics_, logger_, "NodePublishVolume", request->volume_id(), *request,
                    response,
                    [&] { return Publish(*request, Budget(context, options_.bus_timeout)); });
}

grpc::Status NodeService::NodeUnpublishVolume(grpc::ServerContext*,
                                              const ::csi::v1::NodeUnpublishVolumeRequest* request,
                                              ::csi::v1::NodeUnpublishVolumeResponse* response) {
  return Instrument(metrics_, logger_, "NodeUnpublishVolume", request->volume_id(), *request,
                    response, [&] { return Unpublish(*request); });
}

grpc::Status NodeService::NodeGetVolumeStats(grpc::ServerContext*,
                                             const ::csi::v1::NodeGetVolumeStatsRequest* request,
                                             ::csi::v1::NodeGetVolumeStatsResponse* response) {
  return Instrument(metrics_, logger_, "NodeGetVolumeStats", request->volume_id(), *request,
                    response, [&] { return VolumeStats(*request); });
}

grpc::Status NodeService::NodeGetCapabilities(grpc::ServerContext*,
                                              const ::csi::v1::NodeGetCapabilitiesRequest* request,
                                              ::csi::v1::NodeGetCapabilitiesResponse* response) {
  return Instrument(
      metrics_, logger_, "NodeGetCapabilities", "", *request, response,
      [&]() -> absl::StatusOr<::csi::v1::NodeGetCapabilitiesResponse> { return Capabilities(); });
}

grpc::Status NodeService::NodeGetInfo(grpc::ServerContext*,
                                      const ::csi::v1::NodeGetInfoRequest* request,
                                      ::csi::v1::NodeGetInfoResponse* response) {
  return Instrument(metrics_, logger_, "NodeGetInfo", "", *request, response,
                    [&]() -> absl::StatusOr<::csi::v1::NodeGetInfoResponse> { return Info(); });
}

}  // namespace wisp::gateway::csi
