#include "lost_nodes.hpp"

#include "wisp/bus/subjects.hpp"
#include "wisp/config/flags.hpp"
#include "wisp/log/log.hpp"

namespace wisp::populator {

bool AwaitsItsNode(v1::VolumePhase phase) {
  return phase == v1::PENDING || phase == v1::IMPORT_SCHEDULED || phase == v1::IMPORT_IN_PROGRESS;
}

std::string NodeLostMessage(const std::string& node, std::chrono::milliseconds silent) {
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(silent);
  return "node " + node + " lost: no wisp-populator has answered there for " +
         config::FormatDuration(seconds) +
         "; the volume's bytes live only on that node, so its population cannot move to another "
         "one. Delete the PVC (or `wispctl volume delete`) and create it again to have it made on "
         "a node that is up";
}

LostNodeSweeper::LostNodeSweeper(VolumeStore& store, bus::Requester& bus, Clock& clock,
                                 PopulatorMetrics& metrics, LostNodeConfig config)
    : store_(store), bus_(bus), clock_(clock), metrics_(metrics), config_(std::move(config)) {}

LostNodeSweeper::~LostNodeSweeper() { Stop(); }

std::optional<bool> LostNodeSweeper::Answers(const std::string& node) {
  v1::ListVolumesRequest request;
  request.set_max_entries(1);
  auto reply = bus_.Request(bus::subjects::Node(node, "volume.list"), request.SerializeAsString(),
                            config_.probe_timeout);
  if (reply.ok()) return true;
  if (bus::IsNoResponders(reply.status())) return false;
  const auto code = reply.status().code();
  // A handler's error is still an answer; a timeout or a bus that is down is not.
  if (code != absl::StatusCode::kUnavailable && code != absl::StatusCode::kDeadlineExceeded) {
    return true;
  }
  return std::nullopt;
}

absl::StatusOr<std::vector<std::string>> LostNodeSweeper::SweepOnce() {
  std::vector<std::string> failed;
  if (config_.lost_after.count() <= 0) return failed;
  WISP_ASSIGN_OR_RETURN(std::vector<v1::VolumeStatus> volumes, store_.List());
  std::map<std::string, std::vector<std::string>> waiting;  // node -> volume ids
  for (const auto& v : volumes) {
    const std::string& node = v.spec().node();
    if (node.empty() || node == config_.node_name || !AwaitsItsNode(v.phase())) continue;
    waiting[node].push_back(v.volume_id());
  }
  for (auto it = silent_since_.begin(); it != silent_since_.end();) {
    it = waiting.count(it->first) ? std::next(it) : silent_since_.erase(it);
  }
  auto log = log::Get("volume");
  const auto now = clock_.Steady();
  for (const auto& [node, ids] : waiting) {
    const std::optional<bool> answers = Answers(node);
    if (!answers.has_value()) continue;  // no decision: the silence so far neither grows nor ends
    if (*answers) {
      silent_since_.erase(node);
      continue;
    }
    const auto since = silent_since_.emplace(node, now).first->second;
    const auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(now - since);
    if (silent < config_.lost_after) continue;
    const std::string message = NodeLostMessage(node, silent);
    for (const std::string& id : ids) {
      log::ScopedRequestId rid(id);
      bool changed = false;
      auto st = store_.Mutate(id, [&](v1::VolumeStatus& s) {
        changed = s.spec().node() == node && AwaitsItsNode(s.phase());
        if (!changed) return false;
        s.set_phase(v1::FAILED);
        s.set_node_lost(true);
        s.set_message(message);
        return true;
      });
      if (!st.ok()) {
        if (st.status().code() != absl::StatusCode::kNotFound) {
          SPDLOG_LOGGER_WARN(log, "failing volume {} of lost node {}: {}", id, node,
                             st.status().ToString());
        }
        continue;
      }
      if (!changed) continue;
      SPDLOG_LOGGER_WARN(log, "volume {} failed: {}", id, message);
      metrics_.jobs_failed.Increment();
      failed.push_back(id);
    }
  }
  return failed;
}

void LostNodeSweeper::Start() {
  if (config_.lost_after.count() <= 0 || thread_.joinable()) return;
  thread_ = std::thread([this] {
    std::unique_lock lock(mu_);
    while (!cv_.wait_for(lock, config_.interval, [this] { return stopping_; })) {
      lock.unlock();
      if (auto swept = SweepOnce(); !swept.ok()) {
        SPDLOG_LOGGER_WARN(log::Get("volume"), "looking for volumes of lost nodes: {}",
                           swept.status().ToString());
      }
      lock.lock();
    }
  });
}

void LostNodeSweeper::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace wisp::populator
