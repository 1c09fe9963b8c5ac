#include "csi/csi_metrics.hpp"

namespace wisp::gateway::csi {
namespace {

const prometheus::Histogram::BucketBoundaries& Buckets() {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
  return kBuckets;
}

prometheus::Family<prometheus::Counter>& Rotations(prometheus::Registry& registry) {
  return prometheus::BuildCounter()
      .Name("wisp_gateway_token_rotations_total")
      .Help("Token volume rotations by the gateway, by result (ok|error)")
      .Register(registry);
}

prometheus::Family<prometheus::Counter>& Purges(prometheus::Registry& registry) {
  return prometheus::BuildCounter()
      .Name("wisp_gateway_projection_purges_total")
      .Help("Purges of old delete markers from KV bucket wisp_projections, by result (ok|error)")
      .Register(registry);
}

}  // namespace

CsiMetrics::CsiMetrics(prometheus::Registry& registry)
    : requests(prometheus::BuildCounter()
                   .Name("wisp_gateway_csi_requests_total")
                   .Help("CSI calls served, by method and gRPC code")
                   .Register(registry)),
      duration(prometheus::BuildHistogram()
                   .Name("wisp_gateway_csi_duration_seconds")
                   .Help("CSI handler latency in seconds, by method")
                   .Register(registry)),
      rotations_ok(Rotations(registry).Add({{"result", "ok"}})),
      rotations_error(Rotations(registry).Add({{"result", "error"}})),
      token_volumes(prometheus::BuildGauge()
                        .Name("wisp_gateway_token_volumes")
                        .Help("Token volumes currently published on this node")
                        .Register(registry)
                        .Add({})),
      purges_ok(Purges(registry).Add({{"result", "ok"}})),
      purges_error(Purges(registry).Add({{"result", "error"}})) {}

void CsiMetrics::Request(const std::string& method, absl::StatusCode code, double seconds) {
  requests.Add({{"method", method}, {"code", std::string(StatusCodeName(code))}}).Increment();
  duration.Add({{"method", method}}, Buckets()).Observe(seconds);
}

}  // namespace wisp::gateway::csi
