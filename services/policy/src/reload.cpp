#include "policy/src/reload.hpp"

#include <fstream>
#include <sstream>

#include "wisp/log/log.hpp"

namespace wisp::policy {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("policy file " + path + " cannot be read");
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

}  // namespace

ReloadMetrics::ReloadMetrics(prometheus::Registry& registry)
    : reloads(prometheus::BuildCounter()
                  .Name("wisp_policy_reloads_total")
                  .Help("Policy file reloads by trigger (sighup|file-change) and result (ok|error)")
                  .Register(registry)),
      success(prometheus::BuildGauge()
                  .Name("wisp_policy_reload_success")
                  .Help("1 when the last policy file load succeeded, 0 when it was refused")
                  .Register(registry)
                  .Add({})) {
  success.Set(1);
}

PolicyReloader::PolicyReloader(std::string path, Apply apply, ReloadMetrics& metrics)
    : path_(std::move(path)), apply_(std::move(apply)), metrics_(metrics) {
  if (auto bytes = ReadFile(path_); bytes.ok()) {
    last_bytes_ = *std::move(bytes);
    have_last_ = true;
  }
}

PolicyReloader::~PolicyReloader() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
}

absl::Status PolicyReloader::Load(const std::string& bytes, std::string_view trigger) {
  static const auto logger = log::Get("policy");
  auto policy = ParsePolicyYaml(bytes);
  const std::string t(trigger);
  if (!policy.ok()) {
    metrics_.reloads.Add({{"trigger", t}, {"result", "error"}}).Increment();
    metrics_.success.Set(0);
    absl::Status st = Annotate(policy.status(), path_);
    SPDLOG_LOGGER_WARN(logger, "policy reload ({}) refused, keeping the policy in force: {}", t,
                       std::string(st.message()));
    return st;
  }
  apply_(*std::move(policy));
  metrics_.reloads.Add({{"trigger", t}, {"result", "ok"}}).Increment();
  metrics_.success.Set(1);
  SPDLOG_LOGGER_INFO(logger, "policy reloaded from {} ({})", path_, t);
  return absl::OkStatus();
}

absl::Status PolicyReloader::Reload(std::string_view trigger) {
  std::lock_guard<std::mutex> lock(mu_);
  auto bytes = ReadFile(path_);
  if (!bytes.ok()) {
    static const auto logger = log::Get("policy");
    metrics_.reloads.Add({{"trigger", std::string(trigger)}, {"result", "error"}}).Increment();
    metrics_.success.Set(0);
    SPDLOG_LOGGER_WARN(logger, "policy reload ({}) refused, keeping the policy in force: {}",
                       std::string(trigger), std::string(bytes.status().message()));
    return bytes.status();
  }
  last_bytes_ = *bytes;
  have_last_ = true;
  return Load(*bytes, trigger);
}

absl::Status PolicyReloader::ReloadIfChanged(std::string_view trigger) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto bytes = ReadFile(path_);
    // A file that is briefly missing (a ConfigMap's symlink swap) is not a change worth a refusal.
    if (!bytes.ok() || (have_last_ && *bytes == last_bytes_)) return absl::OkStatus();
  }
  return Reload(trigger);
}

void PolicyReloader::Watch(std::chrono::milliseconds interval) {
  if (interval.count() <= 0 || watcher_.joinable()) return;
  watcher_ = std::thread([this, interval] {
    std::unique_lock<std::mutex> lock(stop_mu_);
    while (!stop_cv_.wait_for(lock, interval, [this] { return stop_; })) {
      lock.unlock();
      (void)ReloadIfChanged("file-change");
      lock.lock();
    }
  });
}

}  // namespace wisp::policy
