#include "csi/rotation_scheduler.hpp"

#include <algorithm>
#include <chrono>

namespace wisp::gateway::csi {

RotationScheduler::RotationScheduler(const Clock& clock, Callback callback, size_t max_batch)
    : clock_(clock), callback_(std::move(callback)), max_batch_(std::max<size_t>(1, max_batch)) {}

RotationScheduler::~RotationScheduler() { Stop(); }

void RotationScheduler::Schedule(const std::string& volume_id, int64_t due_unix) {
  {
    std::lock_guard lock(mu_);
    if (auto it = due_.find(volume_id); it != due_.end()) queue_.erase({it->second, volume_id});
    due_[volume_id] = due_unix;
    queue_.insert({due_unix, volume_id});
  }
  cv_.notify_all();
}

void RotationScheduler::Cancel(const std::string& volume_id) {
  std::lock_guard lock(mu_);
  if (auto it = due_.find(volume_id); it != due_.end()) {
    queue_.erase({it->second, volume_id});
    due_.erase(it);
  }
}

std::optional<int64_t> RotationScheduler::DueUnix(const std::string& volume_id) const {
  std::lock_guard lock(mu_);
  auto it = due_.find(volume_id);
  if (it == due_.end()) return std::nullopt;
  return it->second;
}

size_t RotationScheduler::size() const {
  std::lock_guard lock(mu_);
  return due_.size();
}

std::vector<std::string> RotationScheduler::PopDue() {
  std::vector<std::string> ids;
  std::lock_guard lock(mu_);
  const int64_t now = clock_.NowUnixSeconds();
  while (ids.size() < max_batch_ && !queue_.empty() && queue_.begin()->first <= now) {
    ids.push_back(queue_.begin()->second);
    queue_.erase(queue_.begin());
    due_.erase(ids.back());
  }
  return ids;
}

int RotationScheduler::RunDue() {
  int ran = 0;
  for (auto ids = PopDue(); !ids.empty(); ids = PopDue()) {
    callback_(ids);
    ran += static_cast<int>(ids.size());
  }
  return ran;
}

void RotationScheduler::Start() {
  std::lock_guard lock(mu_);
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] {
    for (;;) {
      RunDue();
      std::unique_lock lock(mu_);
      if (stop_) return;
      // Wake at the earliest due time, and at least every second: the wall clock may jump.
      auto wait = std::chrono::milliseconds(1000);
      if (!queue_.empty()) {
        const auto due =
            std::chrono::system_clock::time_point(std::chrono::seconds(queue_.begin()->first));
        const auto until =
            std::chrono::duration_cast<std::chrono::milliseconds>(due - clock_.Now());
        wait = std::max(std::chrono::milliseconds(0), std::min(wait, until));
      }
      if (wait.count() > 0) cv_.wait_for(lock, wait);
      if (stop_) return;
    }
  });
}

void RotationScheduler::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

}  // namespace wisp::gateway::csi
