#include "token_server.hpp"

#include <algorithm>
#include <ctime>
#include <random>

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

std::chrono::milliseconds RetryDelay(int failures, std::optional<std::chrono::seconds> retry_after,
                                     const RefreshOptions& options, double draw1, double draw2) {
  using std::chrono::milliseconds;
  const bool jitter = options.refresh_jitter_percent > 0;
  milliseconds d = options.backoff_initial;
  for (int i = 1; i < failures && d < options.backoff_max; ++i) d *= 2;
  d = std::min(d, options.backoff_max);
  milliseconds delay = d;
  if (jitter) delay = milliseconds(d.count() - static_cast<int64_t>(draw1 * d.count() / 2));
  if (retry_after && retry_after->count() > 0) {
    milliseconds floor = std::min<milliseconds>(*retry_after, kMaxRetryAfter);
    if (jitter) floor += milliseconds(static_cast<int64_t>(draw2 * d.count() / 2));
    delay = std::max(delay, floor);
  }
  return delay;
}

TokenServer::TokenServer(TokenFile& file, StsClient& sts, Clock& clock, RefreshOptions options)
    : file_(file),
      sts_(sts),
      clock_(clock),
      options_(std::move(options)),
      metrics_(options_.metrics) {}

double TokenServer::Draw() const {
  if (options_.random) return std::clamp(options_.random(), 0.0, 1.0);
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng);
}

int TokenServer::exchanges() const {
  std::lock_guard lock(mu_);
  return exchanges_;
}

std::chrono::system_clock::time_point TokenServer::NextAttempt() const {
  std::lock_guard lock(mu_);
  return cached_ && last_error_.ok() ? refresh_at_ : retry_at_;
}

absl::StatusOr<CachedToken> TokenServer::Get(Caller caller) {
  SidecarMetrics* const lookups = caller == Caller::kRequest ? metrics_ : nullptr;
  std::unique_lock lock(mu_);
  const auto start = clock_.Now();
  // Fresh, or due for refresh but still valid while another caller refreshes it or a failed
  // refresh is backing off: the cached token answers at once (nobody waits up to the STS timeout
  // for a token we already hold, and a down gateway is not asked once per request).
  if (cached_ &&
      (start < refresh_at_ || (start < cached_->expiry && (in_flight_ > 0 || start < retry_at_)))) {
    if (lookups) lookups->cache_hits.Increment();
    return *cached_;
  }
  if (lookups) lookups->cache_misses.Increment();
  while (true) {
    const auto now = clock_.Now();
    if (cached_ && now < refresh_at_) return *cached_;
    // Backing off with nothing valid to serve: the last error, at once, without asking the STS;
    // unless kubelet has since written a new subject token (a refusal of the old one says nothing
    // of the new one: the backoff is for the STS, not for a token that changed).
    // A Retry-After from the STS is kept all the same.
    if (!last_error_.ok() && now < retry_at_ && in_flight_ == 0) {
      if (RetryAfterOf(last_error_).has_value()) return last_error_;
      const int loads_before = file_.loads();
      const bool read = file_.Read().ok();
      if (metrics_ && file_.loads() != loads_before) {
        metrics_->token_file_reloads_total.Increment();
      }
      if (!read || file_.loads() == failed_loads_) return last_error_;
      retry_at_ = {};
    }
    if (in_flight_ == 0 || !options_.single_flight) break;
    // Someone is exchanging: wait for that attempt, then use its outcome.
    const uint64_t gen = generation_;
    cv_.wait(lock, [&] { return generation_ != gen; });
    if (cached_ && clock_.Now() < cached_->expiry) return *cached_;
    if (!last_error_.ok()) return last_error_;
  }
  ++in_flight_;
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
  --in_flight_;
  ++generation_;
  ++exchanges_;
  absl::StatusOr<CachedToken> result = absl::UnknownError("unset");
  if (fresh.ok()) {
    CachedToken t{fresh->access_token, fresh->token_type, now + fresh->expires_in};
    // The refresh point of this token: (fraction - jitter) .. fraction of its lifetime.
    const double at = options_.refresh_fraction -
                      (options_.refresh_jitter_percent > 0
                           ? Draw() * static_cast<double>(options_.refresh_jitter_percent) / 100
                           : 0.0);
    refresh_at_ = now + std::chrono::duration_cast<std::chrono::system_clock::duration>(
                            fresh->expires_in * std::max(at, 0.0));
    cached_ = t;
    last_error_ = absl::OkStatus();
    failures_ = 0;
    retry_at_ = {};
    result = t;
  } else {
    last_error_ = fresh.status();
    failed_loads_ = file_.loads();
    ++failures_;
    const double draw1 = Draw(), draw2 = Draw();
    const auto delay = RetryDelay(failures_, RetryAfterOf(fresh.status()), options_, draw1, draw2);
    retry_at_ = now + delay;
    static auto logger = log::Get("sidecar");
    if (cached_ && now < cached_->expiry) {
      SPDLOG_LOGGER_WARN(logger,
                         "couldn't refresh the access token, serving the cached one; next attempt "
                         "in {} ms: {}",
                         delay.count(), fresh.status().ToString());
      result = *cached_;
    } else {
      SPDLOG_LOGGER_ERROR(logger, "token exchange failed; next attempt in {} ms: {}", delay.count(),
                          fresh.status().ToString());
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
