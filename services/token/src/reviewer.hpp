#pragma once
// Reviewer: verifies tokens wisp signed (wisp.v1.token.review, and the subject side of exchanges).
//
// Contract:
//   - Checks signature against the published keys (active + retired), iss = wisp's issuer, aud
//     (when the request names audiences), exp and nbf with the configured leeway.
//   - Refuses alg none, any alg but RS256/ES256, alg/key-type mismatches (HS256 keyed with a public
//     key included), unknown kids (including keys dropped after retirement), and tokens that claim
//     to be issued by a retired key after it was retired, or by a next key (published, not signing
//     yet).
//   - Review() never fails as a call: the verdict is in ReviewResponse (authenticated + error);
//     wisp_token_reviews_total{result="authenticated"|"unauthenticated"} counts them.
//
// Example:
//   Reviewer reviewer(keys, clock, metrics, {.issuer = url, .leeway = 60s});
//   v1::ReviewResponse r = reviewer.Review(request);
#include <chrono>
#include <string>
#include <vector>

#include "key_manager.hpp"
#include "metrics.hpp"
#include "wisp/jwt/jws.hpp"
#include "wisp/v1/token.pb.h"

namespace wisp::token {

class Reviewer {
 public:
  struct Options {
    std::string issuer;
    std::chrono::seconds leeway{60};
  };
  Reviewer(const KeyManager& keys, Clock& clock, TokenMetrics& metrics, Options options);

  v1::ReviewResponse Review(const v1::ReviewRequest& request) const;
  // Unauthenticated with the reason when the token is not a valid wisp token for `audiences`.
  absl::StatusOr<jwt::Verified> Verify(std::string_view token,
                                       const std::vector<std::string>& audiences) const;
  std::chrono::seconds leeway() const { return options_.leeway; }

 private:
  const KeyManager& keys_;
  Clock& clock_;
  TokenMetrics& metrics_;
  const Options options_;
};

// Fills a Subject from "sub" = system:serviceaccount:<ns>:<sa> and the kubernetes.io claim.
// InvalidArgument when sub is not a service account.
absl::StatusOr<v1::Subject> SubjectFromClaims(const nlohmann::json& claims);

}  // namespace wisp::token
