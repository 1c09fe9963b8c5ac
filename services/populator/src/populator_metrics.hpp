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

#include <string>

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

}  // namespace wisp::populator
