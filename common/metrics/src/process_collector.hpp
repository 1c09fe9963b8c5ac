#pragma once
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

namespace wisp::metrics {

class ProcessCollector final : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override;
};

}  // namespace wisp::metrics
