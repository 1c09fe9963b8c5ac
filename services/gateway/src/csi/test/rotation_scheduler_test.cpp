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
  std::vector<size_t> calls;
  RotationScheduler scheduler(clock, [&](const std::vector<std::string>& ids) {
    calls.push_back(ids.size());
    ran.insert(ran.end(), ids.begin(), ids.end());
  });
  const int64_t now = clock.NowUnixSeconds();
  scheduler.Schedule("b", now + 20);
  scheduler.Schedule("a", now + 10);
  scheduler.Schedule("c", now + 30);
  EXPECT_EQ(scheduler.RunDue(), 0);
  clock.Advance(std::chrono::seconds(20));
  EXPECT_EQ(scheduler.RunDue(), 2);
  EXPECT_EQ(ran, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(calls, (std::vector<size_t>{2})) << "due together, handed over together";
  EXPECT_EQ(scheduler.size(), 1u);
  EXPECT_EQ(*scheduler.DueUnix("c"), now + 30);
}

// Tests that rescheduling replaces the due time and Cancel forgets the volume.
TEST(RotationSchedulerTest, RescheduleAndCancel) {
  FakeClock clock;
  int runs = 0;
  RotationScheduler scheduler(clock, [&](const std::vector<std::string>&) { ++runs; });
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
  RotationScheduler scheduler(clock, [&](const std::vector<std::string>& ids) {
    ++runs;
    for (const auto& id : ids) self->Schedule(id, clock.NowUnixSeconds() + 60);
  });
  self = &scheduler;
  scheduler.Schedule("a", clock.NowUnixSeconds());
  EXPECT_EQ(scheduler.RunDue(), 1);
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(*scheduler.DueUnix("a"), clock.NowUnixSeconds() + 60);
}

// Tests that more due volumes than max_batch arrive in several calls, earliest first.
TEST(RotationSchedulerTest, SplitsDueVolumesIntoBatches) {
  FakeClock clock;
  std::vector<std::vector<std::string>> calls;
  RotationScheduler scheduler(
      clock, [&](const std::vector<std::string>& ids) { calls.push_back(ids); }, 2);
  const int64_t now = clock.NowUnixSeconds();
  for (const char* id : {"e", "d", "c", "b", "a"}) scheduler.Schedule(id, now + (*id - 'a'));
  clock.Advance(std::chrono::seconds(10));
  EXPECT_EQ(scheduler.RunDue(), 5);
  EXPECT_EQ(calls, (std::vector<std::vector<std::string>>{{"a", "b"}, {"c", "d"}, {"e"}}));
  EXPECT_EQ(scheduler.size(), 0u);
}

}  // namespace
}  // namespace wisp::gateway::csi
