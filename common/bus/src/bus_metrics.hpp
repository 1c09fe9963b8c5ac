#pragma once
// The bus's metrics, declared in one place (names are a contract with dashboards and alerts).
// Children (one per label set) are cached so the hot path does no label-map lookups.
#include <array>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "wisp/status/status.hpp"

namespace wisp::bus {

inline const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
      0.05,   0.1,     0.25,   0.5,   1.0,    2.5,   5.0,  10.0};
  return kBuckets;
}

// One labelled series set: a counter per status code plus a latency histogram.
struct CallSeries {
  std::array<prometheus::Counter*, 17> by_code{};
  prometheus::Histogram* duration = nullptr;
  prometheus::Labels labels;  // shared by both metrics
};

// Caches CallSeries per key (a subject, or "service/endpoint").
class CallSeriesCache {
 public:
  CallSeriesCache(prometheus::Family<prometheus::Counter>& counters,
                  prometheus::Family<prometheus::Histogram>& durations)
      : counters_(counters), durations_(durations) {}

  // `labels` are the labels shared by both metrics (the counter adds "code").
  CallSeries& Get(std::string_view key, const prometheus::Labels& labels) {
    std::lock_guard lock(mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    CallSeries& s = cache_[std::string(key)];
    s.duration = &durations_.Add(labels, LatencyBuckets());
    s.labels = labels;
    return s;
  }

  // The series for `key` if already created (no allocation on the hot path).
  CallSeries* Find(std::string_view key) {
    std::lock_guard lock(mu_);
    auto it = cache_.find(key);
    return it == cache_.end() ? nullptr : &it->second;
  }

  void Record(CallSeries& s, absl::StatusCode code, double seconds) {
    const auto i = static_cast<size_t>(code) < s.by_code.size() ? static_cast<size_t>(code) : 2;
    prometheus::Counter* c;
    {
      std::lock_guard lock(mu_);
      if (s.by_code[i] == nullptr) {
        prometheus::Labels l = s.labels;
        l["code"] = std::string(StatusCodeName(static_cast<absl::StatusCode>(i)));
        s.by_code[i] = &counters_.Add(l);
      }
      c = s.by_code[i];
    }
    c->Increment();
    s.duration->Observe(seconds);
  }

 private:
  prometheus::Family<prometheus::Counter>& counters_;
  prometheus::Family<prometheus::Histogram>& durations_;
  std::mutex mu_;
  std::map<std::string, CallSeries, std::less<>> cache_;
};

// Client side and connection metrics of one NatsBus.
struct BusClientMetrics {
  explicit BusClientMetrics(prometheus::Registry& r)
      : connected(prometheus::BuildGauge()
                      .Name("wisp_bus_connected")
                      .Help("1 while the NATS connection is up, else 0")
                      .Register(r)
                      .Add({})),
        reconnects(prometheus::BuildCounter()
                       .Name("wisp_bus_reconnects_total")
                       .Help("NATS reconnections after a lost connection")
                       .Register(r)
                       .Add({})),
        requests(prometheus::BuildCounter()
                     .Name("wisp_bus_client_requests_total")
                     .Help("Bus requests sent, by subject and resulting status code")
                     .Register(r)),
        durations(prometheus::BuildHistogram()
                      .Name("wisp_bus_client_request_duration_seconds")
                      .Help("Bus request round trip as the caller sees it, by subject")
                      .Register(r)),
        cache(requests, durations) {}

  void Record(std::string_view subject, absl::StatusCode code, double seconds) {
    CallSeries* s = cache.Find(subject);
    if (s == nullptr) s = &cache.Get(subject, {{"subject", std::string(subject)}});
    cache.Record(*s, code, seconds);
  }

  prometheus::Gauge& connected;
  prometheus::Counter& reconnects;
  prometheus::Family<prometheus::Counter>& requests;
  prometheus::Family<prometheus::Histogram>& durations;
  CallSeriesCache cache;
};

// Server side metrics of bus::Service endpoints.
struct BusServerMetrics {
  explicit BusServerMetrics(prometheus::Registry& r)
      : requests(prometheus::BuildCounter()
                     .Name("wisp_bus_requests_total")
                     .Help("Bus requests served, by service, endpoint and status code")
                     .Register(r)),
        durations(prometheus::BuildHistogram()
                      .Name("wisp_bus_request_duration_seconds")
                      .Help("Time a bus endpoint handler took, by service and endpoint")
                      .Register(r)),
        cache(requests, durations) {}

  prometheus::Family<prometheus::Counter>& requests;
  prometheus::Family<prometheus::Histogram>& durations;
  CallSeriesCache cache;
};

}  // namespace wisp::bus
