#include "populator_metrics.hpp"

namespace wisp::populator {

namespace {
prometheus::Histogram::BucketBoundaries DurationBuckets() {
  return {0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 3600};
}
}  // namespace

PopulatorMetrics::PopulatorMetrics(prometheus::Registry& registry)
    : progress_ratio(prometheus::BuildGauge()
                         .Name("wisp_populator_progress_ratio")
                         .Help("Import progress of a volume, 0 to 1")
                         .Register(registry)),
      bytes_read(prometheus::BuildCounter()
                     .Name("wisp_populator_bytes_read_total")
                     .Help("Source bytes read, as served")
                     .Register(registry)
                     .Add({})),
      bytes_written(prometheus::BuildCounter()
                        .Name("wisp_populator_bytes_written_total")
                        .Help("Data bytes written to volumes (holes excluded)")
                        .Register(registry)
                        .Add({})),
      jobs(prometheus::BuildCounter()
               .Name("wisp_populator_jobs_total")
               .Help("Population jobs by result: succeeded, failed, retried")
               .Register(registry)),
      jobs_succeeded(jobs.Add({{"result", "succeeded"}})),
      jobs_failed(jobs.Add({{"result", "failed"}})),
      jobs_retried(jobs.Add({{"result", "retried"}})),
      job_duration(prometheus::BuildHistogram()
                       .Name("wisp_populator_job_duration_seconds")
                       .Help("Duration of finished population jobs")
                       .Register(registry)
                       .Add({}, DurationBuckets())),
      jobs_in_progress(prometheus::BuildGauge()
                           .Name("wisp_populator_jobs_in_progress")
                           .Help("Population jobs running now")
                           .Register(registry)
                           .Add({})) {}

void PopulatorMetrics::RemoveProgress(const std::string& volume) {
  auto& g = progress_ratio.Add({{"volume", volume}});
  progress_ratio.Remove(&g);
}

}  // namespace wisp::populator
