#pragma once
// RotationScheduler: when each token volume is due for a new token, and a thread that runs the
// rotation callback when it is. Time comes from the injected Clock (wall time, because the due
// times are persisted in KV and must survive a restart); unit tests call RunDue() after advancing a
// FakeClock instead of starting the thread.
//
// Contract:
//   - Schedule() replaces any earlier due time of the volume; Cancel() forgets it.
//   - The callback gets every volume due at once (up to `max_batch` a call, earliest first), so
//     the node can ask for all their tokens in one bus request. A due volume leaves the schedule
//     before its callback runs; the callback schedules the next rotation (or a retry). Callbacks
//     run one at a time, never with the scheduler's lock held.
//   - Stop() returns after the running callback (if any) has finished.
//
// Example:
//   RotationScheduler scheduler(clock, [&](const std::vector<std::string>& ids) {
//     node.RotateDue(ids);
//   });
//   scheduler.Schedule("csi-abc", next_rotation_unix);
//   scheduler.Start();
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "wisp/status/clock.hpp"

namespace wisp::gateway::csi {

class RotationScheduler {
 public:
  using Callback = std::function<void(const std::vector<std::string>& volume_ids)>;

  RotationScheduler(const Clock& clock, Callback callback, size_t max_batch = 64);
  ~RotationScheduler();
  RotationScheduler(const RotationScheduler&) = delete;
  RotationScheduler& operator=(const RotationScheduler&) = delete;

  void Schedule(const std::string& volume_id, int64_t due_unix);
  void Cancel(const std::string& volume_id);
  std::optional<int64_t> DueUnix(const std::string& volume_id) const;
  size_t size() const;

  // Runs the callback for every volume due now; returns how many volumes it was given.
  int RunDue();

  void Start();
  void Stop();

 private:
  std::vector<std::string> PopDue();

  const Clock& clock_;
  Callback callback_;
  const size_t max_batch_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, int64_t> due_;               // volume -> due unix second
  std::set<std::pair<int64_t, std::string>> queue_;  // ordered by due time
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace wisp::gateway::csi
