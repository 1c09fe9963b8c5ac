#pragma once
// PUT /v1/upload/<volume>: the gateway's upload door (CDI's upload proxy, on the bus).
//
// Contract, in the order the checks run (each refusal is a JSON {"error": "..."}):
//   - <volume> is a volume name or id ([A-Za-z0-9._-], at most 253): else 400 naming "path".
//   - At most rate_per_second attempts per client address (burst `burst`): else 429.
//   - Authorization: Bearer <upload token from wisp.v1.token.upload>. Missing -> 401; a bad
//     signature, wrong issuer or audience, expired, or no upload claim -> 401 with the reason.
//     Checked against the gateway's cached JWKS (KeyCache), no bus round trip. Never logged.
//   - The volume, from wisp.v1.volume.get: unknown -> 404; the token names another volume -> 403;
//     not an upload target, already populated, or an upload already running -> 409.
//   - Content-Length (or, for a chunked body, the bytes so far) above the volume's capacity plus
//     2% and 16 MiB (qcow2 metadata) -> 413. The server refuses anything above --upload-max-bytes.
//   - The body is read in chunks of the populator's max_chunk_bytes and each is sent as a request
//     on the session's chunk subject; the next chunk is read only after the previous one was
//     acknowledged, so memory stays at one chunk and a slow disk slows the client (back-pressure).
//   - The answer comes after the last chunk: 200 {"volume_id","name","phase","format","sha256",
//     "bytes"} once disk.img is in place. A bad image (unknown format, larger than the volume,
//     checksum mismatch) -> 400/413 with the populator's reason. A client that goes away or stalls
//     makes the gateway abort the session: the volume goes back to UploadReady with a message,
//     never Succeeded with partial data.
//   - Metrics: wisp_gateway_uploads_total{outcome}, wisp_gateway_upload_bytes_total.
//
// Example (gateway wiring):
//   auto uploads = std::make_unique<upload::UploadHandler>(bus, verifier, registry, clock, {});
//   upload::RegisterUploadRoute(*https, *uploads, {.max_body_bytes = limit});
#include <chrono>
#include <memory>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>

#include "oidc/key_cache.hpp"
#include "oidc/rate_limiter.hpp"
#include "wisp/bus/bus.hpp"
#include "wisp/http/server.hpp"
#include "wisp/jwt/upload.hpp"
#include "wisp/status/clock.hpp"

namespace wisp::gateway::upload {

inline constexpr char kUploadPrefix[] = "/v1/upload/";

// Checks an upload token; Unauthenticated with the reason when it is not a valid one.
class TokenVerifier {
 public:
  virtual ~TokenVerifier() = default;
  virtual absl::StatusOr<jwt::UploadGrant> Verify(std::string_view token) = 0;
};

// Verifies against wisp-token's public keys as the gateway's KeyCache holds them.
class KeyCacheVerifier final : public TokenVerifier {
 public:
  KeyCacheVerifier(const oidc::KeyCache& cache, Clock& clock, std::chrono::seconds leeway)
      : cache_(cache), clock_(clock), leeway_(leeway) {}
  absl::StatusOr<jwt::UploadGrant> Verify(std::string_view token) override;

 private:
  const oidc::KeyCache& cache_;
  Clock& clock_;
  const std::chrono::seconds leeway_;
};

struct UploadOptions {
  std::chrono::milliseconds request_timeout = std::chrono::seconds(10);  // get, open
  std::chrono::milliseconds chunk_timeout = std::chrono::seconds(30);    // one chunk's ack
  // The last chunk's answer waits for conversion (qemu-img for a qcow2) and the final fsync.
  std::chrono::milliseconds finish_timeout = std::chrono::minutes(10);
  double rate_per_second = 2;  // upload attempts per client address
  double burst = 20;
};

struct UploadMetrics {
  explicit UploadMetrics(prometheus::Registry& registry);
  prometheus::Family<prometheus::Counter>& uploads_total;
  prometheus::Counter& bytes_total;
};

class UploadHandler {
 public:
  UploadHandler(bus::Requester& bus, TokenVerifier& verifier, prometheus::Registry& registry,
                Clock& clock, UploadOptions options);

  http::Response Handle(const http::Request& request, http::BodyReader& body);

 private:
  http::Response Done(std::string_view outcome, http::Response response);

  bus::Requester& bus_;
  TokenVerifier& verifier_;
  UploadMetrics metrics_;
  const UploadOptions options_;
  oidc::RateLimiter limiter_;
};

// Registers PUT /v1/upload/ as a streaming route.
void RegisterUploadRoute(http::Server& server, UploadHandler& handler, http::StreamOptions options);

}  // namespace wisp::gateway::upload
