#pragma once
// TokenIssuer: where a token volume's `wisp` tokens come from. BusTokenIssuer asks wisp-token on
// subjects::kTokenIssue (IssueRequest -> IssueResponse), and several at once on
// subjects::kTokenIssueBatch; tests inject a fake.
//
// Contract: Issue() returns the token with its issue and expiry times, or the bus/service error
// unchanged (Unavailable when wisp-token does not answer, InvalidArgument when it refuses).
// IssueBatch() returns one result per spec, in order: each entry's token or its own refusal; a
// call that fails as a whole (no responder, timeout) is every entry's result.
//
// Example:
//   BusTokenIssuer issuer(bus, std::chrono::seconds(5));
//   WISP_ASSIGN_OR_RETURN(IssuedToken t, issuer.Issue(subject, "vault", 900, kubelet_token));
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "wisp/bus/bus.hpp"
#include "wisp/status/status.hpp"
#include "wisp/v1/common.pb.h"

namespace wisp::gateway::csi {

struct IssuedToken {
  std::string token;
  int64_t issued_unix = 0;
  int64_t expires_unix = 0;
};

struct IssueSpec {
  v1::Subject subject;
  std::string audience;
  int64_t expiration_seconds = 0;
  std::string pod_proof;
};

class TokenIssuer {
 public:
  virtual ~TokenIssuer() = default;
  // An empty audience asks for the issuer's default audiences. `pod_proof`: the kubelet's token
  // for the subject's pod ("" = none), sent as IssueRequest.pod_proof.
  virtual absl::StatusOr<IssuedToken> Issue(const v1::Subject& subject, const std::string& audience,
                                            int64_t expiration_seconds,
                                            const std::string& pod_proof) = 0;
  // One after the other through Issue(), unless the issuer can do better.
  virtual std::vector<absl::StatusOr<IssuedToken>> IssueBatch(const std::vector<IssueSpec>& specs);
};

class BusTokenIssuer final : public TokenIssuer {
 public:
  BusTokenIssuer(bus::Requester& requester, std::chrono::milliseconds timeout)
      : requester_(requester), timeout_(timeout) {}
  absl::StatusOr<IssuedToken> Issue(const v1::Subject& subject, const std::string& audience,
                                    int64_t expiration_seconds,
                                    const std::string& pod_proof) override;
  // kMaxBatch entries per wisp.v1.token.issue_batch request (wisp-token takes up to 256).
  std::vector<absl::StatusOr<IssuedToken>> IssueBatch(const std::vector<IssueSpec>& specs) override;
  static constexpr size_t kMaxBatch = 64;

 private:
  bus::Requester& requester_;
  std::chrono::milliseconds timeout_;
};

}  // namespace wisp::gateway::csi
