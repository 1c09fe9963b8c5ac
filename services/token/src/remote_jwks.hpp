#pragma once
// RemoteJwks: an external issuer's JWKS fetched from an https:// URL (trustedIssuers[].jwksUrl),
// for the STS to verify subject tokens that issuer signed.
//
// Contract:
//   - HttpsJwksFetcher GETs the URL through http::Client (common/http) over TLS, verifying the
//     server's certificate (and host name) against the CA file (empty = the system trust store);
//     plain http:// and URLs with user information are refused. `timeout` bounds the whole fetch.
//     A response over `max_bytes` (Content-Length or body) is refused without reading the rest
//     (ResourceExhausted), as are answers other than 200. Failures carry the client's one Status
//     mapping (an untrusted certificate is FailedPrecondition "certificate verify failed", a 404
//     NotFound, a 5xx Unavailable), each naming the URL (never a key).
//   - RemoteJwks::Refresh() fetches and parses the set. A failed fetch or a bad document keeps the
//     last good set (counted as failure, logged once per attempt); the first successful fetch
//     makes the issuer usable. Until then Current() is an empty set (every token is refused).
//   - RefreshIfDue() refreshes when `refresh_interval` has passed since the last attempt (the
//     PolicyWatcher thread calls it). RefreshForUnknownKid() refetches at once when a token names
//     a kid the set does not hold (the issuer rotated), at most once per `min_refetch_interval`,
//     so a stream of tokens with made-up kids cannot make wisp hammer the issuer.
//   - Thread-safe; one fetch at a time per issuer (concurrent callers wait for it).
//   - wisp_token_jwks_fetches_total{issuer, outcome="ok"|"error"} and wisp_token_jwks_keys{issuer}.
//
// Example:
//   auto fetcher = HttpsJwksFetcher::Create({.ca_file = "/etc/wisp/idp-ca.pem"});
//   // unit tests: HttpsJwksFetcher(std::make_shared<http::testing::FakeClient>(), {})
//   RemoteJwks jwks(*fetcher, {.url = "https://idp.example/keys", .issuer = iss}, clock, metrics);
//   (void)jwks.Refresh();
//   std::shared_ptr<const jwt::KeySet> keys = jwks.Current();
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "metrics.hpp"
#include "wisp/http/client.hpp"
#include "wisp/jwt/jws.hpp"
#include "wisp/status/clock.hpp"
#include "wisp/status/status.hpp"

namespace wisp::token {

inline constexpr size_t kDefaultJwksMaxBytes = 1 << 20;

// InvalidArgument naming `field` unless `url` is https://host[:port][/path].
absl::Status ValidateHttpsUrl(std::string_view url, std::string_view field);

class JwksFetcher {
 public:
  virtual ~JwksFetcher() = default;
  virtual absl::StatusOr<std::string> Fetch(const std::string& url) = 0;
};

struct HttpsFetchOptions {
  std::string ca_file;  // PEM bundle; "" = the system trust store
  std::chrono::milliseconds timeout{5000};
  size_t max_bytes = kDefaultJwksMaxBytes;
};

class HttpsJwksFetcher final : public JwksFetcher {
 public:
  // InvalidArgument naming the CA file when it cannot be read or parsed.
  static absl::StatusOr<std::unique_ptr<HttpsJwksFetcher>> Create(HttpsFetchOptions options);
  // Over a given client (a FakeClient in tests); options.ca_file is the client's business then.
  HttpsJwksFetcher(std::shared_ptr<http::Client> client, HttpsFetchOptions options)
      : client_(std::move(client)), options_(std::move(options)) {}
  absl::StatusOr<std::string> Fetch(const std::string& url) override;

 private:
  std::shared_ptr<http::Client> client_;
  HttpsFetchOptions options_;
};

class RemoteJwks {
 public:
  struct Options {
    std::string url;
    std::string issuer;  // for logs and metric labels
    std::chrono::seconds refresh_interval{300};
    std::chrono::seconds min_refetch_interval{30};
  };
  RemoteJwks(std::shared_ptr<JwksFetcher> fetcher, Options options, Clock& clock,
             TokenMetrics* metrics);

  std::shared_ptr<const jwt::KeySet> Current() const;
  absl::Status Refresh();
  void RefreshIfDue();
  // True when a refetch happened now and succeeded (the caller retries its verification).
  bool RefreshForUnknownKid();
  bool loaded() const;
  const Options& options() const { return options_; }

 private:
  absl::Status RefreshLocked();

  std::shared_ptr<JwksFetcher> fetcher_;
  const Options options_;
  Clock& clock_;
  TokenMetrics* metrics_;

  std::mutex fetch_mu_;  // one fetch at a time
  mutable std::mutex mu_;
  std::shared_ptr<const jwt::KeySet> keys_;
  bool loaded_ = false;
  std::chrono::steady_clock::time_point last_attempt_{};
  bool attempted_ = false;
};

}  // namespace wisp::token
