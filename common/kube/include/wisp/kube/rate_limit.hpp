#pragma once
// Client-side rate limiting for the Kubernetes API (client-go's token bucket: qps, burst), and
// the Sleeper that waits for it and for Retry-After, injectable so unit tests never sleep.
//
// Contract:
//   - TokenBucket starts full (`burst` tokens) and refills `qps` tokens a second up to `burst`.
//     Wait() takes one token, sleeping (through the Sleeper) until it is there; callers are
//     served in order of arrival (a token is reserved before the sleep, as golang.org/x/time/rate
//     does). qps <= 0 means no limit. Thread-safe.
//   - RealSleeper sleeps the thread; FakeSleeper (tests) records each wait and advances a
//     FakeClock by it instead.
//
// Example:
//   kube::TokenBucket bucket(20, 30, SystemClock::Instance(), kube::RealSleeper::Instance());
//   bucket.Wait();  // at most 30 at once, then 20 a second
#include <chrono>
#include <mutex>
#include <vector>

#include "wisp/status/clock.hpp"
#include "wisp/status/fake_clock.hpp"

namespace wisp::kube {

class Sleeper {
 public:
  virtual ~Sleeper() = default;
  virtual void Sleep(std::chrono::nanoseconds d) = 0;
};

class RealSleeper final : public Sleeper {
 public:
  void Sleep(std::chrono::nanoseconds d) override;
  static RealSleeper& Instance();
};

class FakeSleeper final : public Sleeper {
 public:
  explicit FakeSleeper(FakeClock& clock) : clock_(clock) {}
  void Sleep(std::chrono::nanoseconds d) override {
    std::lock_guard lock(mu_);
    sleeps_.push_back(d);
    clock_.Advance(d);
  }
  std::vector<std::chrono::nanoseconds> sleeps() const {
    std::lock_guard lock(mu_);
    return sleeps_;
  }

 private:
  FakeClock& clock_;
  mutable std::mutex mu_;
  std::vector<std::chrono::nanoseconds> sleeps_;
};

class TokenBucket {
 public:
  TokenBucket(double qps, int burst, const Clock& clock, Sleeper& sleeper);
  // Takes one token, waiting as long as it takes.
  void Wait();
  // How long a Wait() now would sleep (for tests and metrics); takes nothing.
  std::chrono::nanoseconds Delay() const;

 private:
  void Refill(std::chrono::steady_clock::time_point now) const;
  const double qps_;
  const double burst_;
  const Clock& clock_;
  Sleeper& sleeper_;
  mutable std::mutex mu_;
  mutable double tokens_;
  mutable std::chrono::steady_clock::time_point last_;
};

}  // namespace wisp::kube
