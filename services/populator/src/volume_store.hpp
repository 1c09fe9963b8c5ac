#pragma once
// VolumeStore: volume status records in KV bucket wisp_volumes (key = volume id, value = a
// serialized wisp.v1.VolumeStatus), with compare-and-set updates so the create handler, the job
// runner and delete never overwrite each other. Also publishes VolumeEvents.
//
// Volume ids are derived from the CSI name ("v-" + 24 hex digits of its sha256), so a retried
// CreateVolume finds its volume without a name index, and the id is safe in NATS subjects, KV
// keys and directory names whatever the name holds.
//
//   VolumeStore store(kv, bus, clock);
//   auto updated = store.Mutate(id, [](v1::VolumeStatus& s) { s.set_progress("45.30%"); return
//   true; });
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "wisp/bus/bus.hpp"
#include "wisp/status/clock.hpp"
#include "wisp/v1/volume.pb.h"

namespace wisp::populator {

std::string VolumeIdForName(std::string_view name);
// SUCCEEDED, FAILED, PENDING_POPULATION and UPLOAD_READY: no job will change the phase.
bool IsTerminal(v1::VolumePhase phase);
// The status with secrets removed (HTTP header values), for replies, events and KV.
v1::VolumeStatus Sanitized(v1::VolumeStatus status);

class VolumeStore {
 public:
  VolumeStore(bus::KeyValue& kv, bus::Publisher& events, Clock& clock)
      : kv_(kv), events_(events), clock_(clock) {}

  // NotFound when absent.
  absl::StatusOr<std::pair<v1::VolumeStatus, uint64_t>> Get(std::string_view id);
  // AlreadyExists when the id is taken. Stamps created/updated times; returns what was stored.
  absl::StatusOr<v1::VolumeStatus> Create(v1::VolumeStatus status);
  // Read-modify-write with CAS retries. `fn` returns false to leave the record as it is. Stamps
  // updated_unix; publishes a VolumeEvent when phase, progress or message changed.
  using Mutator = std::function<bool(v1::VolumeStatus&)>;
  absl::StatusOr<v1::VolumeStatus> Mutate(std::string_view id, const Mutator& fn);
  absl::Status Delete(std::string_view id);
  absl::StatusOr<std::vector<v1::VolumeStatus>> List();
  void PublishEvent(const v1::VolumeStatus& status, double ratio);

 private:
  bus::KeyValue& kv_;
  bus::Publisher& events_;
  Clock& clock_;
};

}  // namespace wisp::populator
