#include "csi/controller_service.hpp"

#include <algorithm>
#include <string>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "csi/grpc_call.hpp"
#include "csi/plugin.hpp"
#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/log/log.hpp"
#include "wisp/v1/node.pb.h"

namespace wisp::gateway::csi {
using ::csi::v1::VolumeCapability;
using Mode = ::csi::v1::VolumeCapability::AccessMode;

namespace {

constexpr char kNodeContextKey[] = "wisp.dev/node";

std::chrono::milliseconds Left(std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

bool Fits(int64_t capacity, const ::csi::v1::CapacityRange& range) {
  if (range.required_bytes() > 0 && capacity < range.required_bytes()) return false;
  if (range.limit_bytes() > 0 && capacity > range.limit_bytes()) return false;
  return true;
}

}  // namespace

absl::Status CheckVolumeCapabilities(
    const google::protobuf::RepeatedPtrField<VolumeCapability>& caps, const std::string& field) {
  if (caps.empty()) return absl::InvalidArgumentError(field + " is required");
  for (int i = 0; i < caps.size(); ++i) {
    const VolumeCapability& cap = caps[i];
    const std::string at = field + "[" + std::to_string(i) + "]";
    // Block: the node publishes the volume's disk.img through a loop device.
    if (!cap.has_mount() && !cap.has_block()) {
      return absl::InvalidArgumentError(at + ": access_type is required");
    }
    if (!cap.has_access_mode() || cap.access_mode().mode() == Mode::UNKNOWN) {
      return absl::InvalidArgumentError(at + ".access_mode is required");
    }
    switch (cap.access_mode().mode()) {
      case Mode::SINGLE_NODE_WRITER:
      case Mode::SINGLE_NODE_READER_ONLY:
      case Mode::SINGLE_NODE_SINGLE_WRITER:
      case Mode::SINGLE_NODE_MULTI_WRITER:
        break;
      default:
        return absl::InvalidArgumentError(at + ".access_mode " +
                                          Mode::Mode_Name(cap.access_mode().mode()) +
                                          " is not supported: wisp volumes live on one node");
    }
  }
  return absl::OkStatus();
}

ControllerService::ControllerService(ControllerOptions options, bus::Requester& requester,
                                     const Clock& clock, CsiMetrics& metrics,
                                     bus::Subscriber* events)
    : options_(std::move(options)),
      requester_(requester),
      events_(events),
      clock_(clock),
      metrics_(metrics),
      logger_(log::Get("csi-controller")) {}

absl::StatusOr<std::string> ControllerService::ChooseNode(
    const ::csi::v1::CreateVolumeRequest& req) const {
  if (req.has_accessibility_requirements()) {
    const auto& ar = req.accessibility_requirements();
    for (const auto* list : {&ar.preferred(), &ar.requisite()}) {
      for (const ::csi::v1::Topology& topology : *list) {
        auto it = topology.segments().find(kTopologyKey);
        if (it != topology.segments().end() && !it->second.empty()) return it->second;
      }
    }
    if (!ar.preferred().empty() || !ar.requisite().empty()) {
      return absl::InvalidArgumentError(std::string("accessibility_requirements: no topology "
                                                    "names a node with segment ") +
                                        kTopologyKey);
    }
  }
  if (!options_.default_node.empty()) return options_.default_node;
  return absl::InvalidArgumentError(std::string("accessibility_requirements: a topology with ") +
                                    kTopologyKey + " is required");
}

::csi::v1::Volume ControllerService::ToCsi(const v1::VolumeStatus& volume) const {
  ::csi::v1::Volume out;
  out.set_volume_id(volume.volume_id());
  out.set_capacity_bytes(volume.spec().capacity_bytes());
  if (!volume.spec().node().empty()) {
    (*out.mutable_volume_context())[kNodeContextKey] = volume.spec().node();
    (*out.add_accessible_topology()->mutable_segments())[kTopologyKey] = volume.spec().node();
  }
  if (volume.spec().source().has_clone()) {
    out.mutable_content_source()->mutable_volume()->set_volume_id(
        volume.spec().source().clone().volume_id());
  }
  return out;
}

ControllerService::~ControllerService() {
  // Unsubscribed before the waiters go: the handler reads them. Not under waiters_mu_, which the
  // handler takes.
  bus::SubscriptionPtr sub;
  {
    std::lock_guard lock(waiters_mu_);
    sub = std::move(events_sub_);
  }
  sub.reset();
}

std::shared_ptr<ControllerService::Waiter> ControllerService::Register(
    const std::string& volume_id) {
  if (events_ == nullptr) return nullptr;
  std::lock_guard lock(waiters_mu_);
  if (!events_sub_) {
    auto sub = events_->Subscribe(std::string(bus::subjects::kVolumeEventsPrefix) + ".*", "",
                                  [this](const bus::Message& m) { OnVolumeEvent(m); });
    if (!sub.ok()) {
      // Polling alone still answers, later; the next wait tries to subscribe again.
      logger_->warn("subscribing to volume events: {}; CreateVolume polls alone",
                    sub.status().ToString());
      return nullptr;
    }
    events_sub_ = std::move(*sub);
  }
  auto& waiter = waiters_[volume_id];
  if (!waiter) waiter = std::make_shared<Waiter>();
  ++waiter->users;
  return waiter;
}

void ControllerService::Unregister(const std::string& volume_id) {
  std::lock_guard lock(waiters_mu_);
  auto it = waiters_.find(volume_id);
  if (it != waiters_.end() && --it->second->users == 0) waiters_.erase(it);
}

void ControllerService::OnVolumeEvent(const bus::Message& message) {
  v1::VolumeEvent event;
  if (!event.ParseFromString(message.data)) return;
  if (event.phase() != v1::SUCCEEDED && event.phase() != v1::FAILED) return;
  std::lock_guard lock(waiters_mu_);
  auto it = waiters_.find(event.volume_id());
  if (it == waiters_.end()) return;
  ++it->second->done_events;
  it->second->cv.notify_all();
}

absl::StatusOr<v1::VolumeStatus> ControllerService::WaitReady(
    v1::VolumeStatus volume, std::chrono::steady_clock::time_point deadline) {
  const auto started = std::chrono::steady_clock::now();
  const std::string id = volume.volume_id();
  std::shared_ptr<Waiter> waiter;
  if (volume.phase() != v1::SUCCEEDED && volume.phase() != v1::FAILED) waiter = Register(id);
  absl::Cleanup unregister = [&] {
    if (waiter) Unregister(id);
  };
  auto read = [&]() -> absl::Status {
    v1::GetVolumeRequest get;
    get.set_volume_id(id);
    WISP_ASSIGN_OR_RETURN(
        auto got, bus::Call<v1::GetVolumeResponse>(requester_, bus::subjects::kVolumeGet, get,
                                                   std::min(Left(deadline), options_.bus_timeout)));
    volume = got.volume();
    return absl::OkStatus();
  };
  // `volume` was read before the registration: an event in between was not seen. Read it again.
  if (waiter) WISP_RETURN_IF_ERROR(read());
  uint64_t seen = 0;
  for (;;) {
    if (volume.phase() == v1::SUCCEEDED) return volume;
    if (volume.phase() == v1::FAILED) {
      return absl::InternalError("volume " + volume.spec().name() +
                                 " failed to populate: " + volume.message());
    }
    const auto not_ready = [&] {
      // The CO retries CreateVolume with the same name; the work carries on meanwhile.
      return absl::DeadlineExceededError("volume " + volume.spec().name() + " is not ready yet (" +
                                         volume.progress() + ")");
    };
    const auto now = std::chrono::steady_clock::now();
    if (waiter) {
      // Look again when the populator reports the volume done, and every poll_interval anyway
      // (events are best effort), until the caller's deadline.
      if (now >= deadline) return not_ready();
      std::unique_lock lock(waiters_mu_);
      const bool woken =
          waiter->cv.wait_until(lock, std::min(now + options_.poll_interval, deadline),
                                [&] { return waiter->done_events != seen; });
      seen = waiter->done_events;
      if (!woken && std::chrono::steady_clock::now() >= deadline) return not_ready();
    } else {
      // Look again after a twentieth of the time waited so far (10 ms at first, poll_interval at
      // most): a volume that is ready is answered at most 5% (or 10 ms) late, and a long import
      // costs one volume.get per poll_interval.
      const auto pause = std::clamp<std::chrono::milliseconds>(
          std::chrono::duration_cast<std::chrono::milliseconds>(now - started) / 20,
          std::chrono::milliseconds(10), options_.poll_interval);
      if (now + pause >= deadline) return not_ready();
      std::this_thread::sleep_for(pause);
    }
    WISP_RETURN_IF_ERROR(read());
  }
}

absl::StatusOr<::csi::v1::CreateVolumeResponse> ControllerService::Create(
    const ::csi::v1::CreateVolumeRequest& req, std::chrono::milliseconds budget) {
  if (req.name().empty()) return absl::InvalidArgumentError("name is required");
  WISP_RETURN_IF_ERROR(CheckVolumeCapabilities(req.volume_capabilities(), "volume_capabilities"));
  const auto& range = req.capacity_range();
  if (range.required_bytes() < 0 || range.limit_bytes() < 0) {
    return absl::InvalidArgumentError("capacity_range: bytes must not be negative");
  }
  if (range.limit_bytes() > 0 && range.limit_bytes() < range.required_bytes()) {
    return absl::InvalidArgumentError(
        "capacity_range: limit_bytes must not be less than "
        "required_bytes");
  }
  if (req.has_volume_content_source() && req.volume_content_source().has_snapshot()) {
    return absl::InvalidArgumentError("volume_content_source: snapshots are not supported");
  }
  WISP_ASSIGN_OR_RETURN(std::string node, ChooseNode(req));
  int64_t capacity = range.required_bytes();
  if (capacity == 0) {
    capacity = options_.default_capacity_bytes;
    if (range.limit_bytes() > 0) capacity = std::min(capacity, range.limit_bytes());
  }
  const auto deadline =
      std::chrono::steady_clock::now() + std::min(budget, options_.create_timeout);

  // Idempotent by name: an existing volume answers, if it fits.
  v1::GetVolumeRequest get;
  get.set_name(req.name());
  auto existing = bus::Call<v1::GetVolumeResponse>(requester_, bus::subjects::kVolumeGet, get,
                                                   std::min(Left(deadline), options_.bus_timeout));
  if (existing.ok() && !existing->volume().volume_id().empty()) {
    const v1::VolumeStatus& volume = existing->volume();
    if (!Fits(volume.spec().capacity_bytes(), range)) {
      return absl::AlreadyExistsError("volume " + req.name() + " exists with capacity " +
                                      std::to_string(volume.spec().capacity_bytes()) +
                                      " bytes, which does not fit capacity_range");
    }
    WISP_ASSIGN_OR_RETURN(v1::VolumeStatus ready, WaitReady(volume, deadline));
    ::csi::v1::CreateVolumeResponse response;
    *response.mutable_volume() = ToCsi(ready);
    return response;
  }
  if (!existing.ok() && existing.status().code() != absl::StatusCode::kNotFound) {
    return Annotate(existing.status(), "looking up volume " + req.name());
  }

  v1::CreateVolumeRequest create;
  // The populator answers at once and WaitReady polls volume.get: a waiting create would hold one
  // of the populator's bus serve threads for the whole import, and with one serve thread per
  // subject every other CreateVolume on that instance would queue behind it.
  create.set_wait(false);
  v1::VolumeSpec* spec = create.mutable_spec();
  spec->set_name(req.name());
  spec->set_capacity_bytes(capacity);
  spec->set_node(node);
  for (const auto& [k, v] : req.parameters()) (*spec->mutable_parameters())[k] = v;
  // external-provisioner --extra-create-metadata: the PVC the populator's recorded source is for.
  if (auto it = req.parameters().find("csi.storage.k8s.io/pvc/name");
      it != req.parameters().end()) {
    spec->set_pvc_name(it->second);
  }
  if (auto it = req.parameters().find("csi.storage.k8s.io/pvc/namespace");
      it != req.parameters().end()) {
    spec->set_pvc_namespace(it->second);
  }
  if (options_.read_source_ca && !spec->pvc_name().empty() && !spec->pvc_namespace().empty()) {
    auto ca = options_.read_source_ca(spec->pvc_namespace(), spec->pvc_name());
    if (!ca.ok()) return ca.status();
    if (ca->has_value()) *spec->mutable_source_ca() = **ca;
  }
  if (req.has_volume_content_source() && req.volume_content_source().has_volume()) {
    spec->mutable_source()->mutable_clone()->set_volume_id(
        req.volume_content_source().volume().volume_id());
  }
  WISP_ASSIGN_OR_RETURN(
      auto created, bus::Call<v1::CreateVolumeResponse>(requester_, bus::subjects::kVolumeCreate,
                                                        create, Left(deadline)));
  WISP_ASSIGN_OR_RETURN(v1::VolumeStatus ready, WaitReady(created.volume(), deadline));
  SPDLOG_LOGGER_INFO(logger_, "created volume {} ({}) on node {}, {} bytes", req.name(),
                     ready.volume_id(), node, capacity);
  ::csi::v1::CreateVolumeResponse response;
  *response.mutable_volume() = ToCsi(ready);
  return response;
}

absl::StatusOr<::csi::v1::DeleteVolumeResponse> ControllerService::Delete(
    const ::csi::v1::DeleteVolumeRequest& req, std::chrono::milliseconds budget) {
  if (req.volume_id().empty()) return absl::InvalidArgumentError("volume_id is required");
  v1::DeleteVolumeRequest del;
  del.set_volume_id(req.volume_id());
  auto resp =
      bus::Call<v1::DeleteVolumeResponse>(requester_, bus::subjects::kVolumeDelete, del, budget);
  if (!resp.ok() && resp.status().code() != absl::StatusCode::kNotFound) {
    return Annotate(resp.status(), "deleting volume " + req.volume_id());
  }
  return ::csi::v1::DeleteVolumeResponse();
}

absl::StatusOr<::csi::v1::ValidateVolumeCapabilitiesResponse> ControllerService::Validate(
    const ::csi::v1::ValidateVolumeCapabilitiesRequest& req, std::chrono::milliseconds budget) {
  if (req.volume_id().empty()) return absl::InvalidArgumentError("volume_id is required");
  if (req.volume_capabilities().empty()) {
    return absl::InvalidArgumentError("volume_capabilities is required");
  }
  v1::GetVolumeRequest get;
  get.set_volume_id(req.volume_id());
  auto got = bus::Call<v1::GetVolumeResponse>(requester_, bus::subjects::kVolumeGet, get, budget);
  if (!got.ok()) {
    if (got.status().code() == absl::StatusCode::kNotFound) {
      return absl::NotFoundError("volume " + req.volume_id() + " does not exist");
    }
    return Annotate(got.status(), "looking up volume " + req.volume_id());
  }
  ::csi::v1::ValidateVolumeCapabilitiesResponse response;
  if (absl::Status st = CheckVolumeCapabilities(req.volume_capabilities(), "volume_capabilities");
      !st.ok()) {
    response.set_message(std::string(st.message()));  // not confirmed
    return response;
  }
  auto* confirmed = response.mutable_confirmed();
  *confirmed->mutable_volume_context() = req.volume_context();
  *confirmed->mutable_volume_capabilities() = req.volume_capabilities();
  *confirmed->mutable_parameters() = req.parameters();
  *confirmed->mutable_mutable_parameters() = req.mutable_parameters();
  return response;
}

absl::StatusOr<::csi::v1::ListVolumesResponse> ControllerService::List(
    const ::csi::v1::ListVolumesRequest& req, std::chrono::milliseconds budget) {
  if (req.max_entries() < 0) return absl::InvalidArgumentError("max_entries must not be negative");
  v1::ListVolumesRequest list;
  list.set_max_entries(req.max_entries());
  list.set_starting_token(req.starting_token());
  auto got =
      bus::Call<v1::ListVolumesResponse>(requester_, bus::subjects::kVolumeList, list, budget);
  if (!got.ok()) {
    if (!req.starting_token().empty() &&
        (got.status().code() == absl::StatusCode::kInvalidArgument ||
         got.status().code() == absl::StatusCode::kAborted)) {
      return absl::AbortedError("starting_token " + req.starting_token() + " is not valid");
    }
    return Annotate(got.status(), "listing volumes");
  }
  ::csi::v1::ListVolumesResponse response;
  for (const v1::VolumeStatus& volume : got->volumes()) {
    *response.add_entries()->mutable_volume() = ToCsi(volume);
  }
  response.set_next_token(got->next_token());
  return response;
}

absl::StatusOr<::csi::v1::GetCapacityResponse> ControllerService::Capacity(
    const ::csi::v1::GetCapacityRequest& req, std::chrono::milliseconds budget) {
  std::string node = options_.default_node;
  if (req.has_accessible_topology()) {
    auto it = req.accessible_topology().segments().find(kTopologyKey);
    if (it == req.accessible_topology().segments().end() || it->second.empty()) {
      return absl::InvalidArgumentError(std::string("accessible_topology: segment ") +
                                        kTopologyKey + " is required");
    }
    node = it->second;
  }
  ::csi::v1::GetCapacityResponse response;
  if (!req.volume_capabilities().empty() &&
      !CheckVolumeCapabilities(req.volume_capabilities(), "volume_capabilities").ok()) {
    return response;  // no capacity for volumes wisp cannot make
  }
  if (node.empty()) return response;  // no node to ask: nothing known to be available
  WISP_ASSIGN_OR_RETURN(auto cap, bus::Call<v1::NodeCapacityResponse>(
                                      requester_, bus::subjects::Node(node, "csi.capacity"),
                                      v1::NodeCapacityRequest(), budget));
  response.set_available_capacity(cap.available_bytes());
  response.mutable_maximum_volume_size()->set_value(cap.available_bytes());
  return response;
}

::csi::v1::ControllerGetCapabilitiesResponse ControllerService::Capabilities() const {
  ::csi::v1::ControllerGetCapabilitiesResponse response;
  for (auto type : {::csi::v1::ControllerServiceCapability::RPC::CREATE_DELETE_VOLUME,
                    ::csi::v1::ControllerServiceCapability::RPC::LIST_VOLUMES,
                    ::csi::v1::ControllerServiceCapability::RPC::GET_CAPACITY}) {
    response.add_capabilities()->mutable_rpc()->set_type(type);
  }
  return response;
}

// ---- gRPC -------------------------------------------------------------------------------------

grpc::Status ControllerService::CreateVolume(grpc::ServerContext* context,
                                             const ::csi::v1::CreateVolumeRequest* req,
                                             ::csi::v1::CreateVolumeResponse* resp) {
  return Instrument(metrics_, logger_, "CreateVolume", req->name(), *req, resp,
                    [&] { return Create(*req, Budget(context, options_.create_timeout)); });
}

grpc::Status ControllerService::DeleteVolume(grpc::ServerContext* context,
                                             const ::csi::v1::DeleteVolumeRequest* req,
                                             ::csi::v1::DeleteVolumeResponse* resp) {
  return Instrument(metrics_, logger_, "DeleteVolume", req->volume_id(), *req, resp,
                    [&] { return Delete(*req, Budget(context, options_.bus_timeout)); });
}

grpc::Status ControllerService::ValidateVolumeCapabilities(
    grpc::ServerContext* context, const ::csi::v1::ValidateVolumeCapabilitiesRequest* req,
    ::csi::v1::ValidateVolumeCapabilitiesResponse* resp) {
  return Instrument(metrics_, logger_, "ValidateVolumeCapabilities", req->volume_id(), *req, resp,
                    [&] { return Validate(*req, Budget(context, options_.bus_timeout)); });
}

grpc::Status ControllerService::ListVolumes(grpc::ServerContext* context,
                                            const ::csi::v1::ListVolumesRequest* req,
                                            ::csi::v1::ListVolumesResponse* resp) {
  return Instrument(metrics_, logger_, "ListVolumes", "", *req, resp,
                    [&] { return List(*req, Budget(context, options_.bus_timeout)); });
}

grpc::Status ControllerService::GetCapacity(grpc::ServerContext* context,
                                            const ::csi::v1::GetCapacityRequest* req,
                                            ::csi::v1::GetCapacityResponse* resp) {
  return Instrument(metrics_, logger_, "GetCapacity", "", *req, resp,
                    [&] { return Capacity(*req, Budget(context, options_.bus_timeout)); });
}

grpc::Status ControllerService::ControllerGetCapabilities(
    grpc::ServerContext*, const ::csi::v1::ControllerGetCapabilitiesRequest* req,
    ::csi::v1::ControllerGetCapabilitiesResponse* resp) {
  return Instrument(metrics_, logger_, "ControllerGetCapabilities", "", *req, resp,
                    [&]() -> absl::StatusOr<::csi::v1::ControllerGetCapabilitiesResponse> {
                      return Capabilities();
                    });
}

}  // namespace wisp::gateway::csi
