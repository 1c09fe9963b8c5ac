#include "key_manager.hpp"

#include <algorithm>
#include <ctime>

#include <nlohmann/json.hpp>

#include "wisp/config/flags.hpp"
#include "wisp/jwt/base64url.hpp"
#include "wisp/log/log.hpp"

namespace wisp::token {
namespace {

constexpr int64_t kDropSlackSeconds = 300;

std::shared_ptr<spdlog::logger> Logger() {
  static auto logger = log::Get("keys");
  return logger;
}

std::chrono::seconds ResolvePublishAhead(const KeyManager::Options& o) {
  std::chrono::seconds ahead =
      o.publish_ahead.count() > 0 ? o.publish_ahead : o.rotation_period / 2;
  // The next key must be made while the active one still signs.
  return std::min(ahead, o.rotation_period - std::chrono::seconds(1));
}

// The state of a stored key; entries written before states existed have only "retired".
KeyState StateOf(const nlohmann::json& k) {
  if (auto s = k.find("state"); s != k.end() && s->is_string()) {
    if (*s == "next") return KeyState::kNext;
    if (*s == "retired") return KeyState::kRetired;
    if (*s == "active") return KeyState::kActive;
  }
  return k.value("retired", int64_t{0}) != 0 ? KeyState::kRetired : KeyState::kActive;
}

// When a stored key began signing; entries written before "activated" existed: when made.
int64_t ActivatedOf(const nlohmann::json& k) {
  return k.value("activated", k.value("created", int64_t{0}));
}

std::string UtcTime(int64_t unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string Age(int64_t seconds) {
  return config::FormatDuration(std::chrono::seconds(std::max<int64_t>(seconds, 0)));
}

}  // namespace

std::string_view KeyStateName(KeyState state) {
  switch (state) {
    case KeyState::kNext:
      return "next";
    case KeyState::kActive:
      return "active";
    case KeyState::kRetired:
      return "retired";
  }
  return "?";
}

KeyManager::KeyManager(bus::KeyValue& kv, jwt::Kek kek, Clock& clock, Options options,
                       TokenMetrics* metrics)
    : kv_(kv),
      kek_(std::move(kek)),
      clock_(clock),
      options_(std::move(options)),
      publish_ahead_(ResolvePublishAhead(options_)),
      metrics_(metrics),
      longest_token_s_(options_.longest_token.count()),
      snap_(std::make_shared<KeySnapshot>()) {
  if (metrics_) {
    metrics_->key_rotation_period_seconds.Set(
        static_cast<double>(options_.rotation_period.count()));
  }
}

KeyManager::~KeyManager() { watch_.reset(); }

KeySnapshotPtr KeyManager::Current() const {
  std::lock_guard lock(mu_);
  return snap_;
}

void KeyManager::OnChange(std::function<void(const KeySnapshot&)> callback) {
  std::lock_guard lock(mu_);
  callbacks_.push_back(std::move(callback));
}

absl::Status KeyManager::Start() {
  WISP_ASSIGN_OR_RETURN(bool wrote, Change(Op{}, nullptr));
  (void)wrote;
  auto watch = kv_.Watch(kKeySetKey, [this](const bus::KvEntry& e) {
    if (e.key.empty() || e.deleted) return;
    if (auto st = Load(e); !st.ok()) {
      SPDLOG_LOGGER_ERROR(Logger(), "ignoring key set revision {}: {}", e.revision, st.ToString());
    }
  });
  if (!watch.ok()) return Annotate(watch.status(), "watching key set");
  watch_ = std::move(*watch);
  return absl::OkStatus();
}

void KeyManager::StopWatching() { watch_.reset(); }

absl::StatusOr<bool> KeyManager::Tick() {
  auto wrote = Change(Op{}, nullptr);
  UpdateGauges(*Current());
  return wrote;
}

absl::StatusOr<bool> KeyManager::RotateNow() { return Change(Op{.kind = Op::kRotate}, nullptr); }

absl::StatusOr<std::string> KeyManager::Rotate(std::optional<jwt::Algorithm> alg) {
  if (alg && std::find(options_.algorithms.begin(), options_.algorithms.end(), *alg) ==
                 options_.algorithms.end()) {
    return absl::InvalidArgumentError("algorithm: wisp-token does not sign with " +
                                      std::string(jwt::AlgorithmName(*alg)));
  }
  std::string said;
  WISP_RETURN_IF_ERROR(Change(Op{.kind = Op::kRotate, .alg = alg}, &said).status());
  return said;
}

absl::StatusOr<std::string> KeyManager::Taint(std::string_view kid) {
  if (kid.empty()) return absl::InvalidArgumentError("kid: required");
  std::string said;
  WISP_RETURN_IF_ERROR(Change(Op{.kind = Op::kTaint, .kid = std::string(kid)}, &said).status());
  return said;
}

absl::StatusOr<std::string> KeyManager::Revoke(std::string_view kid) {
  if (kid.empty()) return absl::InvalidArgumentError("kid: required");
  std::string said;
  WISP_RETURN_IF_ERROR(Change(Op{.kind = Op::kRevoke, .kid = std::string(kid)}, &said).status());
  return said;
}

void KeyManager::ExtendLongestToken(std::chrono::seconds longest) {
  int64_t seen = longest_token_s_.load();
  while (longest.count() > seen && !longest_token_s_.compare_exchange_weak(seen, longest.count())) {
  }
  if (longest.count() > seen) {
    SPDLOG_LOGGER_INFO(Logger(), "keys retired from now on stay published {} s (was {} s)",
                       longest.count(), seen);
  }
}

std::chrono::seconds KeyManager::LongestToken() const {
  return std::chrono::seconds(longest_token_s_.load());
}

// Reads the entry, plans the next state, and writes it by compare-and-set. A lost race (Aborted,
// AlreadyExists) loads the winner's state instead; an operator change is then planned again on
// the winner's state (a schedule tick is not: the winner did the same).
absl::StatusOr<bool> KeyManager::Change(const Op& op, std::string* said) {
  std::lock_guard write_lock(write_mu_);
  const int attempts = op.kind == Op::kTick ? 1 : 5;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    auto entry = kv_.Get(kKeySetKey);
    if (!entry.ok() && entry.status().code() != absl::StatusCode::kNotFound) {
      return Annotate(entry.status(), "reading key set");
    }
    const bool exists = entry.ok();
    if (exists) WISP_RETURN_IF_ERROR(Load(*entry));
    WISP_ASSIGN_OR_RETURN(Planned plan, Plan(exists ? &entry->value : nullptr, op));
    if (said != nullptr) *said = plan.said;
    if (!plan.changed) return false;
    absl::StatusOr<uint64_t> rev = exists ? kv_.Update(kKeySetKey, plan.json, entry->revision)
                                          : kv_.Create(kKeySetKey, plan.json);
    if (!rev.ok()) {
      if (rev.status().code() == absl::StatusCode::kAborted ||
          rev.status().code() == absl::StatusCode::kAlreadyExists) {
        SPDLOG_LOGGER_INFO(Logger(), "another replica changed the key set first; loading it");
        auto fresh = kv_.Get(kKeySetKey);
        if (!fresh.ok()) return Annotate(fresh.status(), "reading key set");
        WISP_RETURN_IF_ERROR(Load(*fresh));
        continue;
      }
      return Annotate(rev.status(), "writing key set");
    }
    WISP_RETURN_IF_ERROR(Load(bus::KvEntry{std::string(kKeySetKey), plan.json, *rev, false}));
    // One rotation per write that put next keys to work (every algorithm switches in one write).
    if (exists && metrics_ && plan.rotations > 0) metrics_->key_rotations_total.Increment();
    SPDLOG_LOGGER_INFO(Logger(), "key set written at revision {}", *rev);
    return true;
  }
  if (op.kind == Op::kTick) return false;
  return absl::AbortedError("the key set kept changing under this change; try again");
}

absl::StatusOr<KeyManager::Planned> KeyManager::Plan(const std::string* current, const Op& op) {
  const int64_t now = clock_.NowUnixSeconds();
  const int64_t period = options_.rotation_period.count();
  const int64_t ahead = publish_ahead_.count();
  Planned out;
  nlohmann::json doc = {{"version", 1}, {"kek_id", kek_.Id()}, {"keys", nlohmann::json::array()}};
  if (current != nullptr) {
    doc = nlohmann::json::parse(*current, nullptr, false);
    if (!doc.is_object() || !doc["keys"].is_array()) {
      return absl::DataLossError("stored key set is not valid JSON");
    }
  }
  std::vector<nlohmann::json> keys;
  for (auto& k : doc["keys"]) {
    if (!jwt::ParseAlgorithm(k.value("alg", "")).ok()) {
      return absl::DataLossError("stored key has an unknown alg");
    }
    // Written out in full from here on (entries from before states existed have none).
    k["state"] = KeyStateName(StateOf(k));
    k["activated"] = StateOf(k) == KeyState::kNext ? int64_t{0} : ActivatedOf(k);
    k["tainted"] = k.value("tainted", false);
    keys.push_back(std::move(k));
  }
  const auto alg_of = [](const nlohmann::json& k) {
    return *jwt::ParseAlgorithm(k.value("alg", ""));
  };
  const auto find = [&](jwt::Algorithm alg, KeyState state) -> nlohmann::json* {
    for (auto& k : keys) {
      if (alg_of(k) == alg && StateOf(k) == state) return &k;
    }
    return nullptr;
  };
  const auto make = [&](jwt::Algorithm alg, KeyState state) -> absl::StatusOr<nlohmann::json*> {
    WISP_ASSIGN_OR_RETURN(jwt::PrivateKey key, jwt::PrivateKey::Generate(alg));
    WISP_ASSIGN_OR_RETURN(std::string pem, key.ToPem());
    auto sealed = jwt::Seal(kek_, pem, key.kid());
    std::fill(pem.begin(), pem.end(), '\0');
    if (!sealed.ok()) return sealed.status();
    keys.push_back({{"kid", key.kid()},
                    {"alg", jwt::AlgorithmName(alg)},
                    {"state", KeyStateName(state)},
                    {"tainted", false},
                    {"created", now},
                    {"activated", state == KeyState::kActive ? now : int64_t{0}},
                    {"retired", 0},
                    {"drop_after", 0},
                    {"public", key.public_key().Jwk()},
                    {"sealed", jwt::Base64Encode(*sealed)}});
    SPDLOG_LOGGER_INFO(Logger(), "new {} signing key kid={} ({})", jwt::AlgorithmName(alg),
                       key.kid(), KeyStateName(state));
    out.changed = true;
    if (state == KeyState::kActive) ++out.rotations;
    return &keys.back();
  };
  // The key stops signing for good: its private key leaves the store.
  const auto retire = [&](nlohmann::json& k, bool tainted) {
    k["state"] = KeyStateName(KeyState::kRetired);
    k["retired"] = now;
    k["drop_after"] = now + longest_token_s_.load() + kDropSlackSeconds;
    k["tainted"] = k.value("tainted", false) || tainted;
    k.erase("sealed");
    out.changed = true;
  };
  // The next key of `alg` signs now (one is made when none is published); says which.
  const auto promote = [&](jwt::Algorithm alg) -> absl::StatusOr<std::string> {
    if (nlohmann::json* next = find(alg, KeyState::kNext)) {
      (*next)["state"] = KeyStateName(KeyState::kActive);
      (*next)["activated"] = now;
      out.changed = true;
      ++out.rotations;
      return "now signing with " + next->value("kid", "") + " (published " +
             Age(now - next->value("created", now)) + " ago)";
    }
    WISP_ASSIGN_OR_RETURN(nlohmann::json * made, make(alg, KeyState::kActive));
    return "now signing with " + made->value("kid", "") +
           ", made just now: no next key was published, so relying parties that cached the JWKS "
           "may refuse its tokens until they fetch it again";
  };
  const auto remove = [&](const nlohmann::json* k) {
    keys.erase(keys.begin() + (k - keys.data()));
    out.changed = true;
  };

  // An operator change first.
  if (op.kind == Op::kTaint || op.kind == Op::kRevoke) {
    nlohmann::json* k = nullptr;
    for (auto& key : keys) {
      if (key.value("kid", "") == op.kid) k = &key;
    }
    if (k == nullptr) {
      return absl::NotFoundError("kid: key \"" + op.kid +
                                 "\" is not in the key set (wispctl keys list shows the kids)");
    }
    const jwt::Algorithm alg = alg_of(*k);
    const std::string name = "key " + op.kid + " (" + std::string(jwt::AlgorithmName(alg)) + ", " +
                             std::string(KeyStateName(StateOf(*k))) + ")";
    const KeyState state = StateOf(*k);
    if (op.kind == Op::kRevoke) {
      remove(k);
      out.said = name +
                 " revoked: removed from the JWKS now, so the tokens it signed no longer verify "
                 "(relying parties that cached the JWKS drop it when they fetch it again)";
      if (state == KeyState::kActive) {
        WISP_ASSIGN_OR_RETURN(std::string promoted, promote(alg));
        out.said += "; " + promoted;
      }
    } else if (state == KeyState::kNext) {
      remove(k);
      out.said = name +
                 " tainted: it had signed no token, so it left the JWKS now; the schedule "
                 "publishes another next key";
    } else if (state == KeyState::kActive) {
      retire(*k, true);
      out.said = name + " tainted: no new token carries it; it stays in the JWKS until " +
                 UtcTime(k->value("drop_after", int64_t{0})) +
                 ", when every token it signed has expired";
      WISP_ASSIGN_OR_RETURN(std::string promoted, promote(alg));
      out.said += "; " + promoted;
    } else {
      out.changed = out.changed || !k->value("tainted", false);
      (*k)["tainted"] = true;
      out.said = name + " tainted: it had already stopped signing; it stays in the JWKS until " +
                 UtcTime(k->value("drop_after", int64_t{0})) +
                 ", when every token it signed has expired";
    }
    SPDLOG_LOGGER_INFO(Logger(), "{}", out.said);
  } else if (op.kind == Op::kRotate) {
    for (jwt::Algorithm alg : options_.algorithms) {
      if (op.alg && *op.alg != alg) continue;
      std::string line = std::string(jwt::AlgorithmName(alg)) + ": ";
      nlohmann::json* active = find(alg, KeyState::kActive);
      std::string old;
      if (active != nullptr) {
        old = active->value("kid", "");
        retire(*active, false);
        old = "; " + old + " stopped signing and stays in the JWKS until " +
              UtcTime(active->value("drop_after", int64_t{0}));
      }
      WISP_ASSIGN_OR_RETURN(std::string promoted, promote(alg));
      out.said += (out.said.empty() ? "" : "\n") + line + promoted + old;
    }
    SPDLOG_LOGGER_INFO(Logger(), "rotated by an operator: {}", out.said);
  }

  // The schedule.
  for (size_t i = 0; i < keys.size();) {
    if (StateOf(keys[i]) == KeyState::kRetired && keys[i].value("drop_after", int64_t{0}) <= now) {
      SPDLOG_LOGGER_INFO(Logger(), "key {} left the JWKS: every token it signed has expired",
                         keys[i].value("kid", ""));
      remove(&keys[i]);  // every token this key signed has expired
      continue;
    }
    ++i;
  }
  for (jwt::Algorithm alg : options_.algorithms) {
    nlohmann::json* active = find(alg, KeyState::kActive);
    if (active == nullptr) {
      // The first start (or a new algorithm): nothing to pre-publish against.
      WISP_RETURN_IF_ERROR(promote(alg).status());
      continue;
    }
    const int64_t activated = ActivatedOf(*active);
    nlohmann::json* next = find(alg, KeyState::kNext);
    if (next == nullptr && activated + period - ahead <= now) {
      WISP_ASSIGN_OR_RETURN(next, make(alg, KeyState::kNext));
      active = find(alg, KeyState::kActive);  // `keys` grew
    }
    if (next != nullptr && activated + period <= now &&
        next->value("created", int64_t{0}) + ahead <= now) {
      retire(*active, false);
      WISP_RETURN_IF_ERROR(promote(alg).status());
    }
  }
  doc["keys"] = std::move(keys);
  doc["kek_id"] = kek_.Id();
  out.json = doc.dump();
  return out;
}

absl::Status KeyManager::Load(const bus::KvEntry& entry) {
  {
    std::lock_guard lock(mu_);
    if (entry.revision <= snap_->revision && snap_->revision != 0) return absl::OkStatus();
  }
  nlohmann::json doc = nlohmann::json::parse(entry.value, nullptr, false);
  if (!doc.is_object() || !doc.contains("keys") || !doc["keys"].is_array()) {
    return absl::DataLossError("stored key set is not valid JSON");
  }
  auto snap = std::make_shared<KeySnapshot>();
  snap->revision = entry.revision;
  for (const auto& k : doc["keys"]) {
    KeyInfo info;
    info.kid = k.value("kid", "");
    auto alg = jwt::ParseAlgorithm(k.value("alg", ""));
    if (info.kid.empty() || !alg.ok()) return absl::DataLossError("stored key lacks kid or alg");
    info.alg = *alg;
    info.state = StateOf(k);
    info.tainted = k.value("tainted", false);
    info.created_unix = k.value("created", int64_t{0});
    info.activated_unix = info.state == KeyState::kNext ? 0 : ActivatedOf(k);
    info.retired_unix = k.value("retired", int64_t{0});
    info.drop_after_unix = k.value("drop_after", int64_t{0});
    auto pub = jwt::PublicKey::FromJwk(k.value("public", nlohmann::json::object()));
    if (!pub.ok()) return Annotate(pub.status(), "stored key " + info.kid);
    if (pub->kid() != info.kid)
      return absl::DataLossError("stored key " + info.kid + ": kid mismatch");
    if (info.state == KeyState::kActive) {
      auto sealed = jwt::Base64Decode(k.value("sealed", ""));
      if (!sealed.ok()) return absl::DataLossError("stored key " + info.kid + ": bad sealed value");
      auto pem = jwt::Open(kek_, *sealed, info.kid);
      if (!pem.ok()) {
        return absl::FailedPreconditionError(
            "stored key " + info.kid + " does not open with this key-encryption key (kek id " +
            kek_.Id() + ", set sealed under " + doc.value("kek_id", "?") + ")");
      }
      auto priv = jwt::PrivateKey::FromPem(*pem);
      std::fill(pem->begin(), pem->end(), '\0');
      if (!priv.ok()) return Annotate(priv.status(), "stored key " + info.kid);
      if (priv->kid() != info.kid) {
        return absl::DataLossError("stored key " + info.kid + ": private key does not match");
      }
      snap->active.insert_or_assign(info.alg, std::move(*priv));
    }
    snap->public_keys.Add(std::move(*pub));
    snap->info.emplace(info.kid, info);
  }
  snap->jwks_json = snap->public_keys.ToJwks().dump();
  std::vector<std::function<void(const KeySnapshot&)>> callbacks;
  {
    std::lock_guard lock(mu_);
    if (entry.revision <= snap_->revision && snap_->revision != 0) return absl::OkStatus();
    snap_ = snap;
    callbacks = callbacks_;
  }
  UpdateGauges(*snap);
  for (auto& cb : callbacks) cb(*snap);
  return absl::OkStatus();
}

void KeyManager::UpdateGauges(const KeySnapshot& snap) {
  if (!metrics_) return;
  metrics_->keys_published.Set(static_cast<double>(snap.info.size()));
  if (const auto* key = snap.Active(options_.default_algorithm)) {
    if (const auto* info = snap.Info(key->kid())) {
      metrics_->signing_key_age_seconds.Set(
          static_cast<double>(clock_.NowUnixSeconds() - info->activated_unix));
    }
  }
}

}  // namespace wisp::token
