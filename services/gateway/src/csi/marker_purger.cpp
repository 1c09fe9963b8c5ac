#include "csi/marker_purger.hpp"

#include <algorithm>

#include "wisp/log/log.hpp"

namespace wisp::gateway::csi {

absl::Status ValidateMarkerPurgerOptions(const MarkerPurgerOptions& options) {
  if (options.interval.count() < 0 ||
      (options.interval.count() > 0 && options.interval < std::chrono::seconds(1))) {
    return absl::InvalidArgumentError(
        "projection-purge-interval: must be 0 (never purge) or at least 1s");
  }
  if (options.older_than.count() < 0) {
    return absl::InvalidArgumentError("projection-purge-age: must not be negative");
  }
  return absl::OkStatus();
}

MarkerPurger::MarkerPurger(bus::KeyValue& kv, const Clock& clock, MarkerPurgerOptions options,
                           CsiMetrics& metrics)
    : kv_(kv),
      clock_(clock),
      options_(options),
      metrics_(metrics),
      next_(clock.Steady() + options.interval) {}

MarkerPurger::~MarkerPurger() { Stop(); }

bool MarkerPurger::RunIfDue() {
  if (options_.interval.count() <= 0) return false;
  const auto now = clock_.Steady();
  if (now < next_) return false;
  next_ = now + options_.interval;
  const auto start = std::chrono::steady_clock::now();
  absl::Status st = kv_.PurgeDeletes(options_.older_than);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - start)
                      .count();
  static const auto logger = log::Get("csi");
  if (st.ok()) {
    metrics_.purges_ok.Increment();
    SPDLOG_LOGGER_INFO(logger, "purged delete markers older than {} ms from {} in {} ms",
                       options_.older_than.count(), kv_.bucket(), ms);
  } else {
    metrics_.purges_error.Increment();
    SPDLOG_LOGGER_WARN(
        logger, "purging delete markers from {} (next try in {} s): {}", kv_.bucket(),
        std::chrono::duration_cast<std::chrono::seconds>(options_.interval).count(), st.ToString());
  }
  return true;
}

void MarkerPurger::Start() {
  std::lock_guard lock(mu_);
  if (thread_.joinable() || options_.interval.count() <= 0) return;
  stop_ = false;
  thread_ = std::thread([this] {
    for (;;) {
      RunIfDue();
      std::unique_lock lock(mu_);
      if (stop_) return;
      // Wake when due, and at least every second (cheap, and Stop() does not wait long).
      const auto until =
          std::chrono::duration_cast<std::chrono::milliseconds>(next_ - clock_.Steady());
      const auto wait =
          std::clamp(until, std::chrono::milliseconds(1), std::chrono::milliseconds(1000));
      cv_.wait_for(lock, wait, [this] { return stop_; });
      if (stop_) return;
    }
  });
}

void MarkerPurger::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

}  // namespace wisp::gateway::csi
