#include "sidecar_metrics.hpp"

#include "sts_client.hpp"

namespace wisp::sidecar {

SidecarMetrics::SidecarMetrics(prometheus::Registry& r)
    : requests_total(prometheus::BuildCounter()
                         .Name("wisp_sidecar_requests_total")
                         .Help("token-url requests answered, by HTTP status code")
                         .Register(r)),
      requests_ok(requests_total.Add({{"code", "200"}})),
      requests_error(requests_total.Add({{"code", "500"}})),
      cache_total(prometheus::BuildCounter()
                      .Name("wisp_sidecar_cache_total")
                      .Help("Access token lookups: hit = served from the cache, miss = waited for "
                            "an STS exchange")
                      .Register(r)),
      cache_hits(cache_total.Add({{"result", "hit"}})),
      cache_misses(cache_total.Add({{"result", "miss"}})),
      sts_exchanges_total(prometheus::BuildCounter()
                              .Name("wisp_sidecar_sts_exchanges_total")
                              .Help("STS exchanges attempted, by outcome (ok, rejected, "
                                    "unavailable, token_file)")
                              .Register(r)),
      token_file_reloads_total(prometheus::BuildCounter()
                                   .Name("wisp_sidecar_token_file_reloads_total")
                                   .Help("Loads of the projected token file (first read and "
                                         "every kubelet rotation)")
                                   .Register(r)
                                   .Add({})) {}

std::string_view SidecarMetrics::Outcome(const absl::Status& status, bool from_token_file) {
  if (status.ok()) return "ok";
  if (from_token_file) return "token_file";
  return IsRejection(status) ? "rejected" : "unavailable";
}

}  // namespace wisp::sidecar
