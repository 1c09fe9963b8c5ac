#pragma once
// MarkerPurger: removes old delete markers from KV bucket wisp_projections, from a timer thread of
// its own, never on a CSI call. NodeUnpublishVolume deletes the volume's key, JetStream keeps a
// delete marker for it, and volume ids are unique per pod, so without this the bucket's stream
// (and nats-server's memory) grows by one marker for every pod that ever had a token volume.
//
// Contract:
//   - RunIfDue() purges (KeyValue::PurgeDeletes(older_than)) when `interval` has passed since the
//     last attempt, the first time one interval after construction (a DaemonSet rollout does not
//     purge from every node at once); it returns whether it ran. Time comes from the injected
//     Clock (Steady()); unit tests advance a FakeClock and call RunIfDue() instead of Start().
//   - An error is logged and counted (wisp_gateway_projection_purges_total{result="error"}), never
//     fatal; the next attempt is one interval later. Success counts result="ok".
//   - interval 0 disables purging: RunIfDue() never runs and Start() starts no thread.
//   - Every node gateway runs one. One would be enough, but a purge is idempotent (a marker that
//     is already gone is simply not found again), so concurrent purges from several nodes are
//     harmless; they cost one scan of the bucket each.
//   - Stop() returns after a running purge has finished; the destructor calls it.
//
// Example (CsiServer::Start):
//   MarkerPurger purger(*kv, clock, {.interval = 1h, .older_than = 10min}, metrics);
//   purger.Start();
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "csi/csi_metrics.hpp"
#include "wisp/bus/bus.hpp"
#include "wisp/status/clock.hpp"
#include "wisp/status/status.hpp"

namespace wisp::gateway::csi {

struct MarkerPurgerOptions {
  std::chrono::milliseconds interval = std::chrono::hours(1);       // 0 = never purge
  std::chrono::milliseconds older_than = std::chrono::minutes(10);  // keep younger markers
};

// InvalidArgument naming the flag (projection-purge-interval: 0 or at least 1s;
// projection-purge-age: not negative).
absl::Status ValidateMarkerPurgerOptions(const MarkerPurgerOptions& options);

class MarkerPurger {
 public:
  MarkerPurger(bus::KeyValue& kv, const Clock& clock, MarkerPurgerOptions options,
               CsiMetrics& metrics);
  ~MarkerPurger();
  MarkerPurger(const MarkerPurger&) = delete;
  MarkerPurger& operator=(const MarkerPurger&) = delete;

  bool RunIfDue();

  void Start();
  void Stop();

 private:
  bus::KeyValue& kv_;
  const Clock& clock_;
  MarkerPurgerOptions options_;
  CsiMetrics& metrics_;
  std::chrono::steady_clock::time_point next_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace wisp::gateway::csi
