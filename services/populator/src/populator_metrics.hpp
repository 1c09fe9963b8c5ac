#pragma once
// Every populator metric, registered once (names are the dashboards' and alerts' contract):
//   wisp_populator_progress_ratio{volume}      gauge 0..1 while a volume imports (1 when done)
//   wisp_populator_bytes_read_total            source bytes read, as served
//   wisp_populator_bytes_written_total         data bytes written to volumes (holes excluded)
//   wisp_populator_jobs_total{result}          succeeded | failed | retried
//   wisp_populator_job_duration_seconds        histogram of finished jobs (succeeded or failed)
//   wisp_populator_jobs_in_progress            gauge
//
//   PopulatorMetrics metrics(wisp::metrics::Registry());
//   metrics.Progress("v-1234").Set(0.45);
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "importer.hpp"
#include "wisp/status/clock.hpp"

namespace wisp::populator {

struct PopulatorMetrics {
  explicit PopulatorMetrics(prometheus::Registry& registry);

  prometheus::Gauge& Progress(const std::string& volume) {
    return progress_ratio.Add({{"volume", volume}});
  }
  void RemoveProgress(const std::string& volume);

  prometheus::Family<prometheus::Gauge>& progress_ratio;
  prometheus::Counter& bytes_read;
  prometheus::Counter& bytes_written;
  prometheus::Family<prometheus::Counter>& jobs;
  prometheus::Counter& jobs_succeeded;
  prometheus::Counter& jobs_failed;
  prometheus::Counter& jobs_retried;
  prometheus::Histogram& job_duration;
  prometheus::Gauge& jobs_in_progress;
};

// What an import (a job or an upload) reports on each progress callback: the bytes read and
// written since the last call go to the counters, the ratio to the volume's gauge (held below 1
// until the volume is complete), and Record() says whether a status write to KV is due: at most
// every `interval` while downloading, always at the other stages.
class ImportMeter {
 public:
  ImportMeter(PopulatorMetrics& metrics, const std::string& volume, const Clock& clock,
              std::chrono::milliseconds interval)
      : metrics_(metrics),
        gauge_(metrics.Progress(volume)),
        clock_(clock),
        interval_(interval),
        last_status_(clock.Steady()) {}

  bool Record(const ImportProgress& p) {
    if (p.bytes_read >= read_) {
      metrics_.bytes_read.Increment(static_cast<double>(p.bytes_read - read_));
      read_ = p.bytes_read;
    }
    if (p.bytes_written >= written_) {
      metrics_.bytes_written.Increment(static_cast<double>(p.bytes_written - written_));
      written_ = p.bytes_written;
    }
    if (auto r = p.Ratio()) gauge_.Set(std::min(*r, 0.9999));
    const auto now = clock_.Steady();
    if (now - last_status_ < interval_ && p.stage == "download") return false;
    last_status_ = now;
    return true;
  }
  // The volume is complete: the gauge shows 1.
  void Done() { gauge_.Set(1.0); }

 private:
  PopulatorMetrics& metrics_;
  prometheus::Gauge& gauge_;
  const Clock& clock_;
  const std::chrono::milliseconds interval_;
  std::chrono::steady_clock::time_point last_status_;
  uint64_t read_ = 0, written_ = 0;
};

}  // namespace wisp::populator
