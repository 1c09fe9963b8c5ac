#include "progress.hpp"

#include <algorithm>
#include <cstdio>

namespace wisp::populator {

std::string FormatProgress(std::optional<double> ratio) {
  if (!ratio.has_value()) return kProgressUnknown;
  double pct = std::clamp(*ratio * 100.0, 0.0, 99.99);
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.2f%%", pct);
  return buf;
}

}  // namespace wisp::populator
