#pragma once
// The gateway's token side: OIDC discovery, JWKS and the RFC 8693 STS endpoint.
//
// Routes (RegisterOidcRoutes):
//   GET  /.well-known/openid-configuration  discovery document (Kubernetes'
//        ServiceAccountIssuerDiscovery shape), Cache-Control: public, max-age=<cache_max_age>
//   GET  /openid/v1/jwks                     {"keys":[...]} as application/jwk-set+json
//   POST /v1/token                           token exchange; form-encoded (RFC 8693) or JSON
//        (snake_case or the camelCase of Google's STS: grantType, subjectToken, ...)
//
// Contract:
//   - Discovery and JWKS come from KeyCache (no bus round trip per request); 503 with a JSON error
//     until the first key set arrived.
//   - /v1/token answers 200 {access_token, issued_token_type, token_type, expires_in, scope} or
//     the RFC 6749 section 5.2 error {error, error_description} with wisp-token's HTTP status
//     (400 for invalid_request, invalid_grant, invalid_target, invalid_scope,
//     unsupported_grant_type); both with Cache-Control: no-store. Bus failure -> 503
//     temporarily_unavailable; a body that is neither form nor JSON -> 400 invalid_request.
//   - Rate limit per subject: a request whose subject (iss + sub read from the subject token) has
//     no tokens left gets 429 temporarily_unavailable with Retry-After. Only exchanges whose
//     subject token verified are charged (to the verified subject wisp-token returns), so forged
//     tokens naming someone else cannot use up that subject's quota.
//   - Metrics: wisp_gateway_oidc_requests_total{path}, wisp_gateway_sts_requests_total{outcome}
//     (outcome: ok, the RFC 6749 error code, rate_limited, unavailable).
//
// Example (gateway wiring):
//   WISP_ASSIGN_OR_RETURN(auto oidc, oidc::RegisterOidcRoutes(*https, process.bus(),
//                                                             process.registry(), {}));
//   // keep `oidc` alive as long as the server runs
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
#include "wisp/status/clock.hpp"

namespace wisp::gateway::oidc {

struct OidcOptions {
  std::chrono::seconds cache_max_age{300};
  std::chrono::milliseconds exchange_timeout = std::chrono::seconds(5);
  double sts_rate_per_second = 5;  // per subject
  double sts_burst = 20;
  KeyCache::Options key_cache;
};

struct OidcMetrics {
  explicit OidcMetrics(prometheus::Registry& registry);
  prometheus::Family<prometheus::Counter>& oidc_requests_total;
  prometheus::Family<prometheus::Counter>& sts_requests_total;
};

class OidcRoutes {
 public:
  OidcRoutes(bus::Bus& bus, prometheus::Registry& registry, Clock& clock, OidcOptions options);
  ~OidcRoutes();

  absl::Status Start();
  void Register(http::Server& server);

  http::Response Discovery(const http::Request& request);
  http::Response Jwks(const http::Request& request);
  http::Response Token(const http::Request& request);

  KeyCache& key_cache() { return cache_; }

 private:
  bus::Bus& bus_;
  OidcMetrics metrics_;
  const OidcOptions options_;
  KeyCache cache_;
  RateLimiter limiter_;
};

// Builds OidcRoutes, starts its key cache and registers the three routes on `server` (call before
// server.Start()).
absl::StatusOr<std::unique_ptr<OidcRoutes>> RegisterOidcRoutes(
    http::Server& server, bus::Bus& bus, prometheus::Registry& registry, OidcOptions options = {},
    Clock& clock = SystemClock::Instance());

// application/x-www-form-urlencoded -> name/value pairs (percent-decoding, '+' as space).
// InvalidArgument on a bad percent escape.
absl::StatusOr<std::map<std::string, std::string>> ParseForm(std::string_view body);

}  // namespace wisp::gateway::oidc
