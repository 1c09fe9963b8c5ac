#pragma once
// JetStream replication: how many servers keep a copy of a stream (a KV bucket is the stream
// KV_<bucket>), the rule NatsBus applies to an existing stream, and the error for a count the
// NATS cluster cannot place.
//
// Contract:
//   - Replicas are 1..kMaxReplicas (JetStream's own limit).
//   - PlanReplicas(current, wanted): an existing stream is raised in place to `wanted` when it has
//     fewer copies, and never lowered (losing copies an operator counts on must be a deliberate
//     act with the nats CLI, not the side effect of one service started with a smaller setting).
//   - JetStream refuses to place more copies than it has servers (a single nats-server: "replicas
//     > 1 not supported in non-clustered mode"; a cluster: "insufficient resources" or "no suitable
//     peers for placement", also when too few servers are up). NatsBus returns those as
//     ReplicaPlacementError (FailedPrecondition with a payload); IsReplicaPlacementError() tells
//     them from any other failure, so the runtime can name its setting (jetstream-replicas).
//
// Example:
//   auto plan = bus::PlanReplicas(si->Config->Replicas, config.replicas);
//   if (plan.raise) { /* update the stream with plan.target replicas, log it */ }
//   if (bus::IsReplicaPlacementError(status)) { /* "jetstream-replicas: ..." */ }
#include <string>
#include <string_view>

#include "wisp/status/status.hpp"

namespace wisp::bus {

inline constexpr int kMaxReplicas = 5;

struct ReplicaPlan {
  int target = 1;      // the replicas the stream should have after EnsureStream/OpenBucket
  bool raise = false;  // true when that is more than it has now (an in-place update)
};
ReplicaPlan PlanReplicas(int current, int wanted);

// FailedPrecondition carrying the marker IsReplicaPlacementError() looks for.
absl::Status ReplicaPlacementError(std::string message);
bool IsReplicaPlacementError(const absl::Status& status);
// True when a JetStream error text is one of the placement refusals above (nats.c's
// js_CreateKeyValue gives the server's text but not its error code).
bool IsReplicaPlacementText(std::string_view text);

}  // namespace wisp::bus
