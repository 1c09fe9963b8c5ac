#pragma once
// Reflector (an informer, lite): keeps a local copy of one resource (optionally one namespace and
// selectors) in step with the apiserver, and tells a handler what changed, on its own thread.
//
// Contract:
//   - Start() spawns the thread: List (every page), then Watch from the list's resourceVersion,
//     tracking the last resourceVersion seen (BOOKMARK events included). When the server ends the
//     watch (timeoutSeconds) it watches again at once from there (unless the watch ended at once
//     with no events: that counts as an error); after a transport error or an ERROR event it waits
//     (exponential backoff, initial_backoff doubling to max_backoff, reset by a successful watch)
//     and watches again; on 410 Gone it lists again.
//   - Handler calls come from the reflector's thread, one at a time, in the order of the events:
//     OnAdd for an object new to the copy, OnUpdate(old, new) for a changed one, OnDelete for one
//     deleted (after a relist: for every object that vanished meanwhile). A relist reports only
//     what differs (by resourceVersion) from the copy. OnSynced after each completed list.
//   - Stop() (and the destructor) returns promptly: each watch asks the server to end it after
//     watch_timeout (default 2 s) and waits for bytes at most watch_timeout + read_slack, so a
//     blocked read ends within that; backoff waits are interrupted at once. Re-watching every
//     watch_timeout reuses the kept-alive connection.
//   - Objects() is a snapshot of the copy (thread-safe); HasSynced() once the first list has been
//     delivered to the handler (just before OnSynced).
//
// Example:
//   struct Printer : kube::ReflectorHandler {
//     void OnAdd(const Json& o) override { std::cout << o["metadata"]["name"] << "\n"; }
//   } printer;
//   kube::Reflector pods(*client, kube::kPods, {.namespace_name = "default"}, printer);
//   pods.Start();
//   ...
//   pods.Stop();
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "wisp/kube/client.hpp"

namespace spdlog {
class logger;
}  // namespace spdlog

namespace wisp::kube {

class ReflectorHandler {
 public:
  virtual ~ReflectorHandler() = default;
  virtual void OnAdd(const Json& /*object*/) {}
  virtual void OnUpdate(const Json& /*old_object*/, const Json& /*new_object*/) {}
  virtual void OnDelete(const Json& /*object*/) {}
  virtual void OnSynced() {}
};

struct ReflectorOptions {
  std::string namespace_name;  // "" = every namespace (or a cluster-scoped resource)
  std::string label_selector;
  std::string field_selector;
  int64_t page_size = 500;
  std::chrono::seconds watch_timeout{2};
  std::chrono::milliseconds read_slack{std::chrono::seconds(5)};
  std::chrono::milliseconds initial_backoff{500};
  std::chrono::milliseconds max_backoff{std::chrono::seconds(30)};
  std::string name = "reflector";  // for logs
};

struct ReflectorStats {
  int64_t lists = 0;
  int64_t watches = 0;
  int64_t gone = 0;    // 410s that forced a relist
  int64_t errors = 0;  // failed lists/watches and ERROR events
  int64_t events = 0;  // watch events handled (bookmarks included)
};

class Reflector {
 public:
  Reflector(Client& client, Resource resource, ReflectorOptions options, ReflectorHandler& handler);
  ~Reflector();
  Reflector(const Reflector&) = delete;
  Reflector& operator=(const Reflector&) = delete;

  void Start();
  void Stop();
  // Tells the thread to stop without waiting for it; Stop() then waits. Stopping several
  // reflectors: RequestStop() each, then Stop() each, and they end together rather than in turn.
  void RequestStop();

  bool HasSynced() const { return synced_.load(); }
  std::string LastResourceVersion() const;
  ReflectorStats stats() const;
  std::vector<Json> Objects() const;

 private:
  void Run();
  // Lists and reconciles the copy with the result; false on failure.
  bool Relist();
  // Watches once from the last resourceVersion until the stream ends; what happens next.
  enum class Next { kWatch, kBackoff, kRelist };
  Next WatchOnce();
  void Apply(const WatchEvent& event);
  // Waits `d` unless stopped; false when stopped.
  bool Sleep(std::chrono::milliseconds d);
  static std::string Key(const Json& object);

  Client& client_;
  const Resource resource_;
  const ReflectorOptions options_;
  ReflectorHandler& handler_;
  std::shared_ptr<spdlog::logger> logger_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::map<std::string, Json> objects_;  // namespace/name -> object
  std::string resource_version_;
  ReflectorStats stats_;
  std::atomic<bool> synced_{false};
  std::thread thread_;
};

}  // namespace wisp::kube
