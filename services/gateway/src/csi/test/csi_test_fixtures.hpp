#pragma once
// Shared fixtures of the CSI unit tests: a fake wisp-token and a fake wisp-populator served on an
// InMemoryBus, and helpers to build requests.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "csi/csi.pb.h"
#include "csi/token_volume.hpp"
#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/bus/testing/in_memory_bus.hpp"
#include "wisp/fsutil/read_file.hpp"
#include "wisp/status/fake_clock.hpp"
#include "wisp/v1/token.pb.h"
#include "wisp/v1/volume.pb.h"

namespace wisp::gateway::csi::testing {

inline std::string MakeTempDir(const std::string& prefix) {
  std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) ADD_FAILURE() << "mkdtemp";
  return tmpl;
}

// A file's bytes, "" when it cannot be read (the expectation on them then fails).
inline std::string ReadFile(const std::string& path) { return fsutil::ReadFile(path).value_or(""); }

// wisp-token on the bus: "tok-<n>" tokens, iat = now, exp = now + expiration.
class FakeTokenService {
 public:
  FakeTokenService(bus::testing::InMemoryBus& bus, const Clock& clock) : clock_(clock) {
    subs_.push_back(*bus.Serve(bus::subjects::kTokenIssue, bus::queues::kToken,
                               [this](const bus::Request& r) -> bus::Reply {
                                 auto req = bus::ParseBody<v1::IssueRequest>(r);
                                 if (!req.ok()) return bus::Reply::Error(req.status());
                                 std::lock_guard lock(mu_);
                                 return bus::ProtoReply(IssueLocked(*req));
                               }));
    subs_.push_back(*bus.Serve(bus::subjects::kTokenIssueBatch, bus::queues::kToken,
                               [this](const bus::Request& r) -> bus::Reply {
                                 auto req = bus::ParseBody<v1::IssueBatchRequest>(r);
                                 if (!req.ok()) return bus::Reply::Error(req.status());
                                 std::function<void()> hook;
                                 {
                                   std::lock_guard lock(mu_);
                                   hook = std::exchange(on_batch_, nullptr);
                                 }
                                 if (hook) hook();
                                 std::lock_guard lock(mu_);
                                 batch_sizes_.push_back(req->requests_size());
                                 v1::IssueBatchResponse resp;
                                 for (const auto& entry : req->requests()) {
                                   auto* result = resp.add_results();
                                   if (entry.subject().service_account() == refuse_) {
                                     result->set_code(7);
                                     result->set_message("refused by the fake");
                                   } else {
                                     *result->mutable_token() = IssueLocked(entry);
                                   }
                                 }
                                 return bus::ProtoReply(resp);
                               }));
  }
  int issued() const {
    std::lock_guard lock(mu_);
    return issued_;
  }
  v1::IssueRequest last() const {
    std::lock_guard lock(mu_);
    return last_;
  }
  // The number of entries of each wisp.v1.token.issue_batch received, in order.
  std::vector<int> batch_sizes() const {
    std::lock_guard lock(mu_);
    return batch_sizes_;
  }
  // Runs once, inside the next issue_batch call, before it answers (the caller is waiting).
  void OnNextBatch(std::function<void()> hook) {
    std::lock_guard lock(mu_);
    on_batch_ = std::move(hook);
  }
  // Batch entries for this service account are refused (code 7) instead of issued.
  void RefuseInBatches(std::string service_account) {
    std::lock_guard lock(mu_);
    refuse_ = std::move(service_account);
  }

 private:
  v1::IssueResponse IssueLocked(const v1::IssueRequest& req) {
    last_ = req;
    v1::IssueResponse resp;
    resp.set_token("tok-" + std::to_string(++issued_));
    resp.set_issued_at_unix(clock_.NowUnixSeconds());
    resp.set_expiration_unix(clock_.NowUnixSeconds() +
                             (req.expiration_seconds() ? req.expiration_seconds() : 3600));
    return resp;
  }

  const Clock& clock_;
  mutable std::mutex mu_;
  int issued_ = 0;
  v1::IssueRequest last_;
  std::vector<int> batch_sizes_;
  std::string refuse_;
  std::function<void()> on_batch_;
  std::vector<bus::SubscriptionPtr> subs_;
};

// wisp-populator on the bus: volumes kept in a map, ready at once unless told otherwise.
class FakePopulator {
 public:
  FakePopulator(bus::testing::InMemoryBus& bus, std::string volume_root)
      : root_(std::move(volume_root)) {
    subs_.push_back(*bus.Serve(bus::subjects::kVolumeCreate, bus::queues::kPopulator,
                               [this](const bus::Request& r) { return Create(r); }));
    subs_.push_back(*bus.Serve(bus::subjects::kVolumeGet, bus::queues::kPopulator,
                               [this](const bus::Request& r) { return Get(r); }));
    subs_.push_back(*bus.Serve(bus::subjects::kVolumeDelete, bus::queues::kPopulator,
                               [this](const bus::Request& r) { return Delete(r); }));
    subs_.push_back(*bus.Serve(bus::subjects::kVolumeList, bus::queues::kPopulator,
                               [this](const bus::Request& r) { return List(r); }));
  }

