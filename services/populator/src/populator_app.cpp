#include "populator_app.hpp"

#include <unistd.h>

#include <filesystem>

#include "wisp/bus/subjects.hpp"
#include "wisp/log/log.hpp"

namespace wisp::populator {

void AddPopulatorFlags(config::Flags& flags, PopulatorSettings& s) {
  auto positive = [](const int64_t& v) {
    return v > 0 ? absl::OkStatus() : absl::InvalidArgumentError("must be > 0");
  };
  flags.String("volume-root", &s.volume_root,
               "Directory holding one directory (with disk.img) per volume.");
  flags.String("node-name", &s.node_name,
               "This node's name: jobs for it and node-routed subjects (default: hostname).");
  flags.Int("workers", &s.workers, "Population jobs run at once.", positive);
  flags.Int("max-attempts", &s.max_attempts,
            "Attempts before a transiently failing job fails the volume.", positive);
  flags.Duration("job-ack-wait", &s.ack_wait,
                 "How long a job stays leased without a heartbeat (redelivery after a crash).");
  flags.Duration("retry-backoff", &s.backoff,
                 "First retry delay after a transient error (doubles).");
  flags.Duration("retry-backoff-max", &s.backoff_max, "Longest retry delay.");
  flags.Duration("http-timeout", &s.http_timeout, "Connect and read timeout for image sources.");
  flags.String("qemu-img", &s.qemu_img,
               "qemu-img binary used to convert the qcow2 images the built-in streaming converter "
               "leaves alone (extended L2 entries, zstd-compressed clusters).");
  flags.Int("checkpoint-interval", &s.checkpoint,
            "Bytes between resume checkpoints of a raw download.", positive);
  flags.Duration("checkpoint-min-interval", &s.checkpoint_gap,
                 "Least time between two checkpoints (each is an fdatasync).");
  flags.Duration("upload-idle-timeout", &s.upload_idle,
                 "An upload that sends no data this long is discarded (the volume goes back to "
                 "UploadReady).");
  flags.Duration("node-lost-after", &s.node_lost_after,
                 "A node on which no populator has answered this long is lost: its volumes still "
                 "waiting for population fail with a message saying so (their bytes are "
                 "node-local, so no other node can make them). 0 never gives up on a node.");
  flags.Duration("node-check-interval", &s.node_check_interval,
                 "How often each populator asks the nodes with waiting volumes whether a "
                 "populator answers there.",
                 [](const std::chrono::milliseconds& d) {
                   return d.count() > 0 ? absl::OkStatus()
                                        : absl::InvalidArgumentError("must be > 0");
                 });
}

absl::Status CheckPopulatorSettings(PopulatorSettings& s) {
  if (s.node_name.empty()) {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    s.node_name = host;
  }
  WISP_RETURN_IF_ERROR(ValidateNodeName(s.node_name, "node-name"));
  std::error_code ec;
  std::filesystem::create_directories(s.volume_root, ec);
  if (ec) return absl::InvalidArgumentError("volume-root: " + ec.message());
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PopulatorApp>> PopulatorApp::Start(const PopulatorSettings& s,
                                                                  runtime::Process& process) {
  using namespace std::chrono_literals;
  std::unique_ptr<PopulatorApp> app(new PopulatorApp());
  bus::Bus& bus = process.bus();
  WISP_ASSIGN_OR_RETURN(app->volumes_,
                        process.OpenBucket({.name = std::string(bus::buckets::kVolumes)}));
  WISP_ASSIGN_OR_RETURN(app->sources_,
                        process.OpenBucket({.name = std::string(bus::buckets::kSources)}));
  Clock& clock = SystemClock::Instance();
  app->metrics_ = std::make_unique<PopulatorMetrics>(process.registry());
  app->importer_ = std::make_unique<Importer>(
      Importer::Options{.qemu_img = s.qemu_img,
                        .checkpoint_bytes = static_cast<uint64_t>(s.checkpoint),
                        .checkpoint_min_interval = s.checkpoint_gap});
  app->service_ = std::make_unique<VolumeService>(
      bus, *app->volumes_, *app->sources_, *app->metrics_, clock,
      VolumeServiceConfig{.node_name = s.node_name, .volume_root = s.volume_root});
  app->runner_ = std::make_unique<JobRunner>(
      bus.Js(), app->service_->store(), *app->importer_, *app->metrics_, clock,
      JobRunnerConfig{.node_name = s.node_name,
                      .volume_root = s.volume_root,
                      .max_attempts = static_cast<int>(s.max_attempts),
                      .backoff_base = s.backoff,
                      .backoff_max = s.backoff_max,
                      .ack_wait = std::chrono::duration_cast<std::chrono::seconds>(s.ack_wait),
                      .heartbeat_interval = std::max(s.ack_wait / 4, 100ms),
                      .http_timeout = s.http_timeout});
  app->uploads_ = std::make_unique<UploadService>(
      bus, app->service_->store(), *app->importer_, *app->metrics_, clock,
      UploadServiceConfig{
          .node_name = s.node_name,
          .volume_root = s.volume_root,
          .idle_timeout = s.upload_idle,
          .stale_after = std::max<std::chrono::milliseconds>(2 * s.upload_idle, 10s)});
  WISP_RETURN_IF_ERROR(process.EnsureStream(JobRunner::StreamConfig()));
  WISP_ASSIGN_OR_RETURN(
      bus::Service * micro,
      process.RegisterService("volume population: import, blank, clone, upload; node " +
                              s.node_name));
  WISP_RETURN_IF_ERROR(app->service_->Serve(micro));
  WISP_RETURN_IF_ERROR(app->uploads_->Serve(micro));
  WISP_RETURN_IF_ERROR(app->runner_->StartWorkers(static_cast<int>(s.workers)));
  app->lost_nodes_ =
      std::make_unique<LostNodeSweeper>(app->service_->store(), bus, clock, *app->metrics_,
                                        LostNodeConfig{.node_name = s.node_name,
                                                       .lost_after = s.node_lost_after,
                                                       .interval = s.node_check_interval});
  app->lost_nodes_->Start();
  SPDLOG_LOGGER_INFO(log::Get("populator"), "serving volumes of node {} from {} with {} workers",
                     s.node_name, s.volume_root, s.workers);
  return app;
}

PopulatorApp::~PopulatorApp() { Stop(); }

void PopulatorApp::Stop() {
  if (lost_nodes_) lost_nodes_->Stop();
  if (uploads_) uploads_->Stop();  // running uploads end; their volumes go back to UploadReady
  if (runner_)
    runner_->Stop();  // running imports hand their jobs back; raw downloads keep
                      // their checkpoints
}

}  // namespace wisp::populator
