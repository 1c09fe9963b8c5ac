#include "wisp/kube/reflector.hpp"

#include <algorithm>

#include "wisp/log/log.hpp"

namespace wisp::kube {
namespace {

std::string ResourceVersionOf(const Json& object) {
  if (!object.is_object()) return "";
  const auto meta = object.find("metadata");
  if (meta == object.end() || !meta->is_object()) return "";
  return meta->value("resourceVersion", "");
}

}  // namespace

Reflector::Reflector(Client& client, Resource resource, ReflectorOptions options,
                     ReflectorHandler& handler)
    : client_(client),
      resource_(std::move(resource)),
      options_(std::move(options)),
      handler_(handler),
      logger_(log::Get("kube")) {}

Reflector::~Reflector() { Stop(); }

void Reflector::Start() {
  std::lock_guard lock(mu_);
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { Run(); });
}

void Reflector::RequestStop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
}

void Reflector::Stop() {
  RequestStop();
  if (thread_.joinable()) thread_.join();
}

std::string Reflector::LastResourceVersion() const {
  std::lock_guard lock(mu_);
  return resource_version_;
}

ReflectorStats Reflector::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

std::vector<Json> Reflector::Objects() const {
  std::lock_guard lock(mu_);
  std::vector<Json> out;
  out.reserve(objects_.size());
  for (const auto& [key, object] : objects_) out.push_back(object);
  return out;
}

std::string Reflector::Key(const Json& object) {
  const Json meta = object.is_object() ? object.value("metadata", Json::object()) : Json::object();
  const std::string ns = meta.is_object() ? meta.value("namespace", "") : "";
  const std::string name = meta.is_object() ? meta.value("name", "") : "";
  return ns.empty() ? name : ns + "/" + name;
}

bool Reflector::Sleep(std::chrono::milliseconds d) {
  std::unique_lock lock(mu_);
  return !cv_.wait_for(lock, d, [this] { return stopping_; });
}

void Reflector::Run() {
  auto backoff = options_.initial_backoff;
  auto stopped = [this] {
    std::lock_guard lock(mu_);
    return stopping_;
  };
  bool need_list = true;
  while (!stopped()) {
    if (need_list) {
      if (!Relist()) {
        if (!Sleep(backoff)) return;
        backoff = std::min(backoff * 2, options_.max_backoff);
        continue;
      }
      need_list = false;
      backoff = options_.initial_backoff;
    }
    switch (WatchOnce()) {
      case Next::kWatch:
        backoff = options_.initial_backoff;
        break;
      case Next::kRelist:
        need_list = true;
        break;
      case Next::kBackoff:
        if (!Sleep(backoff)) return;
        backoff = std::min(backoff * 2, options_.max_backoff);
        break;
    }
  }
}

bool Reflector::Relist() {
  auto list = client_.List(resource_, options_.namespace_name,
                           {.label_selector = options_.label_selector,
                            .field_selector = options_.field_selector,
                            .page_size = options_.page_size});
  {
    std::lock_guard lock(mu_);
    ++stats_.lists;
    if (!list.ok()) ++stats_.errors;
  }
  if (!list.ok()) {
    SPDLOG_LOGGER_WARN(logger_, "{}: {}", options_.name, list.status().ToString());
    return false;
  }
  std::map<std::string, Json> fresh;
  for (auto& item : list->items) fresh.emplace(Key(item), std::move(item));
  std::map<std::string, Json> old;
  {
    std::lock_guard lock(mu_);
    old = objects_;
    objects_ = fresh;
    resource_version_ = list->resource_version;
  }
  // Deletions first: the objects that vanished while we were not watching.
  for (const auto& [key, object] : old) {
    if (fresh.find(key) == fresh.end()) handler_.OnDelete(object);
  }
  for (const auto& [key, object] : fresh) {
    auto it = old.find(key);
    if (it == old.end()) {
      handler_.OnAdd(object);
    } else if (ResourceVersionOf(it->second) != ResourceVersionOf(object)) {
      handler_.OnUpdate(it->second, object);
    }
  }
  synced_ = true;
  handler_.OnSynced();
  return true;
}

