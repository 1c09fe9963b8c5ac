#pragma once
// VolumeLocks: serialises the calls on one CSI volume (publish, unpublish, rotation) across the
// node's parts (NodeService, TokenVolumes) with a fixed set of mutex stripes, so memory does not
// grow with the number of volumes ever seen.
//
// Contract: For(id) always returns the same mutex for the same id; two ids may share one (a
// stripe), so never hold two at once. Holding one does not guard any map: each part keeps its
// own mutex for its state.
//
// Example:
//   VolumeLocks locks;
//   std::lock_guard volume_lock(locks.For(request.volume_id()));
#include <array>
#include <functional>
#include <mutex>
#include <string>

namespace wisp::gateway::csi {

class VolumeLocks {
 public:
  std::mutex& For(const std::string& volume_id) {
    return locks_[std::hash<std::string>{}(volume_id) % locks_.size()];
  }

 private:
  std::array<std::mutex, 64> locks_;
};

}  // namespace wisp::gateway::csi
