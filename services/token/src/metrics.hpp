#pragma once
// Every metric wisp-token exports, registered once (names are the dashboards' contract).
#include <string_view>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

namespace wisp::token {

struct TokenMetrics {
  explicit TokenMetrics(prometheus::Registry& registry);

  prometheus::Counter& Issued(std::string_view alg);
  prometheus::Counter& IssueError(std::string_view reason);
  prometheus::Counter& Review(std::string_view result);
  prometheus::Counter& Exchange(std::string_view outcome);
  prometheus::Counter& JwksFetch(std::string_view issuer, std::string_view outcome);
  prometheus::Gauge& JwksKeys(std::string_view issuer);
  prometheus::Counter& PolicyReload(std::string_view outcome);

  prometheus::Family<prometheus::Counter>& issued_total;        // wisp_token_issued_total{alg}
  prometheus::Family<prometheus::Counter>& issue_errors_total;  // {reason}
  prometheus::Family<prometheus::Counter>& reviews_total;       // {result}
  prometheus::Family<prometheus::Counter>& exchanges_total;     // {outcome}
  prometheus::Counter& key_rotations_total;
  prometheus::Gauge& signing_key_age_seconds;
  prometheus::Gauge& key_rotation_period_seconds;
  prometheus::Gauge& keys_published;  // wisp_token_keys_published: keys in the JWKS
  // External issuers' JWKS by URL: fetches by outcome, keys held.
  prometheus::Family<prometheus::Counter>& jwks_fetches_total;  // {issuer, outcome}
  prometheus::Family<prometheus::Gauge>& jwks_keys;             // {issuer}
  // Policy file reloads (SIGHUP or change): ok, or error (the old policy stays).
  prometheus::Family<prometheus::Counter>& policy_reloads_total;  // {outcome}
  prometheus::Gauge& policy_last_reload_success_timestamp_seconds;

 private:
  // The issue path's counters, looked up once (a Family::Add per token costs a map build and a
  // lock).
  prometheus::Counter& issued_rs256_;
  prometheus::Counter& issued_es256_;
};

}  // namespace wisp::token
