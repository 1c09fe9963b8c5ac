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
                         .Add({})) {}

prometheus::Counter& TokenMetrics::Issued(std::string_view alg) {
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
