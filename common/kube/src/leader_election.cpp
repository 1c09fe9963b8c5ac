#include "wisp/kube/leader_election.hpp"

#include <cmath>
#include <ctime>

#include "wisp/log/log.hpp"

namespace wisp::kube {

std::string MicroTime(std::chrono::system_clock::time_point t) {
  const auto us =
      std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(us / 1000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[48];
  std::snprintf(out, sizeof out, "%s.%06lldZ", date, static_cast<long long>(us % 1000000));
  return out;
}

Json LeaseSpec(const LeaderElectionOptions& options, const std::string& now, bool acquire,
               int64_t transitions) {
  Json spec = {{"holderIdentity", options.identity},
               {"leaseDurationSeconds",
                std::max<int64_t>(
                    1, static_cast<int64_t>(std::ceil(options.lease_duration.count() / 1000.0)))},
               {"renewTime", now},
               {"leaseTransitions", transitions}};
  if (acquire) spec["acquireTime"] = now;
  return spec;
}

LeaderElector::LeaderElector(Client& client, LeaderElectionOptions options,
                             std::function<void(bool)> on_change)
    : client_(client),
      options_(std::move(options)),
      on_change_(std::move(on_change)),
      logger_(log::Get("leader")) {}

LeaderElector::~LeaderElector() { Stop(); }

void LeaderElector::Start() {
  {
    std::lock_guard lock(mu_);
    stopping_ = false;
  }
  thread_ = std::thread([this] {
    std::unique_lock lock(mu_);
    while (!stopping_) {
      lock.unlock();
      TryOnce();
      lock.lock();
      cv_.wait_for(lock, options_.retry_period, [this] { return stopping_; });
    }
  });
}

void LeaderElector::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (!leading_.load()) return;
  // Release: the next replica need not wait out the lease.
  auto lease = client_.Get(kLeases, options_.namespace_name, options_.name);
  if (lease.ok() && lease->value("/spec/holderIdentity"_json_pointer, "") == options_.identity) {
    Json released = *lease;
    released["spec"]["holderIdentity"] = "";
    released["spec"]["leaseDurationSeconds"] = 1;
    auto put = client_.Update(kLeases, options_.namespace_name, released);
    if (!put.ok()) {
      SPDLOG_LOGGER_WARN(logger_, "lease {}/{} not released: {}", options_.namespace_name,
                         options_.name, std::string(put.status().message()));
    }
  }
  SetLeading(false);
}

void LeaderElector::SetLeading(bool leading) {
  if (leading_.exchange(leading) == leading) return;
  SPDLOG_LOGGER_INFO(logger_, "{} {} lease {}/{}", options_.identity,
                     leading ? "now holds" : "no longer holds", options_.namespace_name,
                     options_.name);
  if (on_change_) on_change_(leading);
}

absl::Status LeaderElector::Acquire() {
  const auto now_steady = std::chrono::steady_clock::now();
  const std::string now = MicroTime(std::chrono::system_clock::now());
  auto lease = client_.Get(kLeases, options_.namespace_name, options_.name);
  if (absl::IsNotFound(lease.status())) {
    Json created = {{"apiVersion", "coordination.k8s.io/v1"},
                    {"kind", "Lease"},
                    {"metadata", {{"name", options_.name}, {"namespace", options_.namespace_name}}},
                    {"spec", LeaseSpec(options_, now, true, 0)}};
    auto made = client_.Create(kLeases, options_.namespace_name, created);
    if (!made.ok()) return made.status();
    last_renewed_ = now_steady;
    return absl::OkStatus();
  }
  if (!lease.ok()) return lease.status();
  const std::string version = lease->value("/metadata/resourceVersion"_json_pointer, "");
  if (version != observed_version_) {
    observed_version_ = version;
    observed_at_ = now_steady;
  }
  const std::string holder = lease->value("/spec/holderIdentity"_json_pointer, "");
  const int64_t transitions = lease->value("/spec/leaseTransitions"_json_pointer, int64_t{0});
  Json updated = *lease;
  if (holder == options_.identity) {
    updated["spec"] = LeaseSpec(options_, now, false, transitions);
    updated["spec"]["acquireTime"] = lease->value("/spec/acquireTime"_json_pointer, now);
  } else {
    const int64_t duration_s = lease->value("/spec/leaseDurationSeconds"_json_pointer, int64_t{0});
    const bool expired =
        now_steady >= observed_at_ + std::chrono::seconds(std::max<int64_t>(duration_s, 1));
    if (!holder.empty() && !expired) return absl::FailedPreconditionError("held by " + holder);
    updated["spec"] = LeaseSpec(options_, now, true, transitions + 1);
  }
  auto put = client_.Update(kLeases, options_.namespace_name, updated);
  if (!put.ok()) return put.status();
  observed_version_ = put->value("/metadata/resourceVersion"_json_pointer, "");
  observed_at_ = now_steady;
  last_renewed_ = now_steady;
  return absl::OkStatus();
}

void LeaderElector::TryOnce() {
  absl::Status s = Acquire();
  if (s.ok()) {
    SetLeading(true);
    return;
  }
  if (leading_.load()) {
    if (std::chrono::steady_clock::now() - last_renewed_ >= options_.renew_deadline) {
      SPDLOG_LOGGER_WARN(logger_, "lease {}/{} not renewed for {} ms: {}", options_.namespace_name,
                         options_.name, options_.renew_deadline.count(), std::string(s.message()));
      SetLeading(false);
    }
    return;
  }
  if (!absl::IsFailedPrecondition(s) && !absl::IsAborted(s) && !absl::IsAlreadyExists(s)) {
    SPDLOG_LOGGER_WARN(logger_, "lease {}/{}: {}", options_.namespace_name, options_.name,
                       std::string(s.message()));
  }
}

}  // namespace wisp::kube
