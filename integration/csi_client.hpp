#pragma once
// A small CSI client for the integration tests and bench/csi: gRPC stubs on the gateway's unix
// socket, plus request builders for token and persistent volumes.
#include <chrono>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "csi/csi.grpc.pb.h"

namespace wisp::integration {

struct CsiClient {
  explicit CsiClient(const std::string& socket_path)
      : channel(grpc::CreateChannel("unix:" + socket_path, grpc::InsecureChannelCredentials())),
        identity(::csi::v1::Identity::NewStub(channel)),
        node(::csi::v1::Node::NewStub(channel)),
        controller(::csi::v1::Controller::NewStub(channel)) {}

  // A context with a deadline, as kubelet and the sidecars set one.
  static std::unique_ptr<grpc::ClientContext> Ctx(
      std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + timeout);
    return ctx;
  }

  grpc::Status Publish(const ::csi::v1::NodePublishVolumeRequest& req) {
    ::csi::v1::NodePublishVolumeResponse resp;
    return node->NodePublishVolume(Ctx().get(), req, &resp);
  }
  grpc::Status Unpublish(const std::string& volume_id, const std::string& target) {
    ::csi::v1::NodeUnpublishVolumeRequest req;
    req.set_volume_id(volume_id);
    req.set_target_path(target);
    ::csi::v1::NodeUnpublishVolumeResponse resp;
    return node->NodeUnpublishVolume(Ctx().get(), req, &resp);
  }

  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<::csi::v1::Identity::Stub> identity;
  std::unique_ptr<::csi::v1::Node::Stub> node;
  std::unique_ptr<::csi::v1::Controller::Stub> controller;
};

inline ::csi::v1::VolumeCapability MountCapability(
    ::csi::v1::VolumeCapability::AccessMode::Mode mode =
        ::csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER) {
  ::csi::v1::VolumeCapability cap;
  cap.mutable_mount();
  cap.mutable_access_mode()->set_mode(mode);
  return cap;
}

// What the kubelet sends for an inline csi.wisp.dev volume of pod <ns>/<pod>.
inline ::csi::v1::NodePublishVolumeRequest TokenVolumeRequest(
    const std::string& volume_id, const std::string& target, const std::string& audience,
    const std::string& expiration_seconds, const std::string& pod_uid = "uid-1") {
  ::csi::v1::NodePublishVolumeRequest req;
  req.set_volume_id(volume_id);
  req.set_target_path(target);
  *req.mutable_volume_capability() = MountCapability();
  auto& c = *req.mutable_volume_context();
  c["csi.storage.k8s.io/ephemeral"] = "true";
  c["csi.storage.k8s.io/pod.namespace"] = "team";
  c["csi.storage.k8s.io/pod.name"] = "app-0";
  c["csi.storage.k8s.io/pod.uid"] = pod_uid;
  c["csi.storage.k8s.io/serviceAccount.name"] = "default";
  c["audience"] = audience;
  c["expirationSeconds"] = expiration_seconds;
  c["path"] = "token";
  return req;
}

}  // namespace wisp::integration
