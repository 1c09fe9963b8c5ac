#pragma once
// wisp-populator's wiring, out of main.cpp: its settings and flags, the checks that run before
// anything starts, and PopulatorApp, which builds the volume service, job runner and upload
// service on a started runtime::Process and serves until Stop().
//
// Contract:
//   - AddPopulatorFlags() declares wisp-populator's own flags.
//   - CheckPopulatorSettings() fills node_name from the hostname when empty, checks it and creates
//     volume_root; a bad one is an InvalidArgument naming the setting (main exits 2).
//   - PopulatorApp::Start() opens wisp_volumes and wisp_sources, makes sure the WISP_POPULATE
//     stream exists (with jetstream-replicas), serves wisp.v1.volume.* and this node's uploads,
//     starts the workers and the sweep that fails the waiting volumes of lost nodes
//     (lost_nodes.hpp).
//   - Stop(): running uploads end (their volumes go back to UploadReady), running imports hand
//     their jobs back; raw downloads keep their checkpoints.
//
// Example (wisp-populator's main.cpp):
//   populator::PopulatorSettings settings;
//   populator::AddPopulatorFlags(flags, settings);
//   flags.ParseOrExit(argc, argv);
//   WISP_RETURN_IF_ERROR(populator::CheckPopulatorSettings(settings));
//   auto app = populator::PopulatorApp::Start(settings, **process);
//   (*process)->WaitForSignal();
//   (*app)->Stop();
#include <chrono>
#include <memory>
#include <string>

#include "importer.hpp"
#include "job_runner.hpp"
#include "lost_nodes.hpp"
#include "populator_metrics.hpp"
#include "upload_service.hpp"
#include "volume_service.hpp"
#include "wisp/config/flags.hpp"
#include "wisp/runtime/runtime.hpp"

namespace wisp::populator {

struct PopulatorSettings {
  std::string volume_root = "/var/lib/wisp/volumes";
  std::string node_name;
  std::string qemu_img = "qemu-img";
  int64_t workers = 2;
  int64_t max_attempts = 5;
  int64_t checkpoint = 64ll << 20;
  std::chrono::milliseconds checkpoint_gap = std::chrono::seconds(2);
  std::chrono::milliseconds ack_wait = std::chrono::seconds(30);
  std::chrono::milliseconds backoff = std::chrono::seconds(2);
  std::chrono::milliseconds backoff_max = std::chrono::minutes(1);
  std::chrono::milliseconds http_timeout = std::chrono::seconds(60);
  std::chrono::milliseconds upload_idle = std::chrono::seconds(60);
  std::chrono::milliseconds node_lost_after = std::chrono::minutes(10);
  std::chrono::milliseconds node_check_interval = std::chrono::seconds(30);
};

void AddPopulatorFlags(config::Flags& flags, PopulatorSettings& settings);

// See the contract: the node name defaulted and checked, volume_root created.
absl::Status CheckPopulatorSettings(PopulatorSettings& settings);

class PopulatorApp {
 public:
  static absl::StatusOr<std::unique_ptr<PopulatorApp>> Start(const PopulatorSettings& settings,
                                                             runtime::Process& process);
  ~PopulatorApp();
  void Stop();

 private:
  PopulatorApp() = default;
  bus::KeyValuePtr volumes_;
  bus::KeyValuePtr sources_;
  std::unique_ptr<PopulatorMetrics> metrics_;
  std::unique_ptr<Importer> importer_;
  std::unique_ptr<VolumeService> service_;
  std::unique_ptr<JobRunner> runner_;
  std::unique_ptr<UploadService> uploads_;
  std::unique_ptr<LostNodeSweeper> lost_nodes_;
};

}  // namespace wisp::populator
