#include "lifetime_jitter.hpp"

#include <algorithm>
#include <random>

namespace wisp::token {
namespace {

double ThreadLocalUniform() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng);
}

}  // namespace

LifetimeJitter::LifetimeJitter(int64_t spread_percent, Source source)
    : spread_percent_(std::clamp<int64_t>(spread_percent, 0, kMaxLifetimeJitterPercent)),
      source_(source ? std::move(source) : Source(ThreadLocalUniform)) {}

int64_t LifetimeJitter::Apply(int64_t lifetime_seconds, int64_t minimum_seconds) const {
  if (spread_percent_ == 0 || lifetime_seconds <= minimum_seconds) return lifetime_seconds;
  const int64_t span = lifetime_seconds / 100 * spread_percent_ +
                       lifetime_seconds % 100 * spread_percent_ / 100;  // no overflow at 2^32
  // A draw u in [0, 1) picks one of the span + 1 offsets 0 .. span with equal chance.
  const double u = std::clamp(source_(), 0.0, 1.0);
  const int64_t offset =
      std::min<int64_t>(static_cast<int64_t>(u * static_cast<double>(span + 1)), span);
  return std::max(lifetime_seconds - offset, minimum_seconds);
}

}  // namespace wisp::token
