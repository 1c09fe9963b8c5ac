#pragma once
// RateLimiter: token buckets per key (the STS's per-subject limit).
//
// Contract: each key holds at most `burst` tokens and regains `rate_per_second`; Allow() takes one
// when available. At most `max_keys` keys are tracked; beyond that, full (idle) buckets are
// forgotten first, so memory stays bounded under many distinct subjects. Thread-safe.
//
//   RateLimiter limiter(clock, {.rate_per_second = 5, .burst = 20});
//   if (!limiter.Allow(subject)) return TooManyRequests();
#include <chrono>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "wisp/status/clock.hpp"

namespace wisp::gateway::oidc {

class RateLimiter {
 public:
  struct Options {
    double rate_per_second = 5;
    double burst = 20;
    size_t max_keys = 100000;
  };
  RateLimiter(Clock& clock, Options options) : clock_(clock), options_(options) {}

  // Would a request for `key` be allowed now (no token taken)?
  bool Check(std::string_view key);
  // Takes a token for `key`; false when its bucket is empty.
  bool Allow(std::string_view key);

 private:
  struct Bucket {
    double tokens;
    std::chrono::steady_clock::time_point last;
  };
  Bucket& Refill(std::string_view key);

  Clock& clock_;
  const Options options_;
  std::mutex mu_;
  std::unordered_map<std::string, Bucket> buckets_;
};

}  // namespace wisp::gateway::oidc
