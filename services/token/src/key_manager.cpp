#include "key_manager.hpp"

#include <nlohmann/json.hpp>

#include "wisp/jwt/base64url.hpp"
#include "wisp/log/log.hpp"

namespace wisp::token {
namespace {

constexpr int64_t kDropSlackSeconds = 300;

std::shared_ptr<spdlog::logger> Logger() {
  static auto logger = log::Get("keys");
  return logger;
}

}  // namespace

KeyManager::KeyManager(bus::KeyValue& kv, jwt::Kek kek, Clock& clock, Options options,
                       TokenMetrics* metrics)
    : kv_(kv),
      kek_(std::move(kek)),
      clock_(clock),
      options_(std::move(options)),
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
  WISP_ASSIGN_OR_RETURN(bool wrote, Change(false));
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
  auto wrote = Change(false);
  UpdateGauges(*Current());
  return wrote;
}
absl::StatusOr<bool> KeyManager::RotateNow() { return Change(true); }

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
// AlreadyExists) loads the winner's state instead.
absl::StatusOr<bool> KeyManager::Change(bool force) {
  std::lock_guard write_lock(write_mu_);
  auto entry = kv_.Get(kKeySetKey);
  if (!entry.ok() && entry.status().code() != absl::StatusCode::kNotFound) {
    return Annotate(entry.status(), "reading key set");
  }
  const bool exists = entry.ok();
  if (exists) WISP_RETURN_IF_ERROR(Load(*entry));
  bool changed = false;
  WISP_ASSIGN_OR_RETURN(std::string next, Plan(exists ? &entry->value : nullptr, force, &changed));
  if (!changed) return false;
  absl::StatusOr<uint64_t> rev =
      exists ? kv_.Update(kKeySetKey, next, entry->revision) : kv_.Create(kKeySetKey, next);
  if (!rev.ok()) {
    if (rev.status().code() == absl::StatusCode::kAborted ||
        rev.status().code() == absl::StatusCode::kAlreadyExists) {
      SPDLOG_LOGGER_INFO(Logger(), "another replica changed the key set first; loading it");
      auto fresh = kv_.Get(kKeySetKey);
      if (!fresh.ok()) return Annotate(fresh.status(), "reading key set");
      WISP_RETURN_IF_ERROR(Load(*fresh));
      return false;
    }
    return Annotate(rev.status(), "writing key set");
  }
  WISP_RETURN_IF_ERROR(Load(bus::KvEntry{std::string(kKeySetKey), next, *rev, false}));
  if (exists && metrics_) metrics_->key_rotations_total.Increment();
  SPDLOG_LOGGER_INFO(Logger(), "key set written at revision {}", *rev);
  return true;
}

absl::StatusOr<std::string> KeyManager::Plan(const std::string* current, bool force,
                                             bool* changed) {
  const int64_t now = clock_.NowUnixSeconds();
  nlohmann::json doc = {{"version", 1}, {"kek_id", kek_.Id()}, {"keys", nlohmann::json::array()}};
  if (current != nullptr) {
    doc = nlohmann::json::parse(*current, nullptr, false);
    if (!doc.is_object() || !doc["keys"].is_array()) {
      return absl::DataLossError("stored key set is not valid JSON");
    }
  }
  nlohmann::json keep = nlohmann::json::array();
  std::map<jwt::Algorithm, bool> has_active;
  for (auto& k : doc["keys"]) {
    const int64_t retired = k.value("retired", int64_t{0});
    if (retired != 0 && k.value("drop_after", int64_t{0}) <= now) {
      *changed = true;  // every token this key signed has expired
      continue;
    }
    auto alg = jwt::ParseAlgorithm(k.value("alg", ""));
    if (!alg.ok()) return absl::DataLossError("stored key has an unknown alg");
    if (retired == 0) {
      const bool due =
          force || k.value("created", int64_t{0}) + options_.rotation_period.count() <= now;
      if (due) {
        k["retired"] = now;
        k["drop_after"] = now + longest_token_s_.load() + kDropSlackSeconds;
        *changed = true;
      } else {
        has_active[*alg] = true;
      }
    }
    keep.push_back(k);
  }
  for (jwt::Algorithm alg : options_.algorithms) {
    if (has_active[alg]) continue;
    WISP_ASSIGN_OR_RETURN(jwt::PrivateKey key, jwt::PrivateKey::Generate(alg));
    WISP_ASSIGN_OR_RETURN(std::string pem, key.ToPem());
    auto sealed = jwt::Seal(kek_, pem, key.kid());
    std::fill(pem.begin(), pem.end(), '\0');
    if (!sealed.ok()) return sealed.status();
    keep.push_back({{"kid", key.kid()},
                    {"alg", jwt::AlgorithmName(alg)},
                    {"created", now},
                    {"retired", 0},
                    {"drop_after", 0},
                    {"public", key.public_key().Jwk()},
                    {"sealed", jwt::Base64Encode(*sealed)}});
    SPDLOG_LOGGER_INFO(Logger(), "new {} signing key kid={}", jwt::AlgorithmName(alg), key.kid());
    *changed = true;
  }
  doc["keys"] = std::move(keep);
  doc["kek_id"] = kek_.Id();
  return doc.dump();
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
    info.created_unix = k.value("created", int64_t{0});
    info.retired_unix = k.value("retired", int64_t{0});
    info.drop_after_unix = k.value("drop_after", int64_t{0});
    auto pub = jwt::PublicKey::FromJwk(k.value("public", nlohmann::json::object()));
    if (!pub.ok()) return Annotate(pub.status(), "stored key " + info.kid);
    if (pub->kid() != info.kid)
      return absl::DataLossError("stored key " + info.kid + ": kid mismatch");
    if (info.retired_unix == 0) {
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
          static_cast<double>(clock_.NowUnixSeconds() - info->created_unix));
    }
  }
}

}  // namespace wisp::token
