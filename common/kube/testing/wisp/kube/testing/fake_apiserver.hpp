#pragma once
// FakeApiServer: an in-memory kube::Client for unit tests of controllers, standing in for
// kube-apiserver where CI cannot run one (the e2e suite runs the real thing). It keeps objects per
// resource, with what controllers rely on: a resourceVersion bumped on every write, uids,
// AlreadyExists on a second create, NotFound, a delete's uid precondition, JSON merge patches (on
// the object or its status), and watches that stream every write after the resourceVersion they
// start from (ending after the watch's timeout, as the apiserver does). generateName gets a suffix.
// It does not validate, default, garbage-collect or run admission.
//
// Example:
//   kube::testing::FakeApiServer api;
//   api.Put(kube::kPersistentVolumeClaims, pvc);         // as a user or another controller would
//   MyController controller(api, ...);
//   ASSERT_TRUE(api.WaitFor(kube::kPersistentVolumeClaims, "ns", "prime",
//                           [](const Json& o) { return true; }));
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "wisp/kube/client.hpp"

namespace wisp::kube::testing {

class FakeApiServer final : public Client {
 public:
  struct Write {
    std::string verb;  // create | update | patch | delete
    std::string plural;
    std::string ns;
    std::string name;
    std::string subresource;
    Json body;
  };

