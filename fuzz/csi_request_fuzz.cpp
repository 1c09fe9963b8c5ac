// Fuzzes the CSI requests kubelet and external-provisioner send the gateway: the bytes are parsed
// as a csi.v1 NodePublishVolumeRequest or CreateVolumeRequest (first byte picks which) and run
// through the gateway's validation: capabilities, token-volume attributes, the kubelet token map,
// RFC 3339 timestamps, and StripSecrets, whose rendering must never contain a secret that the same
// request without its secrets would not show.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "csi/controller_service.hpp"
#include "csi/strip_secrets.hpp"
#include "csi/token_volume.hpp"

namespace gcsi = wisp::gateway::csi;

namespace {
// A secret value shows in StripSecrets(req) only if it also shows with the secrets removed.
template <typename Req>
void CheckNoSecretLeaks(const Req& req,
                        const google::protobuf::Map<std::string, std::string>* context) {
  const std::string shown = gcsi::StripSecrets(req);
  // The same request with every secret value emptied (keys kept, so names and markers match).
  Req clean = req;
  for (auto& [k, v] : *clean.mutable_secrets()) v.clear();
  std::string token_map;
  if constexpr (requires { clean.mutable_volume_context(); }) {
    auto it = clean.mutable_volume_context()->find(gcsi::kServiceAccountTokensKey);
    if (it != clean.mutable_volume_context()->end()) {
      token_map = it->second;
      it->second.clear();
    }
  }
  const std::string baseline = gcsi::StripSecrets(clean);
  auto leaked = [&](const std::string& secret) {
    return secret.size() >= 8 && shown.find(secret) != std::string::npos &&
           baseline.find(secret) == std::string::npos &&
           std::string_view(gcsi::kStripped).find(secret) == std::string_view::npos;
  };
  for (const auto& [k, v] : req.secrets()) {
    if (leaked(v)) abort();  // a CSI secret reached the log rendering
  }
  if (leaked(token_map)) abort();  // the kubelet's service-account tokens reached it
  (void)context;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool node = (data[0] & 1) == 0;
  const void* body = data + 1;
  const int len = static_cast<int>(size - 1);
  if (node) {
    ::csi::v1::NodePublishVolumeRequest req;
    if (!req.ParseFromArray(body, len)) return 0;
    google::protobuf::RepeatedPtrField<::csi::v1::VolumeCapability> caps;
    if (req.has_volume_capability()) *caps.Add() = req.volume_capability();
    (void)gcsi::CheckVolumeCapabilities(caps, "volume_capability");
    const auto& ctx = req.volume_context();
    if (gcsi::IsEphemeral(ctx)) {
      auto spec = gcsi::ParseTokenVolume(ctx, 1);
      if (spec.ok()) {
        if (spec->expiration_seconds < 1 ||
            spec->expiration_seconds > gcsi::kMaxExpirationSeconds || spec->file_mode > 0777 ||
            spec->path.empty()) {
          abort();  // accepted attributes outside the documented bounds
        }
        auto kubelet = gcsi::KubeletTokenFor(ctx, spec->audience);
        if (kubelet.ok()) {
          (void)gcsi::NextRotationUnix(0, kubelet->expires_unix,
                                       gcsi::MaxJitterFor(spec->expiration_seconds));
        }
      }
    }
    for (const auto& [k, v] : ctx) (void)gcsi::ParseRfc3339(v);
    CheckNoSecretLeaks(req, &ctx);
  } else {
    ::csi::v1::CreateVolumeRequest req;
    if (!req.ParseFromArray(body, len)) return 0;
    (void)gcsi::CheckVolumeCapabilities(req.volume_capabilities(), "volume_capabilities");
    CheckNoSecretLeaks(req, nullptr);
  }
  return 0;
}
