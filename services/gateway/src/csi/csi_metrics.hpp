#pragma once
// CsiMetrics: every metric of the gateway's CSI endpoint, registered in one constructor.
//
//   wisp_gateway_csi_requests_total{method,code}      every CSI call, by gRPC code name
//   wisp_gateway_csi_duration_seconds{method}         handler latency (histogram)
//   wisp_gateway_token_rotations_total{result}        ok | error, for wisp-issued token volumes
//   wisp_gateway_token_volumes                        token volumes published on this node (gauge)
//   wisp_gateway_projection_purges_total{result}      ok | error, purges of old delete markers
//                                                     from wisp_projections (MarkerPurger)
//
// Example:
//   CsiMetrics metrics(registry);
//   metrics.Request("NodePublishVolume", absl::StatusCode::kOk, 0.004);
#include <mutex>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "wisp/status/status.hpp"

namespace wisp::gateway::csi {

struct CsiMetrics {
  explicit CsiMetrics(prometheus::Registry& registry);

  // Counts one call and observes its duration.
  void Request(const std::string& method, absl::StatusCode code, double seconds);

  prometheus::Family<prometheus::Counter>& requests;
  prometheus::Family<prometheus::Histogram>& duration;
  prometheus::Counter& rotations_ok;
  prometheus::Counter& rotations_error;
  prometheus::Gauge& token_volumes;
  prometheus::Counter& purges_ok;
  prometheus::Counter& purges_error;
};

}  // namespace wisp::gateway::csi
