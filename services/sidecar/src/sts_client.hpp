#pragma once
// StsClient: exchanges the pod's token at wisp's STS (RFC 8693) for an access token.
//
// Contract:
//   - Exchange() POSTs form-encoded grant_type token-exchange, subject_token, subject_token_type
//     ...:jwt, requested_token_type ...:access_token, audience and scope, and returns the token
//     with its lifetime. A non-200 answer is a Status with http::StatusOf's code (400
//     InvalidArgument, 401 Unauthenticated, 403 PermissionDenied, 5xx Unavailable, ...) whose
//     message adds the RFC 6749 error code and description; transport failures carry the
//     client's mapping too (an untrusted certificate is FailedPrecondition). IsRejection() tells
//     the STS's refusals (400, 401, 403, 404, 409, 416) from failures to reach it. A non-200
//     answer with a Retry-After header (delay-seconds or an HTTP-date, RFC 9110 section 10.2.3;
//     wisp's gateway sends it with 429) carries it in the Status: RetryAfterOf().
//   - HttpStsClient speaks HTTPS only, through http::Client (common/http), verifying the server
//     against the CA (file or PEM text; neither = the system trust store) and its host name;
//     `timeout` bounds each exchange. The subject token is never logged nor put in a Status.
//
//   auto sts = HttpStsClient::Create({.url = "https://gw:8443/v1/token", .ca_file = ca,
//                                     .audience = "storage.wisp.dev"});
//   WISP_ASSIGN_OR_RETURN(AccessToken t, (*sts)->Exchange(jwt));
//   // unit tests: HttpStsClient::Create(options, std::make_shared<http::testing::FakeClient>())
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "wisp/http/client.hpp"
#include "wisp/status/status.hpp"

namespace wisp::sidecar {

struct AccessToken {
  std::string access_token;
  std::string token_type = "Bearer";
  std::chrono::seconds expires_in{0};
};

class StsClient {
 public:
  virtual ~StsClient() = default;
  virtual absl::StatusOr<AccessToken> Exchange(const std::string& subject_token) = 0;
};

struct StsOptions {
  std::string url;      // https://host:port/v1/token
  std::string ca_file;  // PEM CA bundle that signed the gateway's certificate
  std::string ca_pem;   // or the bundle's text (wisp-policy injects it as WISP_STS_CA_PEM)
  std::string audience;
  std::string scope;
  std::chrono::seconds timeout{10};
};

class HttpStsClient final : public StsClient {
 public:
  // InvalidArgument naming the flag (sts-url, ca-file, ca-pem, audience) for bad options.
  static absl::StatusOr<std::unique_ptr<HttpStsClient>> Create(StsOptions options);
  // Over a given client (a FakeClient in tests): the options' CA is the client's business then.
  static absl::StatusOr<std::unique_ptr<HttpStsClient>> Create(
      StsOptions options, std::shared_ptr<http::Client> client);
  absl::StatusOr<AccessToken> Exchange(const std::string& subject_token) override;

 private:
  HttpStsClient(StsOptions options, std::shared_ptr<http::Client> client)
      : options_(std::move(options)), client_(std::move(client)) {}
  StsOptions options_;
  std::shared_ptr<http::Client> client_;
};

// True when Exchange()'s Status says the STS refused the exchange (its code is one http::StatusOf
// gives only for a 4xx answer: InvalidArgument, Unauthenticated, PermissionDenied, NotFound,
// Aborted, OutOfRange); false for failures to reach it or to get a usable answer.
bool IsRejection(const absl::Status& status);

// The Retry-After an STS answer carried (see Exchange()), or nullopt.
std::optional<std::chrono::seconds> RetryAfterOf(const absl::Status& status);
// `status` carrying `retry_after` (a Status payload; the message is unchanged).
absl::Status WithRetryAfter(absl::Status status, std::chrono::seconds retry_after);
// A Retry-After header value: delay-seconds, or an IMF-fixdate HTTP-date counted from `now` (a
// date in the past is 0 s); nullopt when it is neither.
std::optional<std::chrono::seconds> ParseRetryAfter(std::string_view value,
                                                    std::chrono::system_clock::time_point now);

// Form encoding for one value (RFC 3986 unreserved characters kept, the rest %XX).
std::string FormEscape(std::string_view value);

}  // namespace wisp::sidecar
