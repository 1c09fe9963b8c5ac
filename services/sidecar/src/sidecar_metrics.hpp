#pragma once
// Every metric wisp-sidecar exports, registered once (served on --metrics-address when set).
//
//   wisp_sidecar_requests_total{code}             token-url answers (200, 500)
//   wisp_sidecar_cache_total{result}              hit (answered from the cache) | miss
//   wisp_sidecar_sts_exchanges_total{outcome}     ok | rejected (4xx: IsRejection) | unavailable
//                                                 | token_file
//   wisp_sidecar_token_file_reloads_total         projected token (re)loads, kubelet swaps included
//
// Example:
//   SidecarMetrics metrics(metrics::Registry());
//   TokenServer server(file, sts, clock, {.metrics = &metrics});
#include <string_view>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>

#include "wisp/status/status.hpp"

namespace wisp::sidecar {

struct SidecarMetrics {
  explicit SidecarMetrics(prometheus::Registry& registry);

  // The exchange outcome label: ok, token_file (the projected token could not be read),
  // rejected (the STS refused: sidecar::IsRejection) or unavailable (the STS was not reached or
  // did not answer usefully: TLS, timeouts, 5xx, 408, 429).
  static std::string_view Outcome(const absl::Status& status, bool from_token_file);

  prometheus::Family<prometheus::Counter>& requests_total;
  prometheus::Counter& requests_ok;
  prometheus::Counter& requests_error;
  prometheus::Family<prometheus::Counter>& cache_total;
  prometheus::Counter& cache_hits;
  prometheus::Counter& cache_misses;
  prometheus::Family<prometheus::Counter>& sts_exchanges_total;
  prometheus::Counter& token_file_reloads_total;
};

}  // namespace wisp::sidecar