  // Created volumes report IMPORT_IN_PROGRESS for this many Get calls before SUCCEEDED.
  void SetPendingGets(int n) { pending_gets_ = n; }
  // Adds a ready volume with a directory under the root.
  v1::VolumeStatus AddReady(const std::string& id, const std::string& node) {
    v1::VolumeStatus v;
    v.set_volume_id(id);
    v.mutable_spec()->set_name("name-" + id);
    v.mutable_spec()->set_node(node);
    v.mutable_spec()->set_capacity_bytes(1 << 20);
    v.set_phase(v1::SUCCEEDED);
    v.set_path(root_ + "/" + id);
    std::filesystem::create_directories(v.path());
    std::lock_guard lock(mu_);
    volumes_[id] = v;
    return v;
  }
  void Put(const v1::VolumeStatus& v) {
    std::lock_guard lock(mu_);
    volumes_[v.volume_id()] = v;
  }
  size_t size() const {
    std::lock_guard lock(mu_);
    return volumes_.size();
  }
  v1::CreateVolumeRequest last_create() const {
    std::lock_guard lock(mu_);
    return last_create_;
  }

 private:
  bus::Reply Create(const bus::Request& r) {
    auto req = bus::ParseBody<v1::CreateVolumeRequest>(r);
    if (!req.ok()) return bus::Reply::Error(req.status());
    std::lock_guard lock(mu_);
    last_create_ = *req;
    v1::VolumeStatus v;
    v.set_volume_id("vol-" + std::to_string(++next_));
    *v.mutable_spec() = req->spec();
    v.set_phase(pending_gets_ > 0 ? v1::IMPORT_IN_PROGRESS : v1::SUCCEEDED);
    v.set_progress("0.00%");
    v.set_path(root_ + "/" + v.volume_id());
    volumes_[v.volume_id()] = v;
    v1::CreateVolumeResponse resp;
    *resp.mutable_volume() = v;
    return bus::ProtoReply(resp);
  }
  bus::Reply Get(const bus::Request& r) {
    auto req = bus::ParseBody<v1::GetVolumeRequest>(r);
    if (!req.ok()) return bus::Reply::Error(req.status());
    std::lock_guard lock(mu_);
    for (auto& [id, v] : volumes_) {
      if ((!req->volume_id().empty() && id == req->volume_id()) ||
          (req->volume_id().empty() && v.spec().name() == req->name())) {
        if (v.phase() == v1::IMPORT_IN_PROGRESS && --pending_gets_ <= 0) v.set_phase(v1::SUCCEEDED);
        v1::GetVolumeResponse resp;
        *resp.mutable_volume() = v;
        return bus::ProtoReply(resp);
      }
    }
    return bus::Reply::Error(absl::NotFoundError("no such volume"));
  }
  bus::Reply Delete(const bus::Request& r) {
    auto req = bus::ParseBody<v1::DeleteVolumeRequest>(r);
    if (!req.ok()) return bus::Reply::Error(req.status());
    std::lock_guard lock(mu_);
    if (volumes_.erase(req->volume_id()) == 0) {
      return bus::Reply::Error(absl::NotFoundError("no such volume"));
    }
    return bus::ProtoReply(v1::DeleteVolumeResponse());
  }
  bus::Reply List(const bus::Request& r) {
    auto req = bus::ParseBody<v1::ListVolumesRequest>(r);
    if (!req.ok()) return bus::Reply::Error(req.status());
    std::lock_guard lock(mu_);
    auto it = volumes_.begin();
    if (!req->starting_token().empty()) {
      it = volumes_.find(req->starting_token());
      if (it == volumes_.end()) return bus::Reply::Error(absl::InvalidArgumentError("bad token"));
    }
    v1::ListVolumesResponse resp;
    for (int n = 0; it != volumes_.end(); ++it, ++n) {
      if (req->max_entries() > 0 && n == req->max_entries()) {
        resp.set_next_token(it->first);
        break;
      }
      *resp.add_volumes() = it->second;
    }
    return bus::ProtoReply(resp);
  }

  std::string root_;
  mutable std::mutex mu_;
  std::map<std::string, v1::VolumeStatus> volumes_;
  v1::CreateVolumeRequest last_create_;
  int next_ = 0;
  int pending_gets_ = 0;
  std::vector<bus::SubscriptionPtr> subs_;
};

inline ::csi::v1::VolumeCapability MountCapability(
    ::csi::v1::VolumeCapability::AccessMode::Mode mode =
        ::csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER) {
  ::csi::v1::VolumeCapability cap;
  cap.mutable_mount();
  cap.mutable_access_mode()->set_mode(mode);
  return cap;
}

// A kubelet NodePublishVolume for a token volume of pod team/app-0.
inline ::csi::v1::NodePublishVolumeRequest TokenPublish(const std::string& volume_id,
                                                        const std::string& target) {
  ::csi::v1::NodePublishVolumeRequest req;
  req.set_volume_id(volume_id);
  req.set_target_path(target);
  *req.mutable_volume_capability() = MountCapability();
  auto& c = *req.mutable_volume_context();
  c[kEphemeralKey] = "true";
  c[kPodNamespaceKey] = "team";
  c[kPodNameKey] = "app-0";
  c[kPodUidKey] = "uid-1";
  c[kServiceAccountNameKey] = "app";
  c["audience"] = "vault";
  c["expirationSeconds"] = "900";
  return req;
}

}  // namespace wisp::gateway::csi::testing