  // Stores `object` (create or replace), as another party would; returns it as stored.
  Json Put(const Resource& resource, Json object) {
    std::lock_guard lock(mu_);
    return Store(resource.plural, std::move(object), "");
  }
  // Deletes an object as another party would (no precondition).
  void Remove(const Resource& resource, const std::string& ns, const std::string& name) {
    std::lock_guard lock(mu_);
    Erase(resource.plural, Key(ns, name));
  }
  std::optional<Json> Find(const Resource& resource, const std::string& ns,
                           const std::string& name) {
    std::lock_guard lock(mu_);
    auto& objects = objects_[resource.plural];
    auto it = objects.find(Key(ns, name));
    if (it == objects.end()) return std::nullopt;
    return it->second;
  }
  std::vector<Json> All(const Resource& resource) {
    std::lock_guard lock(mu_);
    std::vector<Json> out;
    for (const auto& [k, v] : objects_[resource.plural]) out.push_back(v);
    return out;
  }
  // The writes clients made through this fake (not Put/Remove), in order.
  std::vector<Write> Writes() {
    std::lock_guard lock(mu_);
    return writes_;
  }
  // Waits until `ready` holds for the object (nullopt: absent) or `timeout` passes.
  bool WaitFor(const Resource& resource, const std::string& ns, const std::string& name,
               const std::function<bool(const std::optional<Json>&)>& ready,
               std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] {
      auto& objects = objects_[resource.plural];
      auto it = objects.find(Key(ns, name));
      return ready(it == objects.end() ? std::nullopt : std::optional<Json>(it->second));
    });
  }

  absl::StatusOr<Json> Get(const Resource& resource, std::string_view ns,
                           std::string_view name) override {
    std::lock_guard lock(mu_);
    auto& objects = objects_[resource.plural];
    auto it = objects.find(Key(ns, name));
    if (it == objects.end()) return NotFound(resource, ns, name);
    return it->second;
  }
  absl::StatusOr<ListResult> List(const Resource& resource, std::string_view ns,
                                  const ListOptions&) override {
    std::lock_guard lock(mu_);
    ListResult out;
    for (const auto& [k, v] : objects_[resource.plural]) {
      if (ns.empty() || v.value("/metadata/namespace"_json_pointer, std::string()) == ns) {
        out.items.push_back(v);
      }
    }
    out.resource_version = std::to_string(version_);
    return out;
  }
  absl::StatusOr<Json> Create(const Resource& resource, std::string_view ns,
                              const Json& object) override {
    std::lock_guard lock(mu_);
    Json o = object;
    o["metadata"]["namespace"] = std::string(ns);
    if (o["metadata"].value("name", "").empty()) {
      o["metadata"]["name"] =
          o["metadata"].value("generateName", "") + "g" + std::to_string(++generated_);
    }
    const std::string name = o["metadata"]["name"];
    if (objects_[resource.plural].count(Key(ns, name))) {
      return absl::AlreadyExistsError(resource.plural + " \"" + name + "\" already exists");
    }
    writes_.push_back({"create", resource.plural, std::string(ns), name, "", o});
    return Store(resource.plural, std::move(o), "");
  }
  absl::StatusOr<Json> Update(const Resource& resource, std::string_view ns,
                              const Json& object) override {
    return Replace(resource, ns, object, "");
  }
  absl::StatusOr<Json> UpdateStatus(const Resource& resource, std::string_view ns,
                                    const Json& object) override {
    return Replace(resource, ns, object, "status");
  }
  absl::StatusOr<Json> Patch(const Resource& resource, std::string_view ns, std::string_view name,
                             const Json& patch, const PatchOptions& options) override {
    std::lock_guard lock(mu_);
    if (options.type != PatchType::kMerge) {
      return absl::UnimplementedError("FakeApiServer applies JSON merge patches only");
    }
    auto& objects = objects_[resource.plural];
    auto it = objects.find(Key(ns, name));
    if (it == objects.end()) return NotFound(resource, ns, name);
    Json o = it->second;
    if (options.subresource == "status") {
      Json status = o.value("status", Json::object());
      status.merge_patch(patch.value("status", Json::object()));
      o["status"] = status;
    } else {
      Json keep_status = o.value("status", Json());
      o.merge_patch(patch);
      if (!keep_status.is_null()) o["status"] = keep_status;  // the main resource ignores status
    }
    writes_.push_back(
        {"patch", resource.plural, std::string(ns), std::string(name), options.subresource, patch});
    return Store(resource.plural, std::move(o), "");
  }
  absl::Status Delete(const Resource& resource, std::string_view ns, std::string_view name,
                      const DeleteOptions& options) override {
    std::lock_guard lock(mu_);
    auto& objects = objects_[resource.plural];
    auto it = objects.find(Key(ns, name));
    if (it == objects.end()) return NotFound(resource, ns, name).status();
    if (!options.uid.empty() && it->second["metadata"].value("uid", "") != options.uid) {
      return absl::AbortedError("Precondition failed: UID in precondition: " + options.uid);
    }
    writes_.push_back({"delete", resource.plural, std::string(ns), std::string(name), "", Json()});
    Erase(resource.plural, Key(ns, name));
    return absl::OkStatus();
  }
  absl::StatusOr<WatchPtr> Watch(const Resource& resource, std::string_view ns,
                                 const WatchOptions& options) override {
    int64_t from = 0;
    if (!options.resource_version.empty()) from = std::stoll(options.resource_version);
    const auto timeout = options.timeout_seconds
                             ? std::chrono::milliseconds(*options.timeout_seconds * 1000)
                             : std::chrono::milliseconds(2000);
    return WatchPtr(new Stream(*this, resource.plural, std::string(ns), from, timeout));
  }

 private:
  struct Event {
    int64_t version;
    std::string plural;
    EventType type;
    Json object;
  };

  class Stream final : public WatchStream {
   public:
    Stream(FakeApiServer& api, std::string plural, std::string ns, int64_t from,
           std::chrono::milliseconds timeout)
        : api_(api),
          plural_(std::move(plural)),
          ns_(std::move(ns)),
          last_(from),
          end_(std::chrono::steady_clock::now() + timeout) {}
    absl::StatusOr<std::optional<WatchEvent>> Next() override {
      std::unique_lock lock(api_.mu_);
      for (;;) {
        for (const Event& e : api_.events_) {
          if (e.version <= last_ || e.plural != plural_) continue;
          last_ = e.version;
          if (!ns_.empty() && e.object.value("/metadata/namespace"_json_pointer, "") != ns_) {
            continue;
          }
          return std::optional<WatchEvent>(WatchEvent{e.type, e.object});
        }
        if (api_.cv_.wait_until(lock, end_) == std::cv_status::timeout) {
          return std::optional<WatchEvent>();  // the server ends the watch
        }
      }
    }

   private:
    FakeApiServer& api_;
    const std::string plural_, ns_;
    int64_t last_;
    const std::chrono::steady_clock::time_point end_;
  };

  static std::string Key(std::string_view ns, std::string_view name) {
    return std::string(ns) + "/" + std::string(name);
  }
  static absl::StatusOr<Json> NotFound(const Resource& resource, std::string_view ns,
                                       std::string_view name) {
    return absl::NotFoundError(resource.plural + " \"" + std::string(ns) + "/" + std::string(name) +
                               "\" not found");
  }

  absl::StatusOr<Json> Replace(const Resource& resource, std::string_view ns, const Json& object,
                               const std::string& subresource) {
    std::lock_guard lock(mu_);
    const std::string name = object["metadata"].value("name", "");
    auto& objects = objects_[resource.plural];
    auto it = objects.find(Key(ns, name));
    if (it == objects.end()) return NotFound(resource, ns, name);
    const std::string want = object["metadata"].value("resourceVersion", "");
    if (!want.empty() && want != it->second["metadata"].value("resourceVersion", "")) {
      return absl::AbortedError("Operation cannot be fulfilled: the object has been modified");
    }
    Json o = it->second;
    if (subresource == "status") {
      o["status"] = object.value("status", Json::object());
    } else {
      Json keep_status = o.value("status", Json());
      o = object;
      if (!keep_status.is_null()) o["status"] = keep_status;
    }
    writes_.push_back({"update", resource.plural, std::string(ns), name, subresource, object});
    return Store(resource.plural, std::move(o), "");
  }

  // mu_ held.
  Json Store(const std::string& plural, Json o, const std::string&) {
    auto& meta = o["metadata"];
    const std::string key = Key(meta.value("namespace", ""), meta.value("name", ""));
    auto& objects = objects_[plural];
    const bool exists = objects.count(key) > 0;
    if (!exists && meta.value("uid", "").empty()) meta["uid"] = "uid-" + std::to_string(++uids_);
    if (exists) meta["uid"] = objects[key]["metadata"].value("uid", "");
    meta["resourceVersion"] = std::to_string(++version_);
    objects[key] = o;
    events_.push_back({version_, plural, exists ? EventType::kModified : EventType::kAdded, o});
    cv_.notify_all();
    return o;
  }
  void Erase(const std::string& plural, const std::string& key) {
    auto& objects = objects_[plural];
    auto it = objects.find(key);
    if (it == objects.end()) return;
    Json o = it->second;
    objects.erase(it);
    o["metadata"]["resourceVersion"] = std::to_string(++version_);
    events_.push_back({version_, plural, EventType::kDeleted, o});
    cv_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::map<std::string, Json>> objects_;  // plural -> ns/name -> object
  std::vector<Event> events_;
  std::vector<Write> writes_;
  int64_t version_ = 0;
  int64_t uids_ = 0;
  int64_t generated_ = 0;
};

}  // namespace wisp::kube::testing
