#pragma once
// Names the CSI plugin publishes: the driver name (CSIDriver object, StorageClass provisioner,
// pod inline volumes) and the topology key of NodeGetInfo and CreateVolume.
namespace wisp::gateway::csi {

inline constexpr char kDriverName[] = "csi.wisp.dev";
inline constexpr char kTopologyKey[] = "topology.wisp.dev/node";

}  // namespace wisp::gateway::csi
