#pragma once
// StsClient: exchanges the pod's token at wisp's STS (RFC 8693) for an access token.
//
// Contract:
//   - Exchange() POSTs form-encoded grant_type token-exchange, subject_token, subject_token_type
//     ...:jwt, requested_token_type ...:access_token, audience and scope, and returns the token
//     with its lifetime. An RFC 6749 error answer becomes a Status whose message carries the error
//     code and description (PermissionDenied for 4xx, Unavailable for 5xx and transport errors).
//   - HttpStsClient speaks HTTPS only, verifying the server against the CA file (and host name).
//     cpprestsdk exceptions are caught here and never cross the interface.
//
//   auto sts = HttpStsClient::Create({.url = "https://gw:8443/v1/token", .ca_file = ca,
//                                     .audience = "storage.wisp.dev"});
//   WISP_ASSIGN_OR_RETURN(AccessToken t, (*sts)->Exchange(jwt));
#include <chrono>
#include <memory>
#include <string>

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
  static absl::StatusOr<std::unique_ptr<HttpStsClient>> Create(StsOptions options);
  ~HttpStsClient() override;
  absl::StatusOr<AccessToken> Exchange(const std::string& subject_token) override;

  struct Impl;

 private:
  explicit HttpStsClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Form encoding for one value (RFC 3986 unreserved characters kept, the rest %XX).
std::string FormEscape(std::string_view value);

}  // namespace wisp::sidecar
