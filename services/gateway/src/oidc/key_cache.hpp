#pragma once
// KeyCache: the gateway's copy of wisp-token's public key set and discovery document.
//
// Contract:
//   - Start() subscribes to wisp.v1.events.token.keys (every gateway instance receives each change)
//     and asks wisp.v1.token.keys once; a refresh thread asks again every refresh_interval (and
//     every retry_interval while it has nothing), so a missed event heals. No request path ever
//     waits on the bus.
//   - A KeysResponse with a generation lower than the one held is ignored (events and refreshes
//     may arrive out of order).
//   - Current() is a cheap immutable snapshot, nullptr until the first key set arrived.
//
// Example:
//   KeyCache cache(bus, {.refresh_interval = std::chrono::seconds(60)});
//   WISP_RETURN_IF_ERROR(cache.Start());
//   if (auto keys = cache.Current()) serve(keys->jwks_json());
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "wisp/bus/bus.hpp"
#include "wisp/v1/token.pb.h"

namespace wisp::gateway::oidc {

class KeyCache {
 public:
  struct Options {
    std::chrono::milliseconds refresh_interval = std::chrono::seconds(60);
    std::chrono::milliseconds retry_interval = std::chrono::seconds(1);
    std::chrono::milliseconds request_timeout = std::chrono::seconds(2);
  };
  KeyCache(bus::Bus& bus, Options options);
  ~KeyCache();

  absl::Status Start();
  void Stop();
  std::shared_ptr<const v1::KeysResponse> Current() const;
  // Offers a key set (from an event or a refresh); returns true when it replaced the held one.
  bool Offer(v1::KeysResponse keys);
  // Asks wisp-token now.
  absl::Status Refresh();

 private:
  void Loop();

  bus::Bus& bus_;
  const Options options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::shared_ptr<const v1::KeysResponse> current_;
  bus::SubscriptionPtr sub_;
  std::thread thread_;
};

}  // namespace wisp::gateway::oidc
