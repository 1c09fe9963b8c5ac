#include "wisp/config/file_reloader.hpp"

#include <pthread.h>
#include <signal.h>

#include <ctime>

#include "wisp/fsutil/read_file.hpp"

namespace wisp::config {

FileReloader::FileReloader(Options options, Apply apply, Observe observe)
    : options_(std::move(options)),
      interval_(options_.interval),
      apply_(std::move(apply)),
      observe_(std::move(observe)) {
  if (auto bytes = fsutil::ReadFile(options_.path); bytes.ok()) {
    last_bytes_ = *std::move(bytes);
    have_last_ = true;
  }
}

FileReloader::~FileReloader() { Stop(); }

absl::Status FileReloader::Reload(std::string_view trigger) {
  std::lock_guard lock(reload_mu_);
  absl::Status result;
  if (auto bytes = fsutil::ReadFile(options_.path); !bytes.ok()) {
    result = bytes.status();
  } else {
    last_bytes_ = *bytes;
    have_last_ = true;
    result = apply_(*bytes);
  }
  if (observe_) observe_(trigger, result);
  return result;
}

absl::Status FileReloader::ReloadIfChanged(std::string_view trigger) {
  {
    std::lock_guard lock(reload_mu_);
    auto bytes = fsutil::ReadFile(options_.path);
    if (!bytes.ok() || (have_last_ && *bytes == last_bytes_)) return absl::OkStatus();
  }
  return Reload(trigger);
}

void FileReloader::Start() { Start(options_.interval); }

void FileReloader::Start(std::chrono::milliseconds interval) {
  std::lock_guard lock(mu_);
  if (thread_.joinable() || stop_ || interval.count() <= 0) return;
  interval_ = interval;
  thread_ = std::thread([this] { Loop(); });
}

void FileReloader::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) {
    // Wakes a sigtimedwait at once (a thread-directed SIGHUP that only this thread waits for).
    if (options_.take_sighup) pthread_kill(thread_.native_handle(), SIGHUP);
    thread_.join();
  }
}

void FileReloader::Loop() {
  sigset_t hup;
  sigemptyset(&hup);
  sigaddset(&hup, SIGHUP);
  sigset_t blocked;
  pthread_sigmask(SIG_BLOCK, nullptr, &blocked);
  const bool take_sighup = options_.take_sighup && sigismember(&blocked, SIGHUP) == 1;
  while (true) {
    bool got_hup = false;
    if (take_sighup) {
      // The wait for SIGHUP is this loop's sleep; Stop() interrupts it with a SIGHUP.
      const auto ms = interval_.count();
      timespec ts{static_cast<time_t>(ms / 1000), static_cast<long>((ms % 1000) * 1'000'000)};
      got_hup = sigtimedwait(&hup, nullptr, &ts) == SIGHUP;
      std::lock_guard lock(mu_);
      if (stop_) return;
    } else {
      std::unique_lock lock(mu_);
      if (cv_.wait_for(lock, interval_, [this] { return stop_; })) return;
    }
    if (got_hup) {
      (void)Reload(options_.sighup_trigger);
    } else {
      (void)ReloadIfChanged(options_.change_trigger);
    }
    if (options_.on_tick) options_.on_tick();
  }
}

}  // namespace wisp::config
