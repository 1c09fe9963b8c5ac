#pragma once
// KeyManager: wisp-token's signing keys, shared by every replica through the KV bucket wisp_keys.
//
// Contract:
//   - The whole key set is one KV entry (key "keyset", JSON): each key's kid (RFC 7638 thumbprint),
//     algorithm, state, creation/activation/retirement times, public JWK, and private key PEM
//     sealed with AES-256-GCM under the KEK (aad = kid), so the bucket never holds a usable private
//     key. A retired key's sealed private key is erased: it can never sign again.
//   - A key goes next -> active -> retired -> gone. Per algorithm there is one active key (it
//     signs) and at most one next key (published in the JWKS, not signing yet), so relying parties
//     that cache the JWKS know a key before they see a token it signed.
//   - Start(): loads the set, or creates it when absent (KV Create; AlreadyExists means another
//     replica won, so it loads theirs), then watches the entry so every replica follows changes.
//   - Tick() runs the schedule (SPIRE's, in durations): once the active key has signed for
//     rotation_period - publish_ahead the next key is made and published; once the active key has
//     signed for rotation_period and the next one has been published for publish_ahead, the next
//     key signs and the old one is retired. A retired key stays published until every token it
//     can have signed has expired (retired + longest token lifetime + 5 min), then it is dropped.
//     Every change is a compare-and-set on the entry's revision: when two replicas race, exactly
//     one write lands and the loser loads the winner's set. Returns true when this replica wrote.
//   - Operator changes (wispctl keys, wisp.v1.token.key_admin), each answering a sentence that
//     says what happened: Rotate() makes the next key sign now (making one first when none is
//     published: relying parties that cached the JWKS may refuse its tokens until they refetch);
//     Taint(kid) stops a key signing now (the next key takes over) and keeps it published until
//     its tokens expire; Revoke(kid) removes a key from the JWKS now, so the tokens it signed stop
//     verifying. A kid not in the set is NotFound naming it. A lost compare-and-set is retried.
//   - Current() is a cheap immutable snapshot; signing never parses a key.
//   - A KEK that does not open the stored keys is FailedPrecondition at Start() (never logs keys).
//
// Example:
//   KeyManager keys(*kv, kek, clock, {.rotation_period = 24h, .longest_token = 48h}, &metrics);
//   WISP_RETURN_IF_ERROR(keys.Start());
//   auto snap = keys.Current();
//   const jwt::PrivateKey* signer = snap->Active(jwt::Algorithm::kRS256);
//   absl::StatusOr<std::string> said = keys.Taint(signer->kid());  // "key ... stopped signing ..."
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "metrics.hpp"
#include "wisp/bus/bus.hpp"
#include "wisp/jwt/jws.hpp"
#include "wisp/jwt/seal.hpp"
#include "wisp/status/clock.hpp"

namespace wisp::token {

inline constexpr std::string_view kKeySetKey = "keyset";

enum class KeyState { kNext, kActive, kRetired };
std::string_view KeyStateName(KeyState state);  // "next", "active", "retired"

struct KeyInfo {
  std::string kid;
  jwt::Algorithm alg = jwt::Algorithm::kRS256;
  KeyState state = KeyState::kActive;
  bool tainted = false;         // stopped signing by an operator (wispctl keys taint)
  int64_t created_unix = 0;     // made and published
  int64_t activated_unix = 0;   // began signing (0 = next)
  int64_t retired_unix = 0;     // stopped signing (0 = next or active)
  int64_t drop_after_unix = 0;  // retired keys leave the JWKS after this
};

struct KeySnapshot {
  uint64_t revision = 0;
  std::map<jwt::Algorithm, jwt::PrivateKey> active;
  std::map<std::string, KeyInfo, std::less<>> info;  // every published key
  jwt::KeySet public_keys;                           // next + active + retired
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
    // How long each key signs.
    std::chrono::seconds rotation_period = std::chrono::hours(24);
    // How long the next key is published before it signs; 0 = half the rotation period (SPIRE
    // publishes its next key at half the active key's life). Clamped below rotation_period.
    std::chrono::seconds publish_ahead = std::chrono::seconds(0);
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
  // Every algorithm's next key signs now (see Rotate); true when this replica wrote.
  absl::StatusOr<bool> RotateNow();
  // Operator changes (see the contract); each answers what it did, in a sentence or two.
  // Rotate: `alg` only, or every algorithm.
  absl::StatusOr<std::string> Rotate(std::optional<jwt::Algorithm> alg = std::nullopt);
  absl::StatusOr<std::string> Taint(std::string_view kid);
  absl::StatusOr<std::string> Revoke(std::string_view kid);
  // The publish-ahead time in force (Options::publish_ahead resolved).
  std::chrono::seconds PublishAhead() const { return publish_ahead_; }
  std::chrono::seconds RotationPeriod() const { return options_.rotation_period; }
  // Raises how long keys retired from now on stay published (a reloaded policy that allows longer
  // tokens). Never lowers it: tokens signed under the longer lifetime may still be live, so a
  // shorter policy keeps the longest lifetime this process has signed under.
  void ExtendLongestToken(std::chrono::seconds longest);
  std::chrono::seconds LongestToken() const;

  KeySnapshotPtr Current() const;
  // Called (on the thread that saw it) after the snapshot changed: own write or watched write.
  void OnChange(std::function<void(const KeySnapshot&)> callback);

 private:
  struct Op {
    enum Kind { kTick, kRotate, kTaint, kRevoke } kind = kTick;
    std::optional<jwt::Algorithm> alg;  // kRotate: this algorithm only
    std::string kid;                    // kTaint, kRevoke
  };
  struct Planned {
    std::string json;  // the next state of the entry
    bool changed = false;
    int rotations = 0;  // keys that began signing
    std::string said;   // what an operator change did
  };
  absl::StatusOr<bool> Change(const Op& op, std::string* said);
  absl::Status Load(const bus::KvEntry& entry);
  absl::StatusOr<Planned> Plan(const std::string* current, const Op& op);
  void UpdateGauges(const KeySnapshot& snap);

  bus::KeyValue& kv_;
  const jwt::Kek kek_;
  Clock& clock_;
  const Options options_;
  const std::chrono::seconds publish_ahead_;
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
