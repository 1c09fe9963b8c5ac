#include "oidc/rate_limiter.hpp"

#include <algorithm>

namespace wisp::gateway::oidc {

RateLimiter::Bucket& RateLimiter::Refill(std::string_view key) {
  const auto now = clock_.Steady();
  auto it = buckets_.find(std::string(key));
  if (it == buckets_.end()) {
    if (buckets_.size() >= options_.max_keys) {
      // Forget buckets that have refilled completely: they carry no state worth keeping.
      for (auto b = buckets_.begin(); b != buckets_.end();) {
        const double secs = std::chrono::duration<double>(now - b->second.last).count();
        if (b->second.tokens + secs * options_.rate_per_second >= options_.burst) {
          b = buckets_.erase(b);
        } else {
          ++b;
        }
      }
      if (buckets_.size() >= options_.max_keys) buckets_.erase(buckets_.begin());
    }
    it = buckets_.emplace(std::string(key), Bucket{options_.burst, now}).first;
  }
  Bucket& b = it->second;
  const double secs = std::chrono::duration<double>(now - b.last).count();
  b.tokens = std::min(options_.burst, b.tokens + secs * options_.rate_per_second);
  b.last = now;
  return b;
}

bool RateLimiter::Check(std::string_view key) {
  std::lock_guard lock(mu_);
  return Refill(key).tokens >= 1.0;
}

bool RateLimiter::Allow(std::string_view key) {
  std::lock_guard lock(mu_);
  Bucket& b = Refill(key);
  if (b.tokens < 1.0) return false;
  b.tokens -= 1.0;
  return true;
}

}  // namespace wisp::gateway::oidc
