#pragma once
// LeaderElector: one leader among the replicas of a Deployment, by a coordination.k8s.io/v1 Lease,
// as client-go's leaderelection does it (the same Lease fields, so `kubectl get lease` reads it).
//
// Contract:
//   - Every retry_period the elector reads the Lease <namespace>/<name>. Absent: it creates it
//     holding it. Held by this identity: it renews spec.renewTime (a conditional update: the
//     resourceVersion it read). Held by another: it takes it over only once the Lease has not
//     changed for lease_duration as seen by this process's own clock (client-go's rule: no
//     trust in another machine's clock), or at once when the holder released it
//     (holderIdentity empty). A Conflict or AlreadyExists means another replica won the race.
//   - IsLeader() is true from a successful create/renew/takeover until a renewal has not
//     succeeded for renew_deadline (then it is false before any other replica can take over,
//     since renew_deadline < lease_duration). Each change is passed to `on_change` from the
//     elector's thread.
//   - Stop() releases a Lease this identity holds (holderIdentity "", leaseDurationSeconds 1), so
//     another replica leads at its next try, and returns within one API call.
//
// Example:
//   kube::LeaderElector elector(*client, {.namespace_name = "wisp-system",
//                                         .name = "wisp-controllers", .identity = pod_name},
//                               [](bool leading) { ... });
//   elector.Start();
//   ...
//   elector.Stop();
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "wisp/kube/client.hpp"

namespace spdlog {
class logger;
}  // namespace spdlog

namespace wisp::kube {

inline const Resource kLeases{"coordination.k8s.io", "v1", "leases", true};

struct LeaderElectionOptions {
  std::string namespace_name;
  std::string name;
  std::string identity;  // unique per replica: the pod's name
  std::chrono::milliseconds lease_duration{std::chrono::seconds(15)};
  std::chrono::milliseconds renew_deadline{std::chrono::seconds(10)};
  std::chrono::milliseconds retry_period{std::chrono::seconds(2)};
};

// The Lease spec this identity writes when it takes or renews the Lease (`transitions`: the
// spec.leaseTransitions to write); `now` as RFC 3339 with microseconds (metav1.MicroTime).
Json LeaseSpec(const LeaderElectionOptions& options, const std::string& now, bool acquire,
               int64_t transitions);
// metav1.MicroTime of a system_clock time point: 2026-12-06T07:00:00.123456Z.
std::string MicroTime(std::chrono::system_clock::time_point t);

class LeaderElector {
 public:
  LeaderElector(Client& client, LeaderElectionOptions options,
                std::function<void(bool leading)> on_change);
  ~LeaderElector();
  LeaderElector(const LeaderElector&) = delete;
  LeaderElector& operator=(const LeaderElector&) = delete;

  void Start();
  void Stop();
  bool IsLeader() const { return leading_.load(); }

  // One round of the loop (what Start's thread does every retry_period); for tests.
  void TryOnce();

 private:
  void SetLeading(bool leading);
  absl::Status Acquire();

  Client& client_;
  LeaderElectionOptions options_;
  std::function<void(bool)> on_change_;
  std::shared_ptr<spdlog::logger> logger_;
  std::atomic<bool> leading_{false};
  // What this process saw of the Lease, and when (its own steady clock).
  std::string observed_version_;
  std::chrono::steady_clock::time_point observed_at_{};
  std::chrono::steady_clock::time_point last_renewed_{};

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace wisp::kube
