#include "wisp/status/clock.hpp"

namespace wisp {

std::chrono::system_clock::time_point SystemClock::Now() const {
  return std::chrono::system_clock::now();
}
std::chrono::steady_clock::time_point SystemClock::Steady() const {
  return std::chrono::steady_clock::now();
}
SystemClock& SystemClock::Instance() {
  static SystemClock clock;
  return clock;
}

}  // namespace wisp
