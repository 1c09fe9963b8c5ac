#include "csi/projection_store.hpp"

#include <cstdio>

namespace wisp::gateway::csi {

std::string ProjectionKey(const std::string& node, const std::string& volume_id) {
  std::string key = node + ".";
  for (unsigned char c : volume_id) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '_') {
      key += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "=%02X", c);
      key += buf;
    }
  }
  return key;
}

KvProjectionStore::KvProjectionStore(bus::KeyValuePtr kv, std::string node)
    : kv_(std::move(kv)), node_(std::move(node)) {}

absl::Status KvProjectionStore::Put(const v1::TokenProjection& projection) {
  std::string body;
  if (!projection.SerializeToString(&body)) return absl::InternalError("serializing projection");
  auto rev = kv_->Put(ProjectionKey(node_, projection.volume_id()), body);
  return rev.ok() ? absl::OkStatus() : Annotate(rev.status(), "storing projection");
}

absl::StatusOr<v1::TokenProjection> KvProjectionStore::Get(const std::string& volume_id) {
  auto entry = kv_->Get(ProjectionKey(node_, volume_id));
  if (!entry.ok()) return entry.status();
  v1::TokenProjection projection;
  if (!projection.ParseFromString(entry->value)) {
    return absl::DataLossError("projection of " + volume_id + " does not parse");
  }
  return projection;
}

absl::Status KvProjectionStore::Delete(const std::string& volume_id) {
  absl::Status st = kv_->Delete(ProjectionKey(node_, volume_id));
  if (st.code() == absl::StatusCode::kNotFound) return absl::OkStatus();
  return st;
}

absl::StatusOr<std::vector<v1::TokenProjection>> KvProjectionStore::List() {
  auto keys = kv_->Keys();
  if (!keys.ok()) {
    // An empty bucket answers NotFound on some servers.
    if (keys.status().code() == absl::StatusCode::kNotFound) {
      return std::vector<v1::TokenProjection>{};
    }
    return keys.status();
  }
  std::vector<v1::TokenProjection> out;
  const std::string prefix = node_ + ".";
  for (const std::string& key : *keys) {
    if (key.compare(0, prefix.size(), prefix) != 0) continue;
    auto entry = kv_->Get(key);
    if (!entry.ok()) continue;  // deleted meanwhile
    v1::TokenProjection projection;
    if (projection.ParseFromString(entry->value)) out.push_back(std::move(projection));
  }
  return out;
}

absl::Status InMemoryProjectionStore::Put(const v1::TokenProjection& projection) {
  std::lock_guard lock(mu_);
  items_[projection.volume_id()] = projection;
  return absl::OkStatus();
}

absl::StatusOr<v1::TokenProjection> InMemoryProjectionStore::Get(const std::string& volume_id) {
  std::lock_guard lock(mu_);
  auto it = items_.find(volume_id);
  if (it == items_.end()) return absl::NotFoundError("no projection for " + volume_id);
  return it->second;
}

absl::Status InMemoryProjectionStore::Delete(const std::string& volume_id) {
  std::lock_guard lock(mu_);
  items_.erase(volume_id);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::TokenProjection>> InMemoryProjectionStore::List() {
  std::lock_guard lock(mu_);
  std::vector<v1::TokenProjection> out;
  for (const auto& [id, p] : items_) out.push_back(p);
  return out;
}

static_assert(std::is_base_of_v<ProjectionStore, InMemoryProjectionStore>);

}  // namespace wisp::gateway::csi
