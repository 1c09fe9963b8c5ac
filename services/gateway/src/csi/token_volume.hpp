#pragma once
// Token volumes: parsing the volume_context of a CSI ephemeral inline volume into what to write,
// and the rotation schedule. Pure functions, no I/O.
//
// Volume attributes (pod spec `csi.volumeAttributes`):
//   audience           the token's audience ("" = the issuer's default audiences)
//   expirationSeconds  lifetime, default 3600, at least 600 (Options can lower it for tests),
//                      at most 2^32
//   path               file name inside the volume, default "token" (kubelet validatePath rules)
//   fileMode           octal, default "0644", at most 0777
//   fileOwner          uid the files are given (decimal), default the gateway's own (root);
//   fileGroup          gid likewise. wisp-policy's presets set them to the one user every
//                      container the token is for runs as, with fileMode 0600.
//   gcpCredentialFile  with gcpAudience, gcpTokenUrl, gcpTokenPath (the token's path inside the
//                      container) and optionally gcpServiceAccountImpersonationUrl: a Google
//                      external-account credential configuration written beside the token under
//                      this file name (mode 0644 unless fileOwner is set; it holds no secret).
//   tokenSource        "wisp" (default: issued by wisp-token, bound to the pod) or "kubelet" (taken
//                      from csi.storage.k8s.io/serviceAccount.tokens; needs CSIDriver tokenRequests
//                      and requiresRepublish)
// The kubelet adds csi.storage.k8s.io/{ephemeral,pod.name,pod.namespace,pod.uid,
// serviceAccount.name,serviceAccount.tokens}.
//
// Example:
//   WISP_ASSIGN_OR_RETURN(TokenVolumeSpec spec, ParseTokenVolume(req.volume_context(), 600));
//   auto next = NextRotation(issued, expires, jitter);
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <google/protobuf/map.h>

#include "wisp/status/status.hpp"
#include "wisp/v1/common.pb.h"

namespace wisp::gateway::csi {

inline constexpr char kEphemeralKey[] = "csi.storage.k8s.io/ephemeral";
inline constexpr char kPodNameKey[] = "csi.storage.k8s.io/pod.name";
inline constexpr char kPodNamespaceKey[] = "csi.storage.k8s.io/pod.namespace";
inline constexpr char kPodUidKey[] = "csi.storage.k8s.io/pod.uid";
inline constexpr char kServiceAccountNameKey[] = "csi.storage.k8s.io/serviceAccount.name";
inline constexpr int64_t kDefaultExpirationSeconds = 3600;
inline constexpr int64_t kMinExpirationSeconds = 600;
inline constexpr int64_t kMaxExpirationSeconds = int64_t{1} << 32;
inline constexpr std::chrono::seconds kMaxTokenAge{24 * 3600};
inline constexpr std::chrono::seconds kMaxJitter{10};

using VolumeContext = google::protobuf::Map<std::string, std::string>;

enum class TokenSource { kWisp, kKubelet };

struct TokenVolumeSpec {
  std::string audience;
  int64_t expiration_seconds = kDefaultExpirationSeconds;
  std::string path = "token";
  uint32_t file_mode = 0644;
  TokenSource source = TokenSource::kWisp;
  std::optional<uint32_t> file_uid;
  std::optional<uint32_t> file_gid;
  std::map<std::string, std::string> extra_files;  // file name -> content, beside the token
  v1::Subject subject;  // namespace, service account, pod name/uid (node filled by the caller)
};

// True when the kubelet marked the volume as a CSI ephemeral inline volume.
bool IsEphemeral(const VolumeContext& context);

// Validates and parses the attributes; InvalidArgument naming the attribute on any problem.
absl::StatusOr<TokenVolumeSpec> ParseTokenVolume(const VolumeContext& context,
                                                 int64_t min_expiration_seconds);

struct KubeletToken {
  std::string token;
  int64_t expires_unix = 0;
};

// The external-account credential configuration the gcp* attributes describe (JSON text);
// InvalidArgument naming the attribute.
absl::StatusOr<std::string> GcpCredentialConfig(const VolumeContext& context);

// Picks the token for `audience` out of csi.storage.k8s.io/serviceAccount.tokens
// ({"<audience>":{"token":"…","expirationTimestamp":"RFC 3339"}}).
absl::StatusOr<KubeletToken> KubeletTokenFor(const VolumeContext& context,
                                             const std::string& audience);

// RFC 3339 ("2026-12-02T15:04:05Z", fractional seconds and offsets allowed) to unix seconds.
absl::StatusOr<int64_t> ParseRfc3339(const std::string& text);

// kubelet's refresh rule: rotate once the token is older than 80% of its lifetime or than 24h,
// minus `jitter` (callers draw it from [0, min(10s, 5% of the lifetime))).
int64_t NextRotationUnix(int64_t issued_unix, int64_t expires_unix,
                         std::chrono::milliseconds jitter);

// The jitter bound for a lifetime: 10s, or 5% of short lifetimes.
std::chrono::milliseconds MaxJitterFor(int64_t lifetime_seconds);

}  // namespace wisp::gateway::csi
