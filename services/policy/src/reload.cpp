#include "wisp/policy/reload.hpp"

#include "wisp/log/log.hpp"

namespace wisp::policy {

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
  reloader_ = std::make_unique<config::FileReloader>(
      config::FileReloader::Options{
          .path = path_, .change_trigger = "file-change", .sighup_trigger = "sighup"},
      [this](const std::string& bytes) { return Load(bytes); },
      [this](std::string_view trigger, const absl::Status& st) { Observe(trigger, st); });
}

PolicyReloader::~PolicyReloader() { reloader_->Stop(); }

absl::Status PolicyReloader::Load(const std::string& bytes) {
  auto policy = ParsePolicyYaml(bytes);
  if (!policy.ok()) return Annotate(policy.status(), path_);
  apply_(*std::move(policy));
  return absl::OkStatus();
}

void PolicyReloader::Observe(std::string_view trigger, const absl::Status& st) {
  static const auto logger = log::Get("policy");
  const std::string t(trigger);
  if (!st.ok()) {
    metrics_.reloads.Add({{"trigger", t}, {"result", "error"}}).Increment();
    metrics_.success.Set(0);
    SPDLOG_LOGGER_WARN(logger, "policy reload ({}) refused, keeping the policy in force: {}", t,
                       std::string(st.message()));
    return;
  }
  metrics_.reloads.Add({{"trigger", t}, {"result", "ok"}}).Increment();
  metrics_.success.Set(1);
  SPDLOG_LOGGER_INFO(logger, "policy reloaded from {} ({})", path_, t);
}

absl::Status PolicyReloader::Reload(std::string_view trigger) { return reloader_->Reload(trigger); }

absl::Status PolicyReloader::ReloadIfChanged(std::string_view trigger) {
  return reloader_->ReloadIfChanged(trigger);
}

void PolicyReloader::Watch(std::chrono::milliseconds interval) { reloader_->Start(interval); }

}  // namespace wisp::policy
