#include "token_server.hpp"

#include <ctime>

#include <nlohmann/json.hpp>

#include "wisp/log/log.hpp"

namespace wisp::sidecar {

std::string FormatRfc3339Nano(std::chrono::system_clock::time_point t) {
  const auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  int64_t secs = ns / 1'000'000'000;
  int64_t frac = ns % 1'000'000'000;
  if (frac < 0) {
    frac += 1'000'000'000;
    --secs;
  }
  const std::time_t tt = static_cast<std::time_t>(secs);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  std::string out = buf;
  if (frac != 0) {
    char f[16];
    std::snprintf(f, sizeof(f), ".%09lld", static_cast<long long>(frac));
    std::string fs = f;
    while (fs.back() == '0') fs.pop_back();
    out += fs;
  }
  out += "Z";
  return out;
}

TokenServer::TokenServer(TokenFile& file, StsClient& sts, Clock& clock, double refresh_fraction,
                         SidecarMetrics* metrics)
    : file_(file),
      sts_(sts),
      clock_(clock),
      refresh_fraction_(refresh_fraction),
      metrics_(metrics) {}

int TokenServer::exchanges() const {
  std::lock_guard lock(mu_);
  return exchanges_;
}

absl::StatusOr<CachedToken> TokenServer::Get() {
  std::unique_lock lock(mu_);
  const auto start = clock_.Now();
  // Fresh, or due for refresh but still valid while another caller refreshes it or a failed
  // refresh is backing off: the cached token answers at once (nobody waits up to the STS timeout
  // for a token we already hold, and a down gateway is not asked once per request).
  if (cached_ &&
      (start < refresh_at_ || (start < cached_->expiry && (in_flight_ || start < retry_at_)))) {
    if (metrics_) metrics_->cache_hits.Increment();
    return *cached_;
  }
  if (metrics_) metrics_->cache_misses.Increment();
  while (true) {
    const auto now = clock_.Now();
    if (cached_ && now < refresh_at_) return *cached_;
    if (!in_flight_) break;
    // Someone is exchanging: wait for that attempt, then use its outcome.
    const uint64_t gen = generation_;
    cv_.wait(lock, [&] { return generation_ != gen; });
    if (cached_ && clock_.Now() < cached_->expiry) return *cached_;
    if (!last_error_.ok()) return last_error_;
  }
  in_flight_ = true;
  lock.unlock();

  absl::StatusOr<AccessToken> fresh = absl::UnknownError("not attempted");
  const int loads_before = file_.loads();
  auto subject = file_.Read();
  const bool from_token_file = !subject.ok();
  if (!subject.ok()) {
    fresh = subject.status();
  } else {
    fresh = sts_.Exchange(*subject);
  }
  const auto now = clock_.Now();
  if (metrics_) {
    if (file_.loads() != loads_before) metrics_->token_file_reloads_total.Increment();
    metrics_->sts_exchanges_total
        .Add({{"outcome", std::string(SidecarMetrics::Outcome(fresh.status(), from_token_file))}})
        .Increment();
  }

  lock.lock();
  in_flight_ = false;
  ++generation_;
  ++exchanges_;
  absl::StatusOr<CachedToken> result = absl::UnknownError("unset");
  if (fresh.ok()) {
    CachedToken t{fresh->access_token, fresh->token_type, now + fresh->expires_in};
    refresh_at_ = now + std::chrono::duration_cast<std::chrono::system_clock::duration>(
                            fresh->expires_in * refresh_fraction_);
    cached_ = t;
    last_error_ = absl::OkStatus();
    result = t;
  } else {
    last_error_ = fresh.status();
    retry_at_ = now + kRefreshRetryBackoff;
    static auto logger = log::Get("sidecar");
    if (cached_ && now < cached_->expiry) {
      SPDLOG_LOGGER_WARN(logger, "couldn't refresh the access token, serving the cached one: {}",
                         fresh.status().ToString());
      result = *cached_;
    } else {
      SPDLOG_LOGGER_ERROR(logger, "token exchange failed: {}", fresh.status().ToString());
      result = fresh.status();
    }
  }
  lock.unlock();
  cv_.notify_all();
  return result;
}

http::Response TokenServer::Handle(const http::Request&) {
  auto t = Get();
  if (metrics_) (t.ok() ? metrics_->requests_ok : metrics_->requests_error).Increment();
  if (!t.ok()) {
    return http::Response::Error(500,
                                 "failed to fetch token: " + std::string(t.status().message()));
  }
  nlohmann::json body = {{"access_token", t->access_token},
                         {"token_type", t->token_type},
                         {"expiry", FormatRfc3339Nano(t->expiry)}};
  return http::Response::Json(200, body.dump());
}

}  // namespace wisp::sidecar
