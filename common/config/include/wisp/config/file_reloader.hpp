#pragma once
// FileReloader: hot reload of one configuration file while a service runs, shared by wisp-policy
// (its rules file) and wisp-token (its token policy).
//
// Contract:
//   - Reload(trigger) reads the file and hands its bytes to `apply`, which parses and installs
//     them or returns an error; on an error (or an unreadable file) nothing was installed, so the
//     configuration in force stays. Reload returns that error. Every attempt, either way, is told
//     to `observe` with its trigger (the services count and log outcomes there).
//   - ReloadIfChanged(trigger) reloads only when the file's bytes differ from the last attempt's
//     (loaded or refused), so a refused file is retried once it changes again, and an unchanged
//     file never is. A file that cannot be read is not a change (a ConfigMap's symlink swap can
//     hide it for a moment); an explicit Reload of it is a refusal.
//   - Start() runs a thread that, every `interval`, calls ReloadIfChanged(change_trigger) and
//     then `on_tick` (e.g. wisp-token's remote JWKS refresh). With `take_sighup`, and SIGHUP
//     blocked in the thread that calls Start(), the thread also waits for SIGHUP itself and then
//     calls Reload(sighup_trigger); otherwise the service's signal loop calls Reload.
//     Stop() (or the destructor) ends the thread within one interval, at once when it waits on
//     the condition variable or on SIGHUP.
//   - Reloads are serialized (the signal thread and the watcher never apply concurrently).
//
// Example:
//   config::FileReloader reloader(
//       {.path = path, .interval = std::chrono::seconds(10)},
//       [&](const std::string& bytes) -> absl::Status {
//         WISP_ASSIGN_OR_RETURN(auto p, Parse(bytes));
//         service.Set(std::move(p));
//         return absl::OkStatus();
//       },
//       [&](std::string_view trigger, const absl::Status& st) { Count(trigger, st); });
//   reloader.Start();
//   (*process)->WaitForSignal([&] { (void)reloader.Reload("sighup"); });
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "wisp/status/status.hpp"

namespace wisp::config {

class FileReloader {
 public:
  using Apply = std::function<absl::Status(const std::string& bytes)>;
  using Observe = std::function<void(std::string_view trigger, const absl::Status& result)>;
  struct Options {
    std::string path;
    std::chrono::milliseconds interval{1000};  // the watcher's period (Start)
    std::string change_trigger = "file-change";
    std::string sighup_trigger = "sighup";
    bool take_sighup = false;
    std::function<void()> on_tick;  // on the watcher thread after each check; may be empty
  };

  // Reads the file's bytes now, so the watcher does not reload a file that has not changed since
  // the service loaded it.
  FileReloader(Options options, Apply apply, Observe observe = nullptr);
  ~FileReloader();
  FileReloader(const FileReloader&) = delete;
  FileReloader& operator=(const FileReloader&) = delete;

  const std::string& path() const { return options_.path; }
  absl::Status Reload(std::string_view trigger);
  absl::Status ReloadIfChanged(std::string_view trigger);
  void Start();
  // The same with the watcher's period given now (when it is known after construction).
  void Start(std::chrono::milliseconds interval);
  void Stop();

 private:
  void Loop();

  const Options options_;
  std::chrono::milliseconds interval_;  // options_.interval, or Start's
  Apply apply_;
  Observe observe_;
  std::mutex reload_mu_;    // serializes reloads
  std::string last_bytes_;  // the bytes of the last attempt (or of the initial load)
  bool have_last_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace wisp::config
