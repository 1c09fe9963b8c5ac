#include "wisp/bus/replicas.hpp"

#include <algorithm>
#include <array>
#include <cctype>

#include "absl/strings/cord.h"

namespace wisp::bus {
namespace {

constexpr char kPayloadUrl[] = "type.wisp.dev/bus.ReplicaPlacement";

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

ReplicaPlan PlanReplicas(int current, int wanted) {
  current = std::max(current, 1);  // JetStream reports 0 for "the default", which is 1
  wanted = std::clamp(wanted, 1, kMaxReplicas);
  if (wanted > current) return {.target = wanted, .raise = true};
  return {.target = current, .raise = false};
}

absl::Status ReplicaPlacementError(std::string message) {
  absl::Status status = absl::FailedPreconditionError(std::move(message));
  status.SetPayload(kPayloadUrl, absl::Cord("1"));
  return status;
}

bool IsReplicaPlacementError(const absl::Status& status) {
  return !status.ok() && status.GetPayload(kPayloadUrl).has_value();
}

bool IsReplicaPlacementText(std::string_view text) {
  // nats-server's descriptions of JSStreamReplicasNotSupportedErr (10074),
  // JSInsufficientResourcesErr (10023) and JSClusterNoPeersErr (10005).
  static constexpr std::array<std::string_view, 3> kTexts = {
      "replicas > 1 not supported in non-clustered mode", "insufficient resources",
      "no suitable peers for placement"};
  const std::string lower = Lower(text);
  return std::any_of(kTexts.begin(), kTexts.end(),
                     [&](std::string_view t) { return lower.find(t) != std::string::npos; });
}

}  // namespace wisp::bus
