#pragma once
// FakeClock for unit tests: time moves only when the test says so.
#include <mutex>

#include "wisp/status/clock.hpp"

namespace wisp {

class FakeClock final : public Clock {
 public:
  explicit FakeClock(std::chrono::system_clock::time_point start =
                         std::chrono::system_clock::time_point(std::chrono::seconds(1'800'000'000)))
      : now_(start) {}

  std::chrono::system_clock::time_point Now() const override {
    std::lock_guard lock(mu_);
    return now_;
  }
  std::chrono::steady_clock::time_point Steady() const override {
    std::lock_guard lock(mu_);
    return std::chrono::steady_clock::time_point(now_.time_since_epoch());
  }
  void Advance(std::chrono::nanoseconds d) {
    std::lock_guard lock(mu_);
    now_ += std::chrono::duration_cast<std::chrono::system_clock::duration>(d);
  }
  void Set(std::chrono::system_clock::time_point t) {
    std::lock_guard lock(mu_);
    now_ = t;
  }

 private:
  mutable std::mutex mu_;
  std::chrono::system_clock::time_point now_;
};

}  // namespace wisp
