#include "wisp/kube/leader_election.hpp"

#include <map>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

namespace wisp::kube {
namespace {

using namespace std::chrono_literals;

// Leases kept as the apiserver keeps them: a resourceVersion bumped on every write, an update
// whose resourceVersion is not the stored one is a Conflict (Aborted), a create of an existing
// name AlreadyExists.
class LeaseStore final : public Client {
 public:
  absl::StatusOr<Json> Get(const Resource&, std::string_view, std::string_view name) override {
    std::lock_guard lock(mu_);
    if (fail_) return absl::UnavailableError("apiserver down");
    auto it = leases_.find(std::string(name));
    if (it == leases_.end()) return absl::NotFoundError("lease not found");
    return it->second;
  }
  absl::StatusOr<Json> Create(const Resource&, std::string_view, const Json& object) override {
    std::lock_guard lock(mu_);
    if (fail_) return absl::UnavailableError("apiserver down");
    const std::string name = object["metadata"]["name"];
    if (leases_.count(name)) return absl::AlreadyExistsError("exists");
    Json stored = object;
    stored["metadata"]["resourceVersion"] = std::to_string(++version_);
    return leases_[name] = stored;
  }
  absl::StatusOr<Json> Update(const Resource&, std::string_view, const Json& object) override {
    std::lock_guard lock(mu_);
    if (fail_) return absl::UnavailableError("apiserver down");
    const std::string name = object["metadata"]["name"];
    auto it = leases_.find(name);
    if (it == leases_.end()) return absl::NotFoundError("lease not found");
    if (it->second["metadata"]["resourceVersion"] != object["metadata"]["resourceVersion"]) {
      return absl::AbortedError("Conflict: the object has been modified");
    }
    Json stored = object;
    stored["metadata"]["resourceVersion"] = std::to_string(++version_);
    return it->second = stored;
  }
  absl::StatusOr<ListResult> List(const Resource&, std::string_view, const ListOptions&) override {
    return absl::UnimplementedError("leases are read one by one");
  }
  absl::StatusOr<Json> UpdateStatus(const Resource&, std::string_view, const Json&) override {
    return absl::UnimplementedError("a Lease has no status");
  }
  absl::StatusOr<Json> Patch(const Resource&, std::string_view, std::string_view, const Json&,
                             const PatchOptions&) override {
    return absl::UnimplementedError("the elector updates whole Leases");
  }
  absl::Status Delete(const Resource&, std::string_view, std::string_view,
                      const DeleteOptions&) override {
    return absl::UnimplementedError("the elector never deletes");
  }
  absl::StatusOr<WatchPtr> Watch(const Resource&, std::string_view, const WatchOptions&) override {
    return absl::UnimplementedError("the elector polls");
  }

  Json Lease(const std::string& name) {
    std::lock_guard lock(mu_);
    return leases_[name];
  }
  void SetFailing(bool fail) {
    std::lock_guard lock(mu_);
    fail_ = fail;
  }

 private:
  std::mutex mu_;
  std::map<std::string, Json> leases_;
  int64_t version_ = 0;
  bool fail_ = false;
};

LeaderElectionOptions Options(const std::string& identity) {
  return {.namespace_name = "wisp-system",
          .name = "wisp-controllers",
          .identity = identity,
          .lease_duration = 300ms,
          .renew_deadline = 200ms,
          .retry_period = 20ms};
}

TEST(LeaderElector, OneLeadsTheOtherWaits) {
  LeaseStore store;
  std::vector<bool> changes;
  LeaderElector a(store, Options("a"), [&](bool leading) { changes.push_back(leading); });
  LeaderElector b(store, Options("b"), nullptr);
  a.TryOnce();
  b.TryOnce();
  EXPECT_TRUE(a.IsLeader());
  EXPECT_FALSE(b.IsLeader());
  EXPECT_EQ(changes, std::vector<bool>{true});
  Json lease = store.Lease("wisp-controllers");
  EXPECT_EQ(lease["spec"]["holderIdentity"], "a");
  EXPECT_EQ(lease["spec"]["leaseDurationSeconds"], 1);
  EXPECT_EQ(lease["spec"]["leaseTransitions"], 0);
  // A renewal moves renewTime and keeps acquireTime.
  const std::string acquired = lease["spec"]["acquireTime"];
  std::this_thread::sleep_for(5ms);
  a.TryOnce();
  lease = store.Lease("wisp-controllers");
  EXPECT_EQ(lease["spec"]["acquireTime"], acquired);
  EXPECT_NE(lease["spec"]["renewTime"], acquired);
  b.TryOnce();
  EXPECT_FALSE(b.IsLeader());
}

TEST(LeaderElector, ReleasedLeaseIsTakenAtOnce) {
  LeaseStore store;
  LeaderElector a(store, Options("a"), nullptr);
  LeaderElector b(store, Options("b"), nullptr);
  a.TryOnce();
  b.TryOnce();
  a.Stop();
  EXPECT_FALSE(a.IsLeader());
  EXPECT_EQ(store.Lease("wisp-controllers")["spec"]["holderIdentity"], "");
  b.TryOnce();
  EXPECT_TRUE(b.IsLeader());
  EXPECT_EQ(store.Lease("wisp-controllers")["spec"]["leaseTransitions"], 1);
}

TEST(LeaderElector, SilentHolderIsReplacedAfterTheLeaseDurationByThisClock) {
  LeaseStore store;
  LeaderElector a(store, Options("a"), nullptr);
  LeaderElector b(store, Options("b"), nullptr);
  a.TryOnce();  // then a goes silent (a crashed pod)
  b.TryOnce();
  EXPECT_FALSE(b.IsLeader());
  std::this_thread::sleep_for(600ms);  // leaseDurationSeconds is 1 (rounded up)
  b.TryOnce();
  EXPECT_FALSE(b.IsLeader()) << "taken before a whole second without change";
  std::this_thread::sleep_for(500ms);
  b.TryOnce();
  EXPECT_TRUE(b.IsLeader());
  // a comes back: its renewal conflicts, and it gives up within renew_deadline.
  a.TryOnce();
  std::this_thread::sleep_for(250ms);
  a.TryOnce();
  EXPECT_FALSE(a.IsLeader());
}

TEST(LeaderElector, StopsLeadingWhenRenewalsFailForTheRenewDeadline) {
  LeaseStore store;
  std::vector<bool> changes;
  LeaderElector a(store, Options("a"), [&](bool leading) { changes.push_back(leading); });
  a.TryOnce();
  store.SetFailing(true);
  a.TryOnce();
  EXPECT_TRUE(a.IsLeader()) << "one failed renewal is not the deadline";
  std::this_thread::sleep_for(250ms);
  a.TryOnce();
  EXPECT_FALSE(a.IsLeader());
  EXPECT_EQ(changes, (std::vector<bool>{true, false}));
}

TEST(LeaderElector, RunsItsOwnLoop) {
  LeaseStore store;
  LeaderElector a(store, Options("a"), nullptr);
  a.Start();
  for (int i = 0; i < 100 && !a.IsLeader(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(a.IsLeader());
  a.Stop();
  EXPECT_FALSE(a.IsLeader());
}

TEST(MicroTime, HasMicroseconds) {
  EXPECT_EQ(MicroTime(std::chrono::system_clock::time_point(std::chrono::microseconds(1500001))),
            "1970-01-01T00:00:01.500001Z");
}

}  // namespace
}  // namespace wisp::kube
