#pragma once
// JobRunner: the node side of population. Pulls PopulateJob messages from the JetStream
// work-queue stream WISP_POPULATE (subjects wisp.v1.jobs.populate.<node>) through a durable
// consumer per node ("wisp-populator-<node>", explicit ack), and runs each with the Importer.
//
// Job life:
//   - start: phase IMPORT_IN_PROGRESS; a heartbeat thread sends InProgress every
//     heartbeat_interval, so a long download or qemu-img conversion keeps its lease;
//     progress goes to KV, to wisp.v1.events.volume.<id> and to the metrics every status_interval.
//   - success: SUCCEEDED (or PENDING_POPULATION for external populators), "100.0%", Ack.
//   - permanent error (IsPermanent) or the last attempt: FAILED with the error's message, Term.
//   - transient error: IMPORT_SCHEDULED with "attempt n of m failed, retrying in Ns: ...", Nak
//     with exponential backoff.
//   - the process dies (SIGKILL): no ack; after ack_wait JetStream redelivers to a restarted or
//     other instance on the node, and the Importer resumes from its checkpoint (HTTP Range) or
//     starts over. disk.img only exists once complete and verified, so a redelivered job that
//     finds it just records SUCCEEDED.
//   - Stop(): running imports are interrupted and Nak'ed at once for another instance.
//   - the volume was deleted meanwhile: the import stops, the job is acked, the directory removed.
//   - the volume was failed as node_lost meanwhile (LostNodeSweeper on another node, while this
//     one did not answer): the import stops, its partial bytes are removed, the job is acked. A
//     job of this node is never run by another node: the bytes are node-local (lost_nodes.hpp).
//
//   JobRunner runner(bus.Js(), service.store(), importer, metrics, clock, config);
//   WISP_RETURN_IF_ERROR(process.EnsureStream(JobRunner::StreamConfig()));  // jetstream-replicas
//   WISP_RETURN_IF_ERROR(runner.StartWorkers(2));
//   ...
//   runner.Stop();
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "importer.hpp"
#include "populator_metrics.hpp"
#include "volume_store.hpp"
#include "wisp/bus/bus.hpp"
#include "wisp/status/clock.hpp"

namespace wisp::populator {

struct JobRunnerConfig {
  std::string node_name;
  std::string volume_root;
  int max_attempts = 5;
  std::chrono::milliseconds backoff_base{std::chrono::seconds(2)};
  std::chrono::milliseconds backoff_max{std::chrono::minutes(1)};
  std::chrono::seconds ack_wait{30};
  std::chrono::milliseconds heartbeat_interval{std::chrono::seconds(5)};
  std::chrono::milliseconds status_interval{std::chrono::seconds(1)};
  std::chrono::milliseconds fetch_wait{std::chrono::seconds(1)};
  std::chrono::milliseconds http_timeout{std::chrono::seconds(60)};  // connect and read
};

// Backoff before attempt `attempt + 1`: base * 2^(attempt-1), capped.
std::chrono::milliseconds Backoff(const JobRunnerConfig& config, uint64_t attempt);

class JobRunner {
 public:
  JobRunner(bus::JetStream& js, VolumeStore& store, Importer& importer, PopulatorMetrics& metrics,
            Clock& clock, JobRunnerConfig config);
  ~JobRunner();

  // WISP_POPULATE with one replica; runtime::Process::EnsureStream applies jetstream-replicas.
  static bus::StreamConfig StreamConfig();
  bus::ConsumerConfig ConsumerConfig() const;
  absl::StatusOr<bus::PullConsumerPtr> Subscribe();

  // Fetches at most one job, waiting up to `wait`, and runs it to its end. False when none came.
  absl::StatusOr<bool> RunOnce(bus::PullConsumer& consumer, std::chrono::milliseconds wait);
  void Process(bus::JsMessage& msg);

  // `n` threads, each with its own pull subscription on the shared durable consumer.
  absl::Status StartWorkers(int n);
  void Stop();

 private:
  void Finish(bus::JsMessage& msg, const std::string& id, const ImportResult& result, bool external,
              std::chrono::steady_clock::time_point started);

  bus::JetStream& js_;
  VolumeStore& store_;
  Importer& importer_;
  PopulatorMetrics& metrics_;
  Clock& clock_;
  JobRunnerConfig config_;
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> workers_;
};

}  // namespace wisp::populator
