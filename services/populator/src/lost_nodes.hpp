#pragma once
// LostNodeSweeper: what becomes of the volumes waiting for a node whose populator is gone.
//
// Every wisp volume is node-local: its bytes are a file under --volume-root on spec.node, and its
// PV's CSI topology pins it to that node. So its population job (wisp.v1.jobs.populate.<node>,
// pulled by that node's durable consumer) can run on that node only. A job whose populator dies
// is redelivered by JetStream after job-ack-wait to another populator instance of the same node
// (a restarted pod, a second instance), and resumes from its checkpoint; it is never handed to
// another node, whose disk does not hold the volume and whose PV could not reach it anyway. (wisp
// has no shared-storage volumes; with one, a job could go to any node.) When no populator answers
// on a node any more, its waiting volumes would stay PENDING / IMPORT_SCHEDULED /
// IMPORT_IN_PROGRESS for ever, and their PVCs Pending with them. This sweep ends that.
//
// Contract:
//   - Every populator, every `interval`, probes each other node that has volumes waiting for it
//     (AwaitsItsNode): one request on wisp.v1.node.<node>.volume.list, which any populator of that
//     node answers. Only "no responders" (bus::IsNoResponders) counts as silence; an answer, even
//     an error, counts as alive and ends the silence; a timeout or this process's own bus
//     trouble neither ends it nor decides anything: a node is judged lost only by a probe that
//     found no responders.
//   - A node silent, without a break, for `lost_after` (as seen by this process: its count starts
//     again when the process does) is lost: each of its volumes still waiting is set FAILED with
//     node_lost and a message naming the node, how long it was silent and what to do (delete the
//     PVC and create it again, to have it made on a node that is up). The write is a
//     compare-and-set that checks the volume still waits on that node, so racing populators, or the
//     node's own populator coming back at that moment, cannot clobber each other. Each failure
//     counts in wisp_populator_jobs_total{result="failed"}. lost_after 0 turns the sweep off.
//   - Afterwards: the job stays in WISP_POPULATE. If the node comes back, its populator finds the
//     volume FAILED and acks the job, or deleted and acks it after removing the directory; an
//     import still running there stops at its next progress report (JobRunner). Deleting a
//     node_lost volume while its node is still silent removes the record without the node
//     (VolumeService::HandleDelete).
//
// Example:
//   LostNodeSweeper sweeper(store, bus, clock, metrics,
//                           {.node_name = "node-a", .lost_after = 10min, .interval = 30s});
//   sweeper.Start();   // or SweepOnce() from a test, with a FakeClock
//   ...
//   sweeper.Stop();
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "populator_metrics.hpp"
#include "volume_store.hpp"
#include "wisp/bus/bus.hpp"
#include "wisp/status/clock.hpp"

namespace wisp::populator {

struct LostNodeConfig {
  std::string node_name;  // this populator's node, never judged lost by itself
  std::chrono::milliseconds lost_after{std::chrono::minutes(10)};  // 0 = never
  std::chrono::milliseconds interval{std::chrono::seconds(30)};
  std::chrono::milliseconds probe_timeout{std::chrono::seconds(2)};
};

// PENDING, IMPORT_SCHEDULED and IMPORT_IN_PROGRESS: phases only the volume's node moves on.
bool AwaitsItsNode(v1::VolumePhase phase);
// The FAILED message of a volume whose node was silent for `silent`.
std::string NodeLostMessage(const std::string& node, std::chrono::milliseconds silent);

class LostNodeSweeper {
 public:
  LostNodeSweeper(VolumeStore& store, bus::Requester& bus, Clock& clock, PopulatorMetrics& metrics,
                  LostNodeConfig config);
  ~LostNodeSweeper();

  // One pass (see the contract); the ids of the volumes it failed.
  absl::StatusOr<std::vector<std::string>> SweepOnce();
  // A thread running SweepOnce every interval until Stop(); nothing when lost_after is 0.
  void Start();
  void Stop();

 private:
  // true: a populator of `node` answered; false: no responders; nullopt: cannot tell.
  std::optional<bool> Answers(const std::string& node);

  VolumeStore& store_;
  bus::Requester& bus_;
  Clock& clock_;
  PopulatorMetrics& metrics_;
  LostNodeConfig config_;
  // When each node with waiting volumes was first found silent (and has been since).
  std::map<std::string, std::chrono::steady_clock::time_point> silent_since_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace wisp::populator
