#pragma once
// TokenServer: the sidecar's token-url endpoint ("/" on a unix socket) over a single-flight cache.
//
// Contract:
//   - Get() returns the cached access token until 80% of its lifetime has passed; then the next
//     caller exchanges the current projected token (TokenFile re-reads it when kubelet rotated
//     it) at the STS. Concurrent callers during an exchange wait for that one exchange (single
//     flight): one STS call per refresh, not per request.
//   - Between 80% and 100% of the lifetime the still-valid cached token answers at once while
//     one caller refreshes it; if that refresh fails, the cached token is served (as kubelet's
//     token manager does) and the next attempt waits kRefreshRetryBackoff, so a down gateway is
//     not asked once per request.
//   - With `metrics`: every answer, cache hit/miss, exchange outcome and token file (re)load
//   counts. Cache hits and misses count the app's requests only: Get(kWarm), the sidecar's own
//   keep-warm call, is not a cache lookup anyone made (its exchanges still count).
//   - Handle() answers 200 {"access_token","token_type","expiry"} with expiry in RFC 3339 as Go's
//     time.Time marshals it (UTC, fractional seconds without trailing zeros), so gcsfuse's
//     gcs-auth:token-url (oauth2.Token) reads it; failure -> 500 {"error": "..."} (never a token).
//
//   TokenServer server(file, *sts, clock);
//   http->HandlePrefix("GET", "/", [&](const http::Request& r) { return server.Handle(r); });
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>

#include "sidecar_metrics.hpp"
#include "sts_client.hpp"
#include "token_file.hpp"
#include "wisp/http/server.hpp"
#include "wisp/status/clock.hpp"

namespace wisp::sidecar {

inline constexpr std::chrono::seconds kRefreshRetryBackoff{5};

struct CachedToken {
  std::string access_token;
  std::string token_type;
  std::chrono::system_clock::time_point expiry;
};

class TokenServer {
 public:
  TokenServer(TokenFile& file, StsClient& sts, Clock& clock, double refresh_fraction = 0.8,
              SidecarMetrics* metrics = nullptr);

  enum class Caller { kRequest, kWarm };
  absl::StatusOr<CachedToken> Get(Caller caller = Caller::kRequest);
  http::Response Handle(const http::Request& request);
  int exchanges() const;

 private:
  TokenFile& file_;
  StsClient& sts_;
  Clock& clock_;
  const double refresh_fraction_;
  SidecarMetrics* const metrics_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool in_flight_ = false;
  std::optional<CachedToken> cached_;
  std::chrono::system_clock::time_point refresh_at_;
  std::chrono::system_clock::time_point retry_at_{};  // no refresh attempt before this
  absl::Status last_error_ = absl::OkStatus();
  uint64_t generation_ = 0;  // bumps after every finished exchange attempt
  int exchanges_ = 0;
};

// RFC 3339 with nanoseconds, trailing zeros trimmed, "Z" (Go's time.RFC3339Nano in UTC).
std::string FormatRfc3339Nano(std::chrono::system_clock::time_point t);

}  // namespace wisp::sidecar
