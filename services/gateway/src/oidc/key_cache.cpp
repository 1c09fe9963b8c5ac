#include "oidc/key_cache.hpp"

#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/log/log.hpp"

namespace wisp::gateway::oidc {

KeyCache::KeyCache(bus::Bus& bus, Options options) : bus_(bus), options_(options) {}

KeyCache::~KeyCache() { Stop(); }

absl::Status KeyCache::Start() {
  auto sub = bus_.Subscribe(bus::subjects::kTokenKeysChanged, "", [this](const bus::Message& m) {
    v1::KeysResponse keys;
    if (keys.ParseFromString(m.data)) Offer(std::move(keys));
  });
  if (!sub.ok()) return Annotate(sub.status(), "subscribing to key set changes");
  sub_ = std::move(*sub);
  (void)Refresh();  // the loop retries when wisp-token is not up yet
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void KeyCache::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  sub_.reset();
}

std::shared_ptr<const v1::KeysResponse> KeyCache::Current() const {
  std::lock_guard lock(mu_);
  return current_;
}

bool KeyCache::Offer(v1::KeysResponse keys) {
  auto next = std::make_shared<const v1::KeysResponse>(std::move(keys));
  std::lock_guard lock(mu_);
  if (current_ && next->generation() < current_->generation()) return false;
  current_ = std::move(next);
  return true;
}

absl::Status KeyCache::Refresh() {
  auto keys = bus::Call<v1::KeysResponse>(bus_, bus::subjects::kTokenKeys, v1::KeysRequest(),
                                          options_.request_timeout);
  if (!keys.ok()) return keys.status();
  Offer(std::move(*keys));
  return absl::OkStatus();
}

void KeyCache::Loop() {
  static auto logger = log::Get("oidc");
  std::unique_lock lock(mu_);
  while (!stop_) {
    const auto wait = current_ ? options_.refresh_interval : options_.retry_interval;
    cv_.wait_for(lock, wait, [this] { return stop_; });
    if (stop_) break;
    lock.unlock();
    if (auto st = Refresh(); !st.ok()) {
      SPDLOG_LOGGER_DEBUG(logger, "refreshing key set: {}", st.ToString());
    }
    lock.lock();
  }
}

}  // namespace wisp::gateway::oidc
