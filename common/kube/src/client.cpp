#include "wisp/kube/client.hpp"

#include <algorithm>
#include <cctype>

#include "wisp/http/url.hpp"
#include "wisp/k8s/json.hpp"
#include "wisp/log/log.hpp"

namespace wisp::kube {
namespace {

constexpr std::string_view kJson = "application/json";

// Percent-encodes all but RFC 3986's unreserved characters (and ':' in a path segment).
std::string Escape(std::string_view s, bool keep_colon) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' ||
        (keep_colon && c == ':')) {
      out += static_cast<char>(c);
    } else {
      static const char* hex = "0123456789ABCDEF";
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

// Names are DNS labels in practice; escape anything else so a bad name cannot change the path.
std::string PathEscape(std::string_view s) { return Escape(s, /*keep_colon=*/true); }

std::string NsName(std::string_view ns, std::string_view name) {
  if (ns.empty()) return std::string(name);
  return std::string(ns) + "/" + std::string(name);
}

std::string InNs(const Resource& r, std::string_view ns) {
  if (!r.namespaced) return "";
  return ns.empty() ? " in all namespaces" : " in " + std::string(ns);
}

// Builds "?a=b&c=d" from the non-empty pairs.
class Query {
 public:
  Query& Add(std::string_view key, std::string_view value) {
    if (value.empty()) return *this;
    text_ += text_.empty() ? '?' : '&';
    text_ += std::string(key) + "=" + QueryEscape(value);
    return *this;
  }
  const std::string& str() const { return text_; }

 private:
  std::string text_;
};

std::optional<std::chrono::milliseconds> RetryDelay(const http::ClientResponse& r,
                                                    std::chrono::milliseconds cap) {
  const std::string_view after = r.Header("retry-after");
  if (r.status != 429 && !(r.status >= 500 && !after.empty())) return std::nullopt;
  std::chrono::milliseconds wait = std::chrono::seconds(1);
  if (!after.empty() && std::all_of(after.begin(), after.end(), ::isdigit) && after.size() < 7) {
    wait = std::chrono::seconds(std::stoi(std::string(after)));
  }
  return std::min(wait, cap);
}

absl::StatusOr<Json> ParseObject(const http::ClientResponse& r, std::string_view context) {
  auto j = k8s::ParseJson(r.body, "the apiserver's answer");
  if (!j.ok()) return Annotate(j.status(), context);
  return *std::move(j);
}

class ApiWatch final : public WatchStream {
 public:
  ApiWatch(http::ResponseStreamPtr stream, std::string context)
      : stream_(std::move(stream)), context_(std::move(context)) {}
  absl::StatusOr<std::optional<WatchEvent>> Next() override {
    while (true) {
      auto line = stream_->ReadLine();
      if (!line.ok()) return Annotate(line.status(), context_);
      if (!line->has_value()) return std::optional<WatchEvent>();
      if ((*line)->empty()) continue;
      WISP_ASSIGN_OR_RETURN(WatchEvent e, ParseWatchEvent(**line, context_));
      return std::optional<WatchEvent>(std::move(e));
    }
  }

 private:
  http::ResponseStreamPtr stream_;
  std::string context_;
};

class ApiClient final : public Client {
 public:
  ApiClient(http::Client& http, http::ClientPtr owned, Config config, ClientOptions options)
      : http_(http),
        owned_(std::move(owned)),
        config_(std::move(config)),
        options_(options),
        clock_(options.clock != nullptr ? *options.clock : SystemClock::Instance()),
        sleeper_(options.sleeper != nullptr ? *options.sleeper : RealSleeper::Instance()),
        tokens_(config_.token, config_.token_file, &clock_),
        bucket_(options.qps, options.burst, clock_, sleeper_),
        logger_(log::Get("kube")) {
    base_ = config_.server;
    while (!base_.empty() && base_.back() == '/') base_.pop_back();
  }

  absl::StatusOr<Json> Get(const Resource& resource, std::string_view ns,
                           std::string_view name) override {
    const std::string ctx = "kube get " + resource.plural + " " + NsName(ns, name);
    if (name.empty()) return absl::InvalidArgumentError(ctx + ": name is empty");
    WISP_ASSIGN_OR_RETURN(auto r, Call(Request("GET", ResourcePath(resource, ns, name)), ctx));
    return ParseObject(r, ctx);
  }

  absl::StatusOr<ListResult> List(const Resource& resource, std::string_view ns,
                                  const ListOptions& options) override {
    const std::string ctx = "kube list " + resource.plural + InNs(resource, ns);
    int64_t page = options.page_size;
    bool restarted = false;
    ListResult out;
    std::string cont;
    while (true) {
      Query q;
      if (page > 0) q.Add("limit", std::to_string(page));
      q.Add("continue", cont)
          .Add("labelSelector", options.label_selector)
          .Add("fieldSelector", options.field_selector);
      auto r = Call(Request("GET", ResourcePath(resource, ns) + q.str()), ctx);
      if (!r.ok() && IsGone(r.status()) && !cont.empty() && !restarted) {
        // The continue token expired (etcd compacted past it): start over in one request, as
        // client-go's pager does.
        SPDLOG_LOGGER_INFO(logger_, "{}: the continue token expired; listing again without pages",
                           ctx);
        restarted = true;
        page = 0;
        cont.clear();
        out = ListResult();
        continue;
      }
      WISP_RETURN_IF_ERROR(r.status());
      WISP_ASSIGN_OR_RETURN(Json list, ParseObject(*r, ctx));
      std::string kind = list.value("kind", "");
      if (kind.size() > 4 && kind.compare(kind.size() - 4, 4, "List") == 0)
        kind.resize(kind.size() - 4);
      const std::string api_version = list.value("apiVersion", resource.ApiVersion());
      if (list.contains("items") && list["items"].is_array()) {
        for (auto& item : list["items"]) {
          if (!item.contains("apiVersion")) item["apiVersion"] = api_version;
          if (!item.contains("kind") && !kind.empty()) item["kind"] = kind;
          out.items.push_back(std::move(item));
        }
      }
      const Json meta = list.value("metadata", Json::object());
      out.resource_version = meta.value("resourceVersion", "");
      cont = meta.value("continue", "");
      if (cont.empty()) return out;
    }
  }

  absl::StatusOr<Json> Create(const Resource& resource, std::string_view ns,
                              const Json& object) override {
    const Json meta = object.is_object() ? object.value("metadata", Json::object()) : Json();
    const std::string shown =
        meta.is_object() ? meta.value("name", meta.value("generateName", "")) : "";
    const std::string ctx = "kube create " + resource.plural + " " + NsName(ns, shown);
    if (!object.is_object()) return absl::InvalidArgumentError(ctx + ": object is not a map");
    if (const std::string obj_ns = meta.value("namespace", "");
        !obj_ns.empty() && resource.namespaced && obj_ns != ns) {
      return absl::InvalidArgumentError(ctx + ": metadata.namespace \"" + obj_ns +
                                        "\" differs from the namespace asked for");
    }
    auto req = Request("POST", ResourcePath(resource, ns));
    SetBody(req, object.dump(), kJson);
    WISP_ASSIGN_OR_RETURN(auto r, Call(std::move(req), ctx));
    return ParseObject(r, ctx);
  }

  absl::StatusOr<Json> Update(const Resource& resource, std::string_view ns,
                              const Json& object) override {
    return Put(resource, ns, object, "", "update");
  }

  absl::StatusOr<Json> UpdateStatus(const Resource& resource, std::string_view ns,
                                    const Json& object) override {
    return Put(resource, ns, object, "status", "update status of");
  }

  absl::StatusOr<Json> Patch(const Resource& resource, std::string_view ns, std::string_view name,
                             const Json& patch, const PatchOptions& options) override {
    const char* verb = options.type == PatchType::kApply ? "apply" : "patch";
    std::string ctx = std::string("kube ") + verb + " " + resource.plural + " " + NsName(ns, name);
    if (!options.subresource.empty()) ctx += " (" + options.subresource + ")";
    if (name.empty()) return absl::InvalidArgumentError(ctx + ": name is empty");
    std::string_view type;
    switch (options.type) {
      case PatchType::kMerge:
        type = "application/merge-patch+json";
        break;
      case PatchType::kJson:
        type = "application/json-patch+json";
        break;
      case PatchType::kStrategicMerge:
        type = "application/strategic-merge-patch+json";
        break;
      case PatchType::kApply:
        type = "application/apply-patch+yaml";  // JSON is YAML
        break;
    }
    if (options.type == PatchType::kApply && options.field_manager.empty()) {
      return absl::InvalidArgumentError(ctx + ": field_manager is required for server-side apply");
    }
    if (options.type == PatchType::kJson && !patch.is_array()) {
      return absl::InvalidArgumentError(ctx + ": a JSON patch is an array of operations");
    }
    Query q;
    q.Add("fieldManager", options.field_manager);
    if (options.force) q.Add("force", "true");
    auto req = Request("PATCH", ResourcePath(resource, ns, name, options.subresource) + q.str());
    SetBody(req, patch.dump(), type);
    WISP_ASSIGN_OR_RETURN(auto r, Call(std::move(req), ctx));
    return ParseObject(r, ctx);
  }

  absl::Status Delete(const Resource& resource, std::string_view ns, std::string_view name,
                      const DeleteOptions& options) override {
    const std::string ctx = "kube delete " + resource.plural + " " + NsName(ns, name);
    if (name.empty()) return absl::InvalidArgumentError(ctx + ": name is empty");
    Json body = {{"kind", "DeleteOptions"}, {"apiVersion", "v1"}};
    if (!options.propagation_policy.empty()) {
      body["propagationPolicy"] = options.propagation_policy;
    }
    if (!options.uid.empty()) body["preconditions"]["uid"] = options.uid;
    if (!options.resource_version.empty()) {
      body["preconditions"]["resourceVersion"] = options.resource_version;
    }
    if (options.grace_period_seconds) body["gracePeriodSeconds"] = *options.grace_period_seconds;
    auto req = Request("DELETE", ResourcePath(resource, ns, name));
    SetBody(req, body.dump(), kJson);
    return Call(std::move(req), ctx).status();
  }

  absl::StatusOr<WatchPtr> Watch(const Resource& resource, std::string_view ns,
                                 const WatchOptions& options) override {
    const std::string ctx = "kube watch " + resource.plural + InNs(resource, ns);
    Query q;
    q.Add("watch", "1")
        .Add("resourceVersion", options.resource_version)
        .Add("allowWatchBookmarks", options.allow_bookmarks ? "true" : "")
        .Add("timeoutSeconds",
             options.timeout_seconds ? std::to_string(*options.timeout_seconds) : "")
        .Add("labelSelector", options.label_selector)
        .Add("fieldSelector", options.field_selector);
    auto req = Request("GET", ResourcePath(resource, ns) + q.str());
    req.total_timeout = std::chrono::milliseconds(0);
    req.read_timeout = options.read_timeout.value_or(options_.watch_read_timeout);
    bool reauthed = false;
    for (int attempt = 1;; ++attempt) {
      WISP_RETURN_IF_ERROR(Prepare(req, ctx));
      auto stream = http_.Open(req);
      if (!stream.ok()) return Annotate(stream.status(), ctx);
      const http::ClientResponse& head = (*stream)->response();
      if (head.status >= 200 && head.status < 300) {
        return WatchPtr(new ApiWatch(*std::move(stream), ctx));
      }
      // An error answer: its (small) body is the Status.
      std::string body;
      char buf[8192];
      while (body.size() < (64 << 10)) {
        auto got = (*stream)->Read(buf, sizeof buf);
        if (!got.ok() || *got == 0) break;
        body.append(buf, *got);
      }
      if (head.status == 401 && tokens_.from_file() && !reauthed) {
        reauthed = true;
        tokens_.Invalidate();
        continue;
      }
      if (auto wait = RetryDelay(head, options_.max_retry_after);
          wait && attempt < options_.max_attempts) {
        SPDLOG_LOGGER_DEBUG(logger_, "{}: HTTP {}, retrying in {} ms", ctx, head.status,
                            wait->count());
        sleeper_.Sleep(*wait);
        continue;
      }
      return StatusFromApi(head.status, body, ctx);
    }
  }

 private:
  http::ClientRequest Request(std::string method, const std::string& path) const {
    http::ClientRequest req;
    req.method = std::move(method);
    req.url = base_ + path;
    req.headers.emplace_back("Accept", std::string(kJson));
    req.total_timeout = options_.request_timeout;
    return req;
  }

  static void SetBody(http::ClientRequest& req, std::string body, std::string_view type) {
    req.body = std::move(body);
    req.headers.emplace_back("Content-Type", std::string(type));
  }

  // The rate limit's token, then the current bearer token.
  absl::Status Prepare(http::ClientRequest& req, const std::string& ctx) {
    bucket_.Wait();
    auto token = tokens_.Token();
    if (!token.ok()) return Annotate(token.status(), ctx);
    req.bearer_token = *std::move(token);
    return absl::OkStatus();
  }

  absl::StatusOr<http::ClientResponse> Call(http::ClientRequest req, const std::string& ctx) {
    bool reauthed = false;
    for (int attempt = 1;; ++attempt) {
      WISP_RETURN_IF_ERROR(Prepare(req, ctx));
      auto r = http_.Send(req);
      if (!r.ok()) return Annotate(r.status(), ctx);
      if (r->status == 401 && tokens_.from_file() && !reauthed) {
        // kubelet may have rotated the token since we last read it.
        reauthed = true;
        tokens_.Invalidate();
        continue;
      }
      if (auto wait = RetryDelay(*r, options_.max_retry_after);
          wait && attempt < options_.max_attempts) {
        SPDLOG_LOGGER_DEBUG(logger_, "{}: HTTP {}, retrying in {} ms (try {} of {})", ctx,
                            r->status, wait->count(), attempt, options_.max_attempts);
        sleeper_.Sleep(*wait);
        continue;
      }
      if (r->status < 200 || r->status >= 300) return StatusFromApi(r->status, r->body, ctx);
      return r;
    }
  }

  absl::StatusOr<Json> Put(const Resource& resource, std::string_view ns, const Json& object,
                           std::string_view subresource, std::string_view verb) {
    const std::string name =
        object.is_object() ? object.value("metadata", Json::object()).value("name", "") : "";
    const std::string ctx =
        "kube " + std::string(verb) + " " + resource.plural + " " + NsName(ns, name);
    if (name.empty()) return absl::InvalidArgumentError(ctx + ": metadata.name is empty");
    auto req = Request("PUT", ResourcePath(resource, ns, name, subresource));
    SetBody(req, object.dump(), kJson);
    WISP_ASSIGN_OR_RETURN(auto r, Call(std::move(req), ctx));
    return ParseObject(r, ctx);
  }

  http::Client& http_;
  http::ClientPtr owned_;
  const Config config_;
  const ClientOptions options_;
  const Clock& clock_;
  Sleeper& sleeper_;
  TokenSource tokens_;
  TokenBucket bucket_;
  std::shared_ptr<spdlog::logger> logger_;
  std::string base_;
};

}  // namespace

std::string ResourcePath(const Resource& resource, std::string_view ns, std::string_view name,
                         std::string_view subresource) {
  std::string p = resource.group.empty() ? "/api/" + resource.version
                                         : "/apis/" + resource.group + "/" + resource.version;
  if (resource.namespaced && !ns.empty()) p += "/namespaces/" + PathEscape(ns);
  p += "/" + resource.plural;
  if (!name.empty()) p += "/" + PathEscape(name);
  if (!name.empty() && !subresource.empty()) p += "/" + PathEscape(subresource);
  return p;
}

std::string QueryEscape(std::string_view value) { return Escape(value, /*keep_colon=*/false); }

std::string_view EventTypeName(EventType type) {
  switch (type) {
    case EventType::kAdded:
      return "ADDED";
    case EventType::kModified:
      return "MODIFIED";
    case EventType::kDeleted:
      return "DELETED";
    case EventType::kBookmark:
      return "BOOKMARK";
    case EventType::kError:
      return "ERROR";
  }
  return "?";
}

absl::StatusOr<WatchEvent> ParseWatchEvent(std::string_view line, std::string_view context) {
  auto j = k8s::ParseJson(line, "a watch event");
  if (!j.ok()) return Annotate(j.status(), context);
  if (!j->is_object() || !(*j)["type"].is_string() || !(*j)["object"].is_object()) {
    return absl::InvalidArgumentError(std::string(context) +
                                      ": a watch event without type and object");
  }
  const std::string type = (*j)["type"].get<std::string>();
  WatchEvent e;
  if (type == "ADDED") {
    e.type = EventType::kAdded;
  } else if (type == "MODIFIED") {
    e.type = EventType::kModified;
  } else if (type == "DELETED") {
    e.type = EventType::kDeleted;
  } else if (type == "BOOKMARK") {
    e.type = EventType::kBookmark;
  } else if (type == "ERROR") {
    e.type = EventType::kError;
  } else {
    return absl::InvalidArgumentError(std::string(context) + ": unknown watch event type \"" +
                                      type + "\"");
  }
  e.object = std::move((*j)["object"]);
  if (e.type == EventType::kError && e.object.value("code", 0) == 410) {
    return StatusFromStatusObject(e.object, context);
  }
  return e;
}

ClientPtr NewClient(http::Client& http, Config config, ClientOptions options) {
  return ClientPtr(new ApiClient(http, nullptr, std::move(config), options));
}

absl::StatusOr<ClientPtr> NewClient(const Config& config, ClientOptions options) {
  auto url = http::ParseUrl(config.server, "kube server");
  if (!url.ok()) return Annotate(url.status(), config.origin);
  http::ClientOptions h;
  h.tls = config.tls;
  h.user_agent = options.user_agent;
  h.read_timeout = options.request_timeout;
  h.name = "kube-http";
  auto http = http::NewClient(h);
  if (!http.ok()) return Annotate(http.status(), config.origin);
  http::Client& ref = **http;
  return ClientPtr(new ApiClient(ref, *std::move(http), config, options));
}

}  // namespace wisp::kube
