// wisp-populator: serves wisp.v1.volume.* and runs this node's population jobs until SIGTERM.
#include <unistd.h>

#include <filesystem>

#include "importer.hpp"
#include "job_runner.hpp"
#include "populator_metrics.hpp"
#include "upload_service.hpp"
#include "volume_service.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/log/log.hpp"
#include "wisp/runtime/runtime.hpp"

int main(int argc, char** argv) {
  using namespace wisp;
  using namespace std::chrono_literals;
  const char* kName = "wisp-populator";
  runtime::CommonSettings common{.metrics_address = "0.0.0.0:9093"};
  std::string volume_root = "/var/lib/wisp/volumes", node_name, qemu_img = "qemu-img";
  int64_t workers = 2, max_attempts = 5, checkpoint = 64ll << 20;
  std::chrono::milliseconds checkpoint_gap = 2s, ack_wait = 30s, backoff = 2s, backoff_max = 1min,
                            http_timeout = 60s, upload_idle = 60s;
  auto positive = [](const int64_t& v) {
    return v > 0 ? absl::OkStatus() : absl::InvalidArgumentError("must be > 0");
  };
  config::Flags flags(kName, "volume population: durable import jobs, blank volumes, clones");
  runtime::AddCommonFlags(flags, common);
  flags.String("volume-root", &volume_root,
               "Directory holding one directory (with disk.img) per volume.");
  flags.String("node-name", &node_name,
               "This node's name: jobs for it and node-routed subjects (default: hostname).");
  flags.Int("workers", &workers, "Population jobs run at once.", positive);
  flags.Int("max-attempts", &max_attempts,
            "Attempts before a transiently failing job fails the volume.", positive);
  flags.Duration("job-ack-wait", &ack_wait,
                 "How long a job stays leased without a heartbeat (redelivery after a crash).");
  flags.Duration("retry-backoff", &backoff, "First retry delay after a transient error (doubles).");
  flags.Duration("retry-backoff-max", &backoff_max, "Longest retry delay.");
  flags.Duration("http-timeout", &http_timeout, "Connect and read timeout for image sources.");
  flags.String("qemu-img", &qemu_img,
               "qemu-img binary used to convert the qcow2 images the built-in streaming converter "
               "leaves alone (extended L2 entries, zstd-compressed clusters).");
  flags.Int("checkpoint-interval", &checkpoint,
            "Bytes between resume checkpoints of a raw download.", positive);
  flags.Duration("checkpoint-min-interval", &checkpoint_gap,
                 "Least time between two checkpoints (each is an fdatasync).");
  flags.Duration("upload-idle-timeout", &upload_idle,
                 "An upload that sends no data this long is discarded (the volume goes back to "
                 "UploadReady).");
  flags.ParseOrExit(argc, argv);
  if (node_name.empty()) {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    node_name = host;
  }
  if (auto st = populator::ValidateNodeName(node_name, "node-name"); !st.ok())
    return runtime::Fail(kName, st);
  std::error_code ec;
  std::filesystem::create_directories(volume_root, ec);
  if (ec) return runtime::Fail(kName, absl::InvalidArgumentError("volume-root: " + ec.message()));

  auto process = runtime::Process::Start(kName, common);
  if (!process.ok()) return runtime::Fail(kName, process.status());
  bus::Bus& bus = (*process)->bus();
  auto volumes = (*process)->OpenBucket({.name = std::string(bus::buckets::kVolumes)});
  if (!volumes.ok()) return runtime::Fail(kName, volumes.status());
  auto sources = (*process)->OpenBucket({.name = std::string(bus::buckets::kSources)});
  if (!sources.ok()) return runtime::Fail(kName, sources.status());
  Clock& clock = SystemClock::Instance();
  populator::PopulatorMetrics metrics((*process)->registry());
  populator::Importer importer({.qemu_img = qemu_img,
                                .checkpoint_bytes = static_cast<uint64_t>(checkpoint),
                                .checkpoint_min_interval = checkpoint_gap});
  populator::VolumeService service(bus, **volumes, **sources, metrics, clock,
                                   {.node_name = node_name, .volume_root = volume_root});
  populator::JobRunner runner(
      bus.Js(), service.store(), importer, metrics, clock,
      {.node_name = node_name,
       .volume_root = volume_root,
       .max_attempts = static_cast<int>(max_attempts),
       .backoff_base = backoff,
       .backoff_max = backoff_max,
       .ack_wait = std::chrono::duration_cast<std::chrono::seconds>(ack_wait),
       .heartbeat_interval = std::max(ack_wait / 4, 100ms),
       .http_timeout = http_timeout});
  populator::UploadService uploads(
      bus, service.store(), importer, metrics, clock,
      {.node_name = node_name,
       .volume_root = volume_root,
       .idle_timeout = upload_idle,
       .stale_after = std::max<std::chrono::milliseconds>(2 * upload_idle, 10s)});
  if (auto st = runner.EnsureStream(); !st.ok()) return runtime::Fail(kName, st);
  auto micro = (*process)->RegisterService(
      "volume population: import, blank, clone, upload; node " + node_name);
  if (!micro.ok()) return runtime::Fail(kName, micro.status());
  if (auto st = service.Serve(*micro); !st.ok()) return runtime::Fail(kName, st);
  if (auto st = uploads.Serve(*micro); !st.ok()) return runtime::Fail(kName, st);
  if (auto st = runner.StartWorkers(static_cast<int>(workers)); !st.ok())
    return runtime::Fail(kName, st);
  SPDLOG_LOGGER_INFO(log::Get("populator"), "serving volumes of node {} from {} with {} workers",
                     node_name, volume_root, workers);
  (*process)->WaitForSignal();
  uploads.Stop();  // running uploads end; their volumes go back to UploadReady
  runner.Stop();   // running imports stop and hand their jobs back; raw downloads keep checkpoints
  return (*process)->Shutdown();
}
