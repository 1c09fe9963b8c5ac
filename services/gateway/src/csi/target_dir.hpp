#pragma once
// The CSI target directory of a node publication, shared by token and bind volumes: made before a
// mount, emptied and removed at unpublish.
//
// Contract:
//   - PrepareTarget() makes `target` (0750) when missing (the CO makes its parent);
//     FailedPrecondition when it exists and is not a directory.
//   - ClearTarget() unmounts what is stacked on `target` (one mount at a time, at most 8) and then
//     removes it; a missing target is OK (unpublish is idempotent). A token volume's leftover
//     files are removed recursively, but never through a mount; a bind target must be empty (a
//     directory) or is a file (a block publication's), which is unlinked.
//   - PathExists() is lstat(): a dangling link exists.
//
// Example:
//   WISP_RETURN_IF_ERROR(PrepareTarget(target));
//   WISP_RETURN_IF_ERROR(mounter.MountTmpfs(target, 1 << 20, 0755));
//   ...
//   WISP_RETURN_IF_ERROR(ClearTarget(mounter, target, /*token_volume=*/true));
#include <string>

#include "wisp/fsutil/mounter.hpp"
#include "wisp/status/status.hpp"

namespace wisp::gateway::csi {

bool PathExists(const std::string& path);

absl::Status PrepareTarget(const std::string& target);

// Removes `target` only (no unmount): FailedPrecondition when it is still a mount point.
absl::Status RemoveTarget(fsutil::Mounter& mounter, const std::string& target, bool token_volume);

absl::Status ClearTarget(fsutil::Mounter& mounter, const std::string& target, bool token_volume);

}  // namespace wisp::gateway::csi
