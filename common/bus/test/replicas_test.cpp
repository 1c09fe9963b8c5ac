#include "wisp/bus/replicas.hpp"

#include <gtest/gtest.h>

namespace wisp::bus {
namespace {

// Tests that an existing stream is raised to the replicas asked for and never lowered.
TEST(ReplicasTest, PlanRaisesAndNeverLowers) {
  struct Case {
    int current, wanted, target;
    bool raise;
  };
  for (const Case& c : {Case{1, 3, 3, true}, Case{0, 3, 3, true}, Case{1, 1, 1, false},
                        Case{0, 1, 1, false}, Case{3, 3, 3, false}, Case{3, 1, 3, false},
                        Case{5, 3, 5, false}, Case{1, 9, kMaxReplicas, true}}) {
    SCOPED_TRACE(std::to_string(c.current) + " -> " + std::to_string(c.wanted));
    const ReplicaPlan plan = PlanReplicas(c.current, c.wanted);
    EXPECT_EQ(plan.target, c.target);
    EXPECT_EQ(plan.raise, c.raise);
  }
}

// Tests that a placement refusal is told apart from other failures by its marker, not its code.
TEST(ReplicasTest, PlacementErrorIsMarked) {
  const absl::Status placement = ReplicaPlacementError("stream X: insufficient resources");
  EXPECT_TRUE(IsReplicaPlacementError(placement));
  EXPECT_EQ(placement.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(placement.message(), "stream X: insufficient resources");
  EXPECT_FALSE(IsReplicaPlacementError(absl::FailedPreconditionError("insufficient resources")));
  EXPECT_FALSE(IsReplicaPlacementError(absl::OkStatus()));
}

// Tests that the server's three placement refusals are recognised in an error text, and nothing
// else is.
TEST(ReplicasTest, RecognisesPlacementTexts) {
  EXPECT_TRUE(IsReplicaPlacementText(
      "creating bucket b: Error (replicas > 1 not supported in non-clustered mode)"));
  EXPECT_TRUE(IsReplicaPlacementText("Insufficient Resources"));
  EXPECT_TRUE(IsReplicaPlacementText("no suitable peers for placement"));
  EXPECT_FALSE(IsReplicaPlacementText("stream not found"));
  EXPECT_FALSE(IsReplicaPlacementText("timeout"));
}

}  // namespace
}  // namespace wisp::bus
