#include "volume_store.hpp"

#include <algorithm>
#include <chrono>

#include "checksum.hpp"
#include "progress.hpp"
#include "wisp/bus/subjects.hpp"

namespace wisp::populator {

std::string VolumeIdForName(std::string_view name) {
  Sha256 sha;
  sha.Update(reinterpret_cast<const uint8_t*>(name.data()), name.size());
  return "v-" + sha.HexDigest().substr(0, 24);
}

bool IsTerminal(v1::VolumePhase phase) {
  // UPLOAD_READY: nothing more happens until a client uploads, so a waiting create answers.
  return phase == v1::SUCCEEDED || phase == v1::FAILED || phase == v1::PENDING_POPULATION ||
         phase == v1::UPLOAD_READY;
}

v1::VolumeStatus Sanitized(v1::VolumeStatus status) {
  if (status.has_spec() && status.spec().has_source() && status.spec().source().has_http()) {
    auto* http = status.mutable_spec()->mutable_source()->mutable_http();
    for (auto& [k, v] : *http->mutable_headers()) v = "<redacted>";
  }
  return status;
}

absl::StatusOr<std::pair<v1::VolumeStatus, uint64_t>> VolumeStore::Get(std::string_view id) {
  WISP_ASSIGN_OR_RETURN(bus::KvEntry entry, kv_.Get(id));
  v1::VolumeStatus status;
  if (!status.ParseFromString(entry.value)) {
    return absl::DataLossError("wisp_volumes record " + std::string(id) + " does not parse");
  }
  return std::make_pair(std::move(status), entry.revision);
}

absl::StatusOr<v1::VolumeStatus> VolumeStore::Create(v1::VolumeStatus status) {
  int64_t now = clock_.NowUnixSeconds();
  status.set_created_unix(now);
  status.set_updated_unix(now);
  WISP_ASSIGN_OR_RETURN(uint64_t rev, kv_.Create(status.volume_id(), status.SerializeAsString()));
  (void)rev;
  PublishEvent(status, 0);
  return status;
}

absl::StatusOr<v1::VolumeStatus> VolumeStore::Mutate(std::string_view id, const Mutator& fn) {
  for (int attempt = 0; attempt < 16; ++attempt) {
    WISP_ASSIGN_OR_RETURN(auto current, Get(id));
    v1::VolumeStatus next = current.first;
    if (!fn(next)) return current.first;
    next.set_updated_unix(clock_.NowUnixSeconds());
    auto rev = kv_.Update(id, next.SerializeAsString(), current.second);
    if (rev.ok()) {
      const auto& before = current.first;
      if (before.phase() != next.phase() || before.progress() != next.progress() ||
          before.message() != next.message()) {
        double ratio = next.phase() == v1::SUCCEEDED ? 1.0 : -1.0;
        PublishEvent(next, ratio);
      }
      return next;
    }
    if (rev.status().code() != absl::StatusCode::kAborted) return rev.status();
  }
  return absl::AbortedError("wisp_volumes record " + std::string(id) +
                            " kept changing; gave up after 16 attempts");
}

absl::Status VolumeStore::Delete(std::string_view id) { return kv_.Delete(id); }

absl::StatusOr<std::vector<v1::VolumeStatus>> VolumeStore::List() {
  WISP_ASSIGN_OR_RETURN(std::vector<std::string> keys, kv_.Keys());
  std::sort(keys.begin(), keys.end());
  std::vector<v1::VolumeStatus> out;
  for (const auto& key : keys) {
    auto got = Get(key);
    if (got.ok()) out.push_back(std::move(got->first));
  }
  return out;
}

void VolumeStore::PublishEvent(const v1::VolumeStatus& status, double ratio) {
  v1::VolumeEvent event;
  event.set_volume_id(status.volume_id());
  event.set_phase(status.phase());
  event.set_progress(status.progress());
  if (ratio < 0) {
    // Derive the ratio from the progress text ("45.30%"), -1 when it is "N/A".
    const std::string& p = status.progress();
    ratio = -1;
    if (!p.empty() && p.back() == '%') {
      try {
        ratio = std::stod(p.substr(0, p.size() - 1)) / 100.0;
      } catch (...) {
      }
    }
  }
  event.set_progress_ratio(ratio);
  event.set_message(status.message());
  event.set_unix_millis(
      std::chrono::duration_cast<std::chrono::milliseconds>(clock_.Now().time_since_epoch())
          .count());
  // Events are best effort: the KV record is the truth, a watcher re-reads it.
  (void)events_.Publish(bus::subjects::VolumeEvents(status.volume_id()), event.SerializeAsString());
}

}  // namespace wisp::populator
