// NatsBus's key-value buckets (nats.c's kvStore over JetStream).
#include <thread>

#include "nats_internal.hpp"
#include "wisp/bus/replicas.hpp"

namespace wisp::bus {
namespace internal {
namespace {

struct KvEntryDeleter {
  void operator()(kvEntry* e) const { kvEntry_Destroy(e); }
};
using KvEntryPtr = std::unique_ptr<kvEntry, KvEntryDeleter>;

class NatsKvWatch final : public KvWatch {
 public:
  NatsKvWatch(kvWatcher* w, KvWatchHandler handler) : w_(w), handler_(std::move(handler)) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~NatsKvWatch() override {
    stop_ = true;
    kvWatcher_Stop(w_);
    thread_.join();
    kvWatcher_Destroy(w_);
  }

 private:
  void Loop() {
    bool initial = true;
    while (!stop_) {
      kvEntry* raw = nullptr;
      natsStatus s = kvWatcher_Next(&raw, w_, 500);
      if (s == NATS_TIMEOUT) continue;
      if (s != NATS_OK) {
        if (stop_) return;
        // Stopped underneath us or the connection closed: nothing more will come.
        if (s == NATS_ILLEGAL_STATE || s == NATS_CONNECTION_CLOSED ||
            s == NATS_INVALID_SUBSCRIPTION) {
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      KvEntryPtr e(raw);
      if (!e) {
        initial = false;
        handler_(KvEntry{});
        continue;
      }
      const kvOperation op = kvEntry_Operation(e.get());
      const bool deleted = op == kvOp_Delete || op == kvOp_Purge;
      if (initial && deleted) continue;  // initial values are the live entries only
      KvEntry entry;
      entry.key = kvEntry_Key(e.get());
      if (!deleted && kvEntry_Value(e.get()) != nullptr) {
        entry.value.assign(static_cast<const char*>(kvEntry_Value(e.get())),
                           kvEntry_ValueLen(e.get()));
      }
      entry.revision = kvEntry_Revision(e.get());
      entry.deleted = deleted;
      handler_(entry);
    }
  }

  kvWatcher* w_;
  KvWatchHandler handler_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

class NatsKeyValue final : public KeyValue {
 public:
  NatsKeyValue(kvStore* kv, jsCtx* js, std::string bucket)
      : kv_(kv), js_(js), bucket_(std::move(bucket)) {}
  ~NatsKeyValue() override { kvStore_Destroy(kv_); }

  const std::string& bucket() const override { return bucket_; }

  absl::StatusOr<KvEntry> Get(std::string_view key) override {
    const std::string k(key);
    kvEntry* raw = nullptr;
    natsStatus s = kvStore_Get(&raw, kv_, k.c_str());
    if (s == NATS_NOT_FOUND) return GetFromLeader(k);
    WISP_RETURN_IF_ERROR(Err(s, "get", k));
    KvEntryPtr e(raw);
    KvEntry out;
    out.key = k;
    if (kvEntry_Value(e.get()) != nullptr) {
      out.value.assign(static_cast<const char*>(kvEntry_Value(e.get())), kvEntry_ValueLen(e.get()));
    }
    out.revision = kvEntry_Revision(e.get());
    return out;
  }

  // kvStore_Get is a direct get, which any replica of an R3 bucket may answer, and a follower
  // that has not applied a write yet answers "not found" for a key created a moment ago on
  // another connection (nats-server has no read-after-write for direct gets before 2.12). A
  // miss means "deleted" to wisp's callers (a populate job for a volume whose record is missing
  // is dropped), so a miss is confirmed by the stream leader (STREAM.MSG.GET, not direct) before
  // it is believed. Hits are not: a stale value is caught by the revision of the next Update.
  absl::StatusOr<KvEntry> GetFromLeader(const std::string& k) {
    natsMsg* raw = nullptr;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    const std::string stream = "KV_" + bucket_;
    const std::string subject = "$KV." + bucket_ + "." + k;
    natsStatus s = js_GetLastMsg(&raw, js_, stream.c_str(), subject.c_str(), nullptr, &jerr);
    if (s == NATS_NOT_FOUND || (s != NATS_OK && jerr == JSNoMessageFoundErr)) {
      return absl::NotFoundError("key " + k + " not found in bucket " + bucket_);
    }
    WISP_RETURN_IF_ERROR(Err(s, "get (from the leader)", k));
    std::unique_ptr<natsMsg, decltype(&natsMsg_Destroy)> msg(raw, &natsMsg_Destroy);
    const char* op = nullptr;
    if (natsMsgHeader_Get(msg.get(), "KV-Operation", &op) == NATS_OK && op != nullptr &&
        (std::string_view(op) == "DEL" || std::string_view(op) == "PURGE")) {
      return absl::NotFoundError("key " + k + " not found in bucket " + bucket_);
    }
    KvEntry out;
    out.key = k;
    if (natsMsg_GetDataLength(msg.get()) > 0) {
      out.value.assign(natsMsg_GetData(msg.get()), natsMsg_GetDataLength(msg.get()));
    }
    out.revision = natsMsg_GetSequence(msg.get());
    return out;
  }

  absl::StatusOr<uint64_t> Put(std::string_view key, std::string_view value) override {
    const std::string k(key);
    uint64_t rev = 0;
    WISP_RETURN_IF_ERROR(Err(
        kvStore_Put(&rev, kv_, k.c_str(), value.data(), static_cast<int>(value.size())), "put", k));
    return rev;
  }

  absl::StatusOr<uint64_t> Create(std::string_view key, std::string_view value) override {
    const std::string k(key);
    uint64_t rev = 0;
    natsStatus s =
        kvStore_Create(&rev, kv_, k.c_str(), value.data(), static_cast<int>(value.size()));
    if (s != NATS_OK && LastErrorContains("wrong last sequence")) {
      return absl::AlreadyExistsError("key " + k + " exists in bucket " + bucket_);
    }
    WISP_RETURN_IF_ERROR(Err(s, "create", k));
    return rev;
  }

  absl::StatusOr<uint64_t> Update(std::string_view key, std::string_view value,
                                  uint64_t revision) override {
    const std::string k(key);
    uint64_t rev = 0;
    natsStatus s = kvStore_Update(&rev, kv_, k.c_str(), value.data(),
                                  static_cast<int>(value.size()), revision);
    if (s != NATS_OK && LastErrorContains("wrong last sequence")) {
      return absl::AbortedError("key " + k + " in bucket " + bucket_ +
                                " is no longer at revision " + std::to_string(revision));
    }
    WISP_RETURN_IF_ERROR(Err(s, "update", k));
    return rev;
  }

  absl::Status Delete(std::string_view key) override {
    const std::string k(key);
    return Err(kvStore_Delete(kv_, k.c_str()), "delete", k);
  }

  absl::Status PurgeDeletes(std::chrono::milliseconds older_than) override {
    if (older_than.count() < 0) {
      return absl::InvalidArgumentError("kv purge-deletes " + bucket_ + ": negative age");
    }
    kvPurgeOptions o;
    kvPurgeOptions_Init(&o);
    // nats.c reads 0 as its own default (30 minutes) and a negative age as "every marker".
    o.DeleteMarkersOlderThan =
        older_than.count() == 0
            ? -1
            : std::chrono::duration_cast<std::chrono::nanoseconds>(older_than).count();
    o.Timeout = 60'000;  // gathering the markers; on timeout the ones found are still purged
    return Err(kvStore_PurgeDeletes(kv_, &o), "purge-deletes", "");
  }

  absl::StatusOr<std::vector<std::string>> Keys() override {
    kvKeysList list{nullptr, 0};
    natsStatus s = kvStore_Keys(&list, kv_, nullptr);
    std::vector<std::string> keys;
    if (s == NATS_NOT_FOUND) return keys;  // nats.c reports an empty bucket as "not found"
    WISP_RETURN_IF_ERROR(Err(s, "keys", ""));
    for (int i = 0; i < list.Count; ++i) keys.emplace_back(list.Keys[i]);
    kvKeysList_Destroy(&list);
    std::sort(keys.begin(), keys.end());
    return keys;
  }

  absl::StatusOr<KvWatchPtr> Watch(std::string_view pattern, KvWatchHandler handler) override {
    const std::string p(pattern);
    kvWatcher* w = nullptr;
    WISP_RETURN_IF_ERROR(Err(kvStore_Watch(&w, kv_, p.c_str(), nullptr), "watch", p));
    return KvWatchPtr(std::make_unique<NatsKvWatch>(w, std::move(handler)));
  }

 private:
  absl::Status Err(natsStatus s, std::string_view op, std::string_view key) {
    if (s == NATS_OK) return absl::OkStatus();
    return FromNats(s, "kv " + std::string(op) + " " + bucket_ + "/" + std::string(key));
  }

  kvStore* kv_;
  jsCtx* js_;  // the bus's, which outlives its buckets
  std::string bucket_;
};

}  // namespace
}  // namespace internal

using namespace internal;

absl::StatusOr<KeyValuePtr> NatsBus::OpenBucket(const BucketConfig& config) {
  if (config.name.empty()) return absl::InvalidArgumentError("bucket name is empty");
  kvStore* kv = nullptr;
  bool created = false;
  natsStatus s = js_KeyValue(&kv, impl_->js, config.name.c_str());
  if (s == NATS_NOT_FOUND) {
    kvConfig kc;
    kvConfig_Init(&kc);
    kc.Bucket = config.name.c_str();
    kc.History = static_cast<uint8_t>(std::clamp(config.history, 1, 64));
    kc.TTL = Ns(config.ttl);
    kc.Replicas = std::clamp(config.replicas, 1, kMaxReplicas);
    if (config.max_value_size > 0) kc.MaxValueSize = static_cast<int32_t>(config.max_value_size);
    kc.StorageType = js_FileStorage;
    s = js_CreateKeyValue(&kv, impl_->js, &kc);
    created = s == NATS_OK;
    if (s != NATS_OK) {
      absl::Status failed = FromNats(s, "creating bucket " + config.name + " with " +
                                            std::to_string(kc.Replicas) + " replicas");
      // Another instance may have created it at the same moment.
      if (js_KeyValue(&kv, impl_->js, config.name.c_str()) == NATS_OK) {
        s = NATS_OK;
      } else if (IsReplicaPlacementText(std::string(failed.message()))) {
        // nats.c keeps the server's text but not its error code here.
        return ReplicaPlacementError(std::string(failed.message()));
      } else {
        return failed;
      }
    }
  }
  if (s != NATS_OK) return FromNats(s, "opening bucket " + config.name);
  auto opened = KeyValuePtr(std::make_unique<NatsKeyValue>(kv, impl_->js, config.name));
  if (!created) {
    // An existing bucket, perhaps from a release (or a chart) that made it with one copy.
    WISP_RETURN_IF_ERROR(RaiseReplicas(impl_->js, "KV_" + config.name, config.replicas));
  }
  return opened;
}

}  // namespace wisp::bus
