#include "csi/marker_purger.hpp"

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include "csi/projection_store.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/bus/testing/in_memory_bus.hpp"
#include "wisp/status/fake_clock.hpp"

namespace wisp::gateway::csi {
namespace {

using namespace std::chrono_literals;

class MarkerPurgerTest : public ::testing::Test {
 protected:
  MarkerPurgerTest() : bus_(clock_), metrics_(registry_) {
    auto kv = bus_.OpenBucket({.name = std::string(bus::buckets::kProjections)});
    EXPECT_TRUE(kv.ok()) << kv.status();
    kv_ = std::move(*kv);
  }
  size_t Stored() { return bus_.KvStoredCount(bus::buckets::kProjections); }

  FakeClock clock_;
  bus::testing::InMemoryBus bus_;
  prometheus::Registry registry_;
  CsiMetrics metrics_;
  bus::KeyValuePtr kv_;
};

// Tests the leak this fixes: unpublished volumes' markers go once old enough, the first purge one
// interval after start and the next one interval later, while a live projection stays.
TEST_F(MarkerPurgerTest, PurgesOldMarkersOnSchedule) {
  ASSERT_TRUE(kv_->Put(ProjectionKey("node-a", "live"), "p").ok());
  ASSERT_TRUE(kv_->Put(ProjectionKey("node-a", "gone-1"), "p").ok());
  ASSERT_TRUE(kv_->Delete(ProjectionKey("node-a", "gone-1")).ok());
  MarkerPurger purger(*kv_, clock_, {.interval = 1h, .older_than = 10min}, metrics_);
  EXPECT_FALSE(purger.RunIfDue());  // not before the first interval
  clock_.Advance(59min);
  EXPECT_FALSE(purger.RunIfDue());
  ASSERT_TRUE(kv_->Put(ProjectionKey("node-a", "gone-2"), "p").ok());
  ASSERT_TRUE(kv_->Delete(ProjectionKey("node-a", "gone-2")).ok());  // 1 min old when due
  EXPECT_EQ(Stored(), 3u);
  clock_.Advance(1min);
  EXPECT_TRUE(purger.RunIfDue());
  EXPECT_EQ(Stored(), 2u);  // live + gone-2's young marker
  EXPECT_EQ(metrics_.purges_ok.Value(), 1);
  EXPECT_FALSE(purger.RunIfDue());  // once per interval
  clock_.Advance(1h);
  EXPECT_TRUE(purger.RunIfDue());
  EXPECT_EQ(Stored(), 1u);
  EXPECT_TRUE(kv_->Get(ProjectionKey("node-a", "live")).ok());
  EXPECT_EQ(metrics_.purges_ok.Value(), 2);
  EXPECT_EQ(metrics_.purges_error.Value(), 0);
}

// Tests that a failing purge is counted and retried one interval later, not fatal.
TEST_F(MarkerPurgerTest, ErrorsAreCountedAndRetried) {
  ASSERT_TRUE(kv_->Put("node-a.v", "p").ok());
  ASSERT_TRUE(kv_->Delete("node-a.v").ok());
  MarkerPurger purger(*kv_, clock_, {.interval = 10s, .older_than = 0ms}, metrics_);
  bus_.FailBucket(bus::buckets::kProjections, absl::UnavailableError("nats down"));
  clock_.Advance(10s);
  EXPECT_TRUE(purger.RunIfDue());
  EXPECT_EQ(metrics_.purges_error.Value(), 1);
  EXPECT_EQ(metrics_.purges_ok.Value(), 0);
  bus_.ClearFaults();
  EXPECT_FALSE(purger.RunIfDue());
  clock_.Advance(10s);
  EXPECT_TRUE(purger.RunIfDue());
  EXPECT_EQ(metrics_.purges_ok.Value(), 1);
  EXPECT_EQ(Stored(), 0u);
}

// Tests that interval 0 never purges and starts no thread, and that Start/Stop of a real timer
// return promptly.
TEST_F(MarkerPurgerTest, DisabledAndThreadLifecycle) {
  MarkerPurger off(*kv_, clock_, {.interval = 0ms, .older_than = 0ms}, metrics_);
  clock_.Advance(24h);
  EXPECT_FALSE(off.RunIfDue());
  off.Start();
  off.Stop();
  MarkerPurger on(*kv_, clock_, {.interval = 1s, .older_than = 0ms}, metrics_);
  on.Start();
  on.Stop();
  EXPECT_EQ(metrics_.purges_ok.Value() + metrics_.purges_error.Value(), 0);
}

// Tests the settings' validation, which names the flags.
TEST(MarkerPurgerOptionsTest, Validation) {
  EXPECT_TRUE(ValidateMarkerPurgerOptions({.interval = 1h, .older_than = 10min}).ok());
  EXPECT_TRUE(ValidateMarkerPurgerOptions({.interval = 0ms, .older_than = 0ms}).ok());
  auto st = ValidateMarkerPurgerOptions({.interval = 500ms, .older_than = 10min});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("projection-purge-interval"), std::string::npos);
  st = ValidateMarkerPurgerOptions({.interval = 1h, .older_than = -1ms});
  EXPECT_NE(st.message().find("projection-purge-age"), std::string::npos);
}

}  // namespace
}  // namespace wisp::gateway::csi
