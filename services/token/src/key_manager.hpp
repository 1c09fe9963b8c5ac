#pragma once
// KeyManager: wisp-token's signing keys, shared by every replica through the KV bucket wisp_keys.
//
// Contract:
//   - The whole key set is one KV entry (key "keyset", JSON): each key's kid (RFC 7638 thumbprint),
//     algorithm, creation/retirement times, public JWK, and private key PEM sealed with AES-256-GCM
//     under the KEK (aad = kid), so the bucket never holds a usable private key.
//   - Start(): loads the set, or creates it when absent (KV Create; AlreadyExists means another
//     replica won, so it loads theirs), then watches the entry so every replica follows changes.
//   - Tick(): when the active key of an algorithm is older than the rotation period, a new key is
//     made and the old one retired; a retired key is dropped once every token it can have signed
//     has expired (retired + longest token lifetime + 5 min). Every change is a compare-and-set on
//     the entry's revision: when two replicas race, exactly one write lands and the loser loads
//     the winner's set. Returns true when this replica wrote.
//   - Current() is a cheap immutable snapshot; signing never parses a key.
//   - A KEK that does not open the stored keys is FailedPrecondition at Start() (never logs keys).
//
// Example:
//   KeyManager keys(*kv, kek, clock, {.rotation_period = 24h, .longest_token = 48h}, &metrics);
//   WISP_RETURN_IF_ERROR(keys.Start());
//   auto snap = keys.Current();
//   const jwt::PrivateKey* signer = snap->Active(jwt::Algorithm::kRS256);
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "metrics.hpp"
#include "wisp/bus/bus.hpp"
#include "wisp/jwt/jws.hpp"
#include "wisp/jwt/seal.hpp"
#include "wisp/status/clock.hpp"

namespace wisp::token {

inline constexpr std::string_view kKeySetKey = "keyset";

struct KeyInfo {
  std::string kid;
  jwt::Algorithm alg = jwt::Algorithm::kRS256;
  int64_t created_unix = 0;
  int64_t retired_unix = 0;     // 0 = active
  int64_t drop_after_unix = 0;  // retired keys leave the JWKS after this
};

struct KeySnapshot {
  uint64_t revision = 0;
  std::map<jwt::Algorithm, jwt::PrivateKey> active;
  std::map<std::string, KeyInfo, std::less<>> info;  // every published key
  jwt::KeySet public_keys;                           // active + retired
  std::string jwks_json;                             // {"keys":[...]}

  const jwt::PrivateKey* Active(jwt::Algorithm alg) const {
    auto it = active.find(alg);
    return it == active.end() ? nullptr : &it->second;
  }
  const KeyInfo* Info(std::string_view kid) const {
    auto it = info.find(kid);
    return it == info.end() ? nullptr : &it->second;
  }
};
using KeySnapshotPtr = std::shared_ptr<const KeySnapshot>;

class KeyManager {
 public:
  struct Options {
    std::chrono::seconds rotation_period = std::chrono::hours(24);
    std::chrono::seconds longest_token = std::chrono::hours(24);
    std::vector<jwt::Algorithm> algorithms = {jwt::Algorithm::kRS256, jwt::Algorithm::kES256};
    jwt::Algorithm default_algorithm = jwt::Algorithm::kRS256;
  };

  KeyManager(bus::KeyValue& kv, jwt::Kek kek, Clock& clock, Options options, TokenMetrics* metrics);
  ~KeyManager();

  absl::Status Start();
  // Stops following the key set; the keys in hand keep serving. Call it before the bus drains (at
  // SIGTERM): the watch's consumer is deleted while the bus still answers, where a watch left to
  // the drain waited out nats.c's JetStream timeout (5 s, "NATS async error: Timeout").
  void StopWatching();
  absl::StatusOr<bool> Tick();
  // Retires every active key now and makes new ones (operator-forced rotation).
  absl::StatusOr<bool> RotateNow();
  // Raises how long keys retired from now on stay published (a reloaded policy that allows longer
  // tokens). Never lowers it: tokens signed under the longer lifetime may still be live, so a
  // shorter policy keeps the longest lifetime this process has signed under.
  void ExtendLongestToken(std::chrono::seconds longest);
  std::chrono::seconds LongestToken() const;

  KeySnapshotPtr Current() const;
  // Called (on the thread that saw it) after the snapshot changed: own write or watched write.
  void OnChange(std::function<void(const KeySnapshot&)> callback);

 private:
  struct Stored;
  absl::StatusOr<bool> Change(bool force);
  absl::Status Load(const bus::KvEntry& entry);
  absl::StatusOr<std::string> Plan(const std::string* current, bool force, bool* changed);
  void UpdateGauges(const KeySnapshot& snap);

  bus::KeyValue& kv_;
  const jwt::Kek kek_;
  Clock& clock_;
  const Options options_;
  TokenMetrics* metrics_;
  std::atomic<int64_t> longest_token_s_;

  std::mutex write_mu_;  // serialises this replica's Tick/RotateNow (never held during callbacks)
  mutable std::mutex mu_;
  KeySnapshotPtr snap_;
  std::string raw_;  // the stored JSON of snap_
  std::vector<std::function<void(const KeySnapshot&)>> callbacks_;
  bus::KvWatchPtr watch_;
};

}  // namespace wisp::token
