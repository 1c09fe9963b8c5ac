#pragma once
// TokenIssuer: where a token volume's `wisp` tokens come from. BusTokenIssuer asks wisp-token on
// subjects::kTokenIssue (IssueRequest -> IssueResponse); tests inject a fake.
//
// Contract: Issue() returns the token with its issue and expiry times, or the bus/service error
// unchanged (Unavailable when wisp-token does not answer, InvalidArgument when it refuses).
//
// Example:
//   BusTokenIssuer issuer(bus, std::chrono::seconds(5));
//   WISP_ASSIGN_OR_RETURN(IssuedToken t, issuer.Issue(subject, "vault", 900, kubelet_token));
#include <chrono>
#include <cstdint>
#include <string>

#include "wisp/bus/bus.hpp"
#include "wisp/status/status.hpp"
#include "wisp/v1/common.pb.h"

namespace wisp::gateway::csi {

struct IssuedToken {
  std::string token;
  int64_t issued_unix = 0;
  int64_t expires_unix = 0;
};

class TokenIssuer {
 public:
  virtual ~TokenIssuer() = default;
  // An empty audience asks for the issuer's default audiences. `pod_proof`: the kubelet's token
  // for the subject's pod ("" = none), sent as IssueRequest.pod_proof.
  virtual absl::StatusOr<IssuedToken> Issue(const v1::Subject& subject, const std::string& audience,
                                            int64_t expiration_seconds,
                                            const std::string& pod_proof) = 0;
};

class BusTokenIssuer final : public TokenIssuer {
 public:
  BusTokenIssuer(bus::Requester& requester, std::chrono::milliseconds timeout)
      : requester_(requester), timeout_(timeout) {}
  absl::StatusOr<IssuedToken> Issue(const v1::Subject& subject, const std::string& audience,
                                    int64_t expiration_seconds,
                                    const std::string& pod_proof) override;

 private:
  bus::Requester& requester_;
  std::chrono::milliseconds timeout_;
};

}  // namespace wisp::gateway::csi