Reflector::Next Reflector::WatchOnce() {
  WatchOptions wo;
  wo.resource_version = LastResourceVersion();
  wo.label_selector = options_.label_selector;
  wo.field_selector = options_.field_selector;
  wo.allow_bookmarks = true;
  wo.timeout_seconds = options_.watch_timeout.count();
  wo.read_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(options_.watch_timeout) +
                    options_.read_slack;
  auto watch = client_.Watch(resource_, options_.namespace_name, wo);
  {
    std::lock_guard lock(mu_);
    ++stats_.watches;
    if (!watch.ok()) ++(IsGone(watch.status()) ? stats_.gone : stats_.errors);
  }
  if (!watch.ok()) {
    if (IsGone(watch.status())) return Next::kRelist;
    SPDLOG_LOGGER_WARN(logger_, "{}: {}", options_.name, watch.status().ToString());
    return Next::kBackoff;
  }
  const auto started = std::chrono::steady_clock::now();
  int64_t seen = 0;
  while (true) {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return Next::kWatch;
    }
    auto event = (*watch)->Next();
    if (!event.ok()) {
      std::lock_guard lock(mu_);
      if (IsGone(event.status())) {
        ++stats_.gone;
        SPDLOG_LOGGER_INFO(logger_, "{}: {}; listing again", options_.name,
                           std::string(event.status().message()));
        return Next::kRelist;
      }
      ++stats_.errors;
      if (stopping_) return Next::kWatch;
      SPDLOG_LOGGER_WARN(logger_, "{}: the watch broke: {}", options_.name,
                         event.status().ToString());
      return Next::kBackoff;
    }
    if (!event->has_value()) {
      // The server ended it: watch again at once, unless it ended at once with nothing in it (a
      // proxy or a broken apiserver would have us spin; client-go's "very short watch" check).
      const auto lasted = std::chrono::steady_clock::now() - started;
      if (seen == 0 && lasted < std::min<std::chrono::steady_clock::duration>(
                                    std::chrono::seconds(1),
                                    std::chrono::milliseconds(options_.watch_timeout) / 2)) {
        std::lock_guard lock(mu_);
        ++stats_.errors;
        SPDLOG_LOGGER_WARN(logger_, "{}: the watch ended at once with no events; backing off",
                           options_.name);
        return Next::kBackoff;
      }
      return Next::kWatch;
    }
    ++seen;
    if ((*event)->type == EventType::kError) {
      std::lock_guard lock(mu_);
      ++stats_.errors;
      SPDLOG_LOGGER_WARN(logger_, "{}: ERROR event: {}", options_.name,
                         (*event)->object.value("message", std::string("(no message)")));
      return Next::kBackoff;
    }
    Apply(**event);
  }
}

void Reflector::Apply(const WatchEvent& event) {
  const std::string rv = ResourceVersionOf(event.object);
  Json old;
  bool had = false;
  {
    std::lock_guard lock(mu_);
    ++stats_.events;
    if (!rv.empty()) resource_version_ = rv;
    if (event.type == EventType::kBookmark) return;
    const std::string key = Key(event.object);
    auto it = objects_.find(key);
    had = it != objects_.end();
    if (had) old = it->second;
    if (event.type == EventType::kDeleted) {
      if (had) objects_.erase(it);
    } else {
      objects_[key] = event.object;
    }
  }
  switch (event.type) {
    case EventType::kAdded:
    case EventType::kModified:
      if (had) {
        handler_.OnUpdate(old, event.object);
      } else {
        handler_.OnAdd(event.object);
      }
      break;
    case EventType::kDeleted:
      handler_.OnDelete(event.object);
      break;
    default:
      break;
  }
}

}  // namespace wisp::kube
