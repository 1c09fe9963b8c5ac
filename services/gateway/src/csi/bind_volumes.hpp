#pragma once
// BindVolumes: the persistent volumes of the CSI node, made by wisp-populator. NodeService
// validates each request and hands a non-ephemeral one here.
//
// Publish looks the volume up on the bus (wisp.v1.volume.get), checks it is ready, lives on this
// node and has its directory (VolumeStatus.path) under the volume root, and bind-mounts that
// directory onto the target, read-only when asked. A block publication (volumeMode: Block) attaches
// the directory's disk.img to a loop device instead and bind-mounts the device onto a file made
// at the target (the CSI spec: the SP places the block device at target_path); unpublishing
// unmounts it, detaches the loop device and removes the file.
//
// Contract:
//   - Publish() and Unpublish() run with the volume's lock (VolumeLocks) held by the caller.
//   - Publish() is idempotent: the same volume at the same target, the same way (read-only or
//     not), is OK without a second mount; another volume or the other way is AlreadyExists. A
//     mount this process does not remember (made before a restart) counts as ours only when it
//     shows the volume's directory; someone else's mount is never reported as published.
//   - Unpublish() of a target that is not there is OK.
//
// Example:
//   BindVolumes binds(options, bus, mounter);
//   std::lock_guard volume_lock(locks.For(request.volume_id()));
//   WISP_RETURN_IF_ERROR(binds.Publish(request, /*read_only=*/true, 5s));
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <spdlog/spdlog.h>

#include "csi/csi.grpc.pb.h"
#include "csi/node_options.hpp"
#include "wisp/bus/bus.hpp"
#include "wisp/fsutil/mounter.hpp"
#include "wisp/status/status.hpp"

namespace wisp::gateway::csi {

class BindVolumes {
 public:
  BindVolumes(NodeOptions options, bus::Requester& requester, fsutil::Mounter& mounter);

  // Volume lock held; `budget` bounds the bus lookup.
  absl::Status Publish(const ::csi::v1::NodePublishVolumeRequest& request, bool read_only,
                       std::chrono::milliseconds budget);
  // The file a block publication shows: <volume directory>/disk.img.
  static constexpr char kImageName[] = "disk.img";
  // Unmounts and removes the target, forgets it. Volume lock held.
  absl::Status Unpublish(const std::string& target);
  // True when `path` holds volume `volume_id`: a bind this process made, or one from before a
  // restart (a mount point under the target roots showing the volume's directory in the volume
  // root), which it then remembers.
  bool Holds(const std::string& volume_id, const std::string& path);

 private:
  struct BindState {
    std::string volume_id;
    bool read_only = false;
    std::string loop_device;  // a block publication's /dev/loopN; "" for a directory
  };

  bool Adopt(const std::string& volume_id, const std::string& path);
  absl::Status PublishBlock(const std::string& id, const std::string& image,
                            const std::string& target, bool read_only);
  // The loop device a block target shows, when it shows one ("" otherwise).
  std::string LoopDeviceAt(const std::string& target);

  NodeOptions options_;
  bus::Requester& requester_;
  fsutil::Mounter& mounter_;
  std::shared_ptr<spdlog::logger> logger_;

  std::mutex mu_;                           // guards binds_
  std::map<std::string, BindState> binds_;  // target path -> persistent volume
};

}  // namespace wisp::gateway::csi
