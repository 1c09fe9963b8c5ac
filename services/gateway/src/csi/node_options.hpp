#pragma once
// NodeOptions: the settings of the CSI node (NodeService) and of its two kinds of volume,
// TokenVolumes and BindVolumes, filled by CsiServer from the gateway's flags.
//
// Contract: plain data; NodeService and the parts it builds each keep their own copy, so the
// caller's struct may go once they are constructed.
//
// Example:
//   NodeOptions options;
//   options.node_id = "node-a";
//   options.volume_root = "/var/lib/wisp/volumes";
//   options.target_roots = {"/var/lib/kubelet"};
//   NodeService node(options, bus, issuer, store, mounter, clock, metrics);
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "csi/token_volume.hpp"

namespace wisp::gateway::csi {

struct NodeOptions {
  std::string node_id;
  std::string volume_root;                // persistent volumes live below it
  std::vector<std::string> target_roots;  // allowed target/staging paths (empty = any)
  int64_t min_expiration_seconds = kMinExpirationSeconds;
  uint64_t tmpfs_size_bytes = 1 << 20;
  std::chrono::milliseconds bus_timeout{5000};
  // The audience of the kubelet's token (csi.storage.k8s.io/serviceAccount.tokens) forwarded with
  // every wisp.v1.token.issue of a pod as proof of its identity ("" = none; docs/security.md G3).
  std::string pod_proof_audience = "wisp";
};

}  // namespace wisp::gateway::csi
