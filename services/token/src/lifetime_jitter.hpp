#pragma once
// LifetimeJitter: spreads the lifetimes of the tokens wisp-token signs, so tokens issued together
// (a Deployment scaled to 1,000 pods, a node's volumes after a gateway restart) do not all expire,
// and get refreshed at 80% of their lifetime, in the same second.
//
// Contract:
//   - Apply(lifetime, minimum) with a spread of p percent returns lifetime - d, d drawn uniformly
//     from the integers 0 .. floor(lifetime * p / 100), then raised to `minimum`: never longer
//     than the lifetime the policy chose (so never past the policy's maximum), never shorter than
//     `minimum` (Kubernetes' 600 s). A lifetime at or below the minimum is returned unchanged.
//   - Jitter only shortens. IRSA (amazon-eks-pod-identity-webhook) does the same for its default
//     86400 s: it projects a lifetime drawn from 79200..86400 s, a spread of 1/12.
//   - The randomness is injected: `source` returns a uniform draw in [0, 1). The default source is
//     a thread-local std::mt19937_64 seeded from std::random_device (spreading, not secrecy:
//     nothing depends on the draw being unpredictable). Thread-safe when the source is.
//   - spread 0 disables it: Apply returns the lifetime unchanged and draws nothing.
//
// Example:
//   LifetimeJitter jitter(10);                  // wisp-token --lifetime-jitter-percent 10
//   int64_t exp_s = jitter.Apply(3600, 600);    // 3240 .. 3600
//   LifetimeJitter fixed(10, [] { return 0.5; });  // unit tests: 3600 -> 3420
#include <cstdint>
#include <functional>

namespace wisp::token {

inline constexpr int64_t kDefaultLifetimeJitterPercent = 10;
inline constexpr int64_t kMaxLifetimeJitterPercent = 50;

class LifetimeJitter {
 public:
  using Source = std::function<double()>;  // uniform in [0, 1)
  LifetimeJitter() : LifetimeJitter(0) {}  // off
  explicit LifetimeJitter(int64_t spread_percent, Source source = {});

  int64_t Apply(int64_t lifetime_seconds, int64_t minimum_seconds) const;
  int64_t spread_percent() const { return spread_percent_; }

 private:
  int64_t spread_percent_;
  Source source_;
};

}  // namespace wisp::token
