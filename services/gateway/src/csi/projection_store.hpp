#pragma once
// ProjectionStore: the token volumes published on this node, persisted so that a restarted
// gateway finds them and carries on rotating. KvProjectionStore keeps them in the JetStream KV
// bucket wisp_projections under key "<node>.<volume_id>" (characters NATS keys do not allow are
// escaped as =HH); InMemoryProjectionStore is the fake for unit tests.
//
// Contract: Get() is NotFound for an unknown volume; Delete() of an unknown volume is OK; List()
// returns this node's projections only.
//
// Example:
//   WISP_ASSIGN_OR_RETURN(auto kv, bus.OpenBucket({.name = std::string(buckets::kProjections)}));
//   KvProjectionStore store(std::move(kv), "node-a");
//   WISP_RETURN_IF_ERROR(store.Put(projection));
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "wisp/bus/bus.hpp"
#include "wisp/status/status.hpp"
#include "wisp/v1/node.pb.h"

namespace wisp::gateway::csi {

class ProjectionStore {
 public:
  virtual ~ProjectionStore() = default;
  virtual absl::Status Put(const v1::TokenProjection& projection) = 0;
  virtual absl::StatusOr<v1::TokenProjection> Get(const std::string& volume_id) = 0;
  virtual absl::Status Delete(const std::string& volume_id) = 0;
  virtual absl::StatusOr<std::vector<v1::TokenProjection>> List() = 0;
};

// "<node>.<escaped volume id>".
std::string ProjectionKey(const std::string& node, const std::string& volume_id);

class KvProjectionStore final : public ProjectionStore {
 public:
  KvProjectionStore(bus::KeyValuePtr kv, std::string node);
  absl::Status Put(const v1::TokenProjection& projection) override;
  absl::StatusOr<v1::TokenProjection> Get(const std::string& volume_id) override;
  absl::Status Delete(const std::string& volume_id) override;
  absl::StatusOr<std::vector<v1::TokenProjection>> List() override;

 private:
  bus::KeyValuePtr kv_;
  std::string node_;
};

class InMemoryProjectionStore final : public ProjectionStore {
 public:
  absl::Status Put(const v1::TokenProjection& projection) override;
  absl::StatusOr<v1::TokenProjection> Get(const std::string& volume_id) override;
  absl::Status Delete(const std::string& volume_id) override;
  absl::StatusOr<std::vector<v1::TokenProjection>> List() override;

 private:
  std::mutex mu_;
  std::map<std::string, v1::TokenProjection> items_;
};

}  // namespace wisp::gateway::csi
