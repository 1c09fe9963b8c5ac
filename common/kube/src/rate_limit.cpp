#include "wisp/kube/rate_limit.hpp"

#include <algorithm>
#include <thread>

namespace wisp::kube {

void RealSleeper::Sleep(std::chrono::nanoseconds d) {
  if (d.count() > 0) std::this_thread::sleep_for(d);
}

RealSleeper& RealSleeper::Instance() {
  static RealSleeper s;
  return s;
}

TokenBucket::TokenBucket(double qps, int burst, const Clock& clock, Sleeper& sleeper)
    : qps_(qps),
      burst_(std::max(1, burst)),
      clock_(clock),
      sleeper_(sleeper),
      tokens_(burst_),
      last_(clock.Steady()) {}

void TokenBucket::Refill(std::chrono::steady_clock::time_point now) const {
  if (now > last_) {
    const double secs = std::chrono::duration<double>(now - last_).count();
    tokens_ = std::min(burst_, tokens_ + secs * qps_);
    last_ = now;
  }
}

std::chrono::nanoseconds TokenBucket::Delay() const {
  if (qps_ <= 0) return std::chrono::nanoseconds(0);
  std::lock_guard lock(mu_);
  Refill(clock_.Steady());
  if (tokens_ >= 1) return std::chrono::nanoseconds(0);
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>((1 - tokens_) / qps_));
}

void TokenBucket::Wait() {
  if (qps_ <= 0) return;
  std::chrono::nanoseconds wait(0);
  {
    std::lock_guard lock(mu_);
    Refill(clock_.Steady());
    // Reserve: the token may go negative; the deficit is the time to wait for it.
    tokens_ -= 1;
    if (tokens_ < 0) {
      wait = std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::duration<double>(-tokens_ / qps_));
    }
  }
  sleeper_.Sleep(wait);
}

}  // namespace wisp::kube
