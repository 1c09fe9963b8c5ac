#pragma once
// Metrics and health for every wisp binary.
//
// Contract:
//   - One prometheus::Registry per process (Registry()); components declare their metrics in one
//     struct built from it (`struct TokenIssuerMetrics`), names wisp_<service>_<thing>_total.
//   - Endpoint serves on its own port: GET /metrics (Prometheus text format), /healthz (200 while
//     the process runs), /readyz (200 when every readiness check passes, else 503 naming the
//     failing checks).
//   - Every process exports wisp_build_info{service,version} 1 and process_* gauges (resident
//     memory, start time, cpu seconds, open fds).
//
// Example:
//   metrics::Endpoint endpoint(metrics::Registry(), "wisp-token");
//   endpoint.AddReadinessCheck("bus", [&] { return bus.State() == bus::ConnectionState::kConnected
//                                                  ? absl::OkStatus()
//                                                  : absl::UnavailableError("not connected"); });
//   WISP_RETURN_IF_ERROR(endpoint.Start("0.0.0.0:9090"));
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "wisp/status/status.hpp"

namespace wisp::metrics {

// The process registry.
prometheus::Registry& Registry();
std::shared_ptr<prometheus::Registry> SharedRegistry();

// Renders a registry in the Prometheus text exposition format.
std::string Render(const prometheus::Registry& registry);

// Latency buckets (seconds) for sub-millisecond to multi-second operations.
const prometheus::Histogram::BucketBoundaries& LatencyBuckets();

class Endpoint {
 public:
  Endpoint(std::shared_ptr<prometheus::Registry> registry, std::string service);
  ~Endpoint();

  using Check = std::function<absl::Status()>;
  void AddReadinessCheck(std::string name, Check check);

  // "host:port" (port 0 = free port). InvalidArgument naming "metrics-address" when malformed.
  absl::Status Start(const std::string& address);
  uint16_t port() const;
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace wisp::metrics
