#pragma once
// Clock: the one source of "now" for logic that must be testable without sleeping.
//
//   SystemClock clock;                 // production
//   FakeClock fake(kSomeTime);         // tests (wisp/status/testing/fake_clock.hpp)
//   fake.Advance(std::chrono::minutes(48));
#include <chrono>
#include <cstdint>

namespace wisp {

class Clock {
 public:
  virtual ~Clock() = default;
  // Wall-clock time (token iat/exp, KV timestamps).
  virtual std::chrono::system_clock::time_point Now() const = 0;
  // Monotonic time (deadlines, timers).
  virtual std::chrono::steady_clock::time_point Steady() const = 0;

  int64_t NowUnixSeconds() const {
    return std::chrono::duration_cast<std::chrono::seconds>(Now().time_since_epoch()).count();
  }
};

class SystemClock final : public Clock {
 public:
  std::chrono::system_clock::time_point Now() const override;
  std::chrono::steady_clock::time_point Steady() const override;
  // A process-wide instance for wiring code.
  static SystemClock& Instance();
};

}  // namespace wisp
