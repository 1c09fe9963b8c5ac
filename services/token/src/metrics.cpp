#include "metrics.hpp"

#include <string>

namespace wisp::token {

TokenMetrics::TokenMetrics(prometheus::Registry& r)
    : issued_total(prometheus::BuildCounter()
                       .Name("wisp_token_issued_total")
                       .Help("Tokens signed, by algorithm (issued and exchanged)")
                       .Register(r)),
      issue_errors_total(prometheus::BuildCounter()
                             .Name("wisp_token_issue_errors_total")
                             .Help("Issue requests refused or failed, by reason")
                             .Register(r)),
      reviews_total(prometheus::BuildCounter()
                        .Name("wisp_token_reviews_total")
                        .Help("Token reviews, by result")
                        .Register(r)),
      exchanges_total(prometheus::BuildCounter()
                          .Name("wisp_token_exchanges_total")
                          .Help("RFC 8693 exchanges, by outcome (ok or the RFC 6749 error code)")
                          .Register(r)),
      key_rotations_total(prometheus::BuildCounter()
                              .Name("wisp_token_key_rotations_total")
                              .Help("Signing key rotations written by this replica")
                              .Register(r)
                              .Add({})),
      signing_key_age_seconds(prometheus::BuildGauge()
                                  .Name("wisp_token_signing_key_age_seconds")
                                  .Help("Age of the default algorithm's active signing key")
                                  .Register(r)
                                  .Add({})),
      key_rotation_period_seconds(prometheus::BuildGauge()
                                      .Name("wisp_token_key_rotation_period_seconds")
                                      .Help("Configured signing key rotation period")
                                      .Register(r)
                                      .Add({})),
      keys_published(prometheus::BuildGauge()
                         .Name("wisp_token_keys_published")
                         .Help("Public keys in the JWKS (active and retired)")
                         .Register(r)
                         .Add({})),
      jwks_fetches_total(prometheus::BuildCounter()
                             .Name("wisp_token_jwks_fetches_total")
                             .Help("Fetches of external issuers' JWKS by URL, by outcome")
                             .Register(r)),
      jwks_keys(prometheus::BuildGauge()
                    .Name("wisp_token_jwks_keys")
                    .Help("Keys held from an external issuer's JWKS URL (the last good set)")
                    .Register(r)),
      policy_reloads_total(prometheus::BuildCounter()
                               .Name("wisp_token_policy_reloads_total")
                               .Help("Policy file reloads, by outcome (error keeps the old policy)")
                               .Register(r)),
      policy_last_reload_success_timestamp_seconds(
          prometheus::BuildGauge()
              .Name("wisp_token_policy_last_reload_success_timestamp_seconds")
              .Help("Unix time the policy in force was loaded")
              .Register(r)
              .Add({})),
      issued_rs256_(issued_total.Add({{"alg", "RS256"}})),
      issued_es256_(issued_total.Add({{"alg", "ES256"}})) {}

prometheus::Counter& TokenMetrics::Issued(std::string_view alg) {
  if (alg == "RS256") return issued_rs256_;
  if (alg == "ES256") return issued_es256_;
  return issued_total.Add({{"alg", std::string(alg)}});
}
prometheus::Counter& TokenMetrics::IssueError(std::string_view reason) {
  return issue_errors_total.Add({{"reason", std::string(reason)}});
}
prometheus::Counter& TokenMetrics::Review(std::string_view result) {
  return reviews_total.Add({{"result", std::string(result)}});
}
prometheus::Counter& TokenMetrics::Exchange(std::string_view outcome) {
  return exchanges_total.Add({{"outcome", std::string(outcome)}});
}

}  // namespace wisp::token

namespace wisp::token {

prometheus::Counter& TokenMetrics::JwksFetch(std::string_view issuer, std::string_view outcome) {
  return jwks_fetches_total.Add(
      {{"issuer", std::string(issuer)}, {"outcome", std::string(outcome)}});
}
prometheus::Gauge& TokenMetrics::JwksKeys(std::string_view issuer) {
  return jwks_keys.Add({{"issuer", std::string(issuer)}});
}
prometheus::Counter& TokenMetrics::PolicyReload(std::string_view outcome) {
  return policy_reloads_total.Add({{"outcome", std::string(outcome)}});
}

}  // namespace wisp::token
