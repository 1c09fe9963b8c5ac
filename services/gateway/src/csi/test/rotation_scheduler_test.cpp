#include "csi/rotation_scheduler.hpp"

#include <vector>

#include <gtest/gtest.h>

#include "wisp/status/fake_clock.hpp"

namespace wisp::gateway::csi {
namespace {

// Tests that only due volumes run, in due order, and leave the schedule when they do.
TEST(RotationSchedulerTest, RunsDueVolumesInOrder) {
  FakeClock clock;
  std::vector<std::string> ran;
  RotationScheduler scheduler(clock, [&](const std::string& id) { ran.push_back(id); });
  const int64_t now = clock.NowUnixSeconds();
  scheduler.Schedule("b", now + 20);
  scheduler.Schedule("a", now + 10);
  scheduler.Schedule("c", now + 30);
  EXPECT_EQ(scheduler.RunDue(), 0);
  clock.Advance(std::chrono::seconds(20));
  EXPECT_EQ(scheduler.RunDue(), 2);
  EXPECT_EQ(ran, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(scheduler.size(), 1u);
  EXPECT_EQ(*scheduler.DueUnix("c"), now + 30);
}

// Tests that rescheduling replaces the due time and Cancel forgets the volume.
TEST(RotationSchedulerTest, RescheduleAndCancel) {
  FakeClock clock;
  int runs = 0;
  RotationScheduler scheduler(clock, [&](const std::string&) { ++runs; });
  const int64_t now = clock.NowUnixSeconds();
  scheduler.Schedule("a", now + 5);
  scheduler.Schedule("a", now + 50);
  clock.Advance(std::chrono::seconds(10));
  EXPECT_EQ(scheduler.RunDue(), 0);
  scheduler.Cancel("a");
  clock.Advance(std::chrono::seconds(100));
  EXPECT_EQ(scheduler.RunDue(), 0);
  EXPECT_EQ(runs, 0);
  EXPECT_FALSE(scheduler.DueUnix("a").has_value());
}

// Tests that a callback may schedule its own next run without deadlocking.
TEST(RotationSchedulerTest, CallbackMayReschedule) {
  FakeClock clock;
  RotationScheduler* self = nullptr;
  int runs = 0;
  RotationScheduler scheduler(clock, [&](const std::string& id) {
    ++runs;
    self->Schedule(id, clock.NowUnixSeconds() + 60);
  });
  self = &scheduler;
  scheduler.Schedule("a", clock.NowUnixSeconds());
  EXPECT_EQ(scheduler.RunDue(), 1);
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(*scheduler.DueUnix("a"), clock.NowUnixSeconds() + 60);
}

}  // namespace
}  // namespace wisp::gateway::csi
