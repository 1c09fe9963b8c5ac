// NatsBus's connection: options, connect, reconnect (with backoff), publish, state, and
// close/drain. The other parts are listed in nats_internal.hpp.
#include <random>
#include <thread>

#include "nats_internal.hpp"

namespace wisp::bus {
namespace internal {

int64_t ReconnectDelayMs(int attempts, int64_t wait, int64_t wait_max) {
  int64_t delay = wait;
  for (int i = 1; i < attempts && delay < wait_max; ++i) delay *= 2;
  delay = std::min(delay, wait_max);
  thread_local std::mt19937 rng(std::random_device{}());
  const int64_t jitter = delay / 5;
  if (jitter > 0) delay += std::uniform_int_distribution<int64_t>(0, jitter)(rng);
  return delay;
}

absl::Status ValidateOptions(const NatsBusOptions& o) {
  if (o.servers.empty())
    return absl::InvalidArgumentError("nats servers: at least one URL required");
  for (const auto& s : o.servers) {
    if (s.empty()) return absl::InvalidArgumentError("nats servers: empty URL");
  }
  const int auth =
      (!o.user.empty() ? 1 : 0) + (!o.creds_file.empty() ? 1 : 0) + (!o.token.empty() ? 1 : 0);
  if (auth > 1) {
    return absl::InvalidArgumentError(
        "nats auth: set only one of user/password, creds file, token");
  }
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) {
    return absl::InvalidArgumentError("nats tls: tls_cert_file and tls_key_file go together");
  }
  if (o.serve_threads < 1) return absl::InvalidArgumentError("nats serve_threads must be >= 1");
  if (!o.inbox_prefix.empty()) {
    // A literal subject: dot-separated non-empty tokens of printable characters, no wildcards.
    const std::string_view p = o.inbox_prefix;
    bool ok = p.front() != '.' && p.back() != '.' && p.find("..") == std::string_view::npos;
    for (char c : p) ok &= c > ' ' && c < 0x7f && c != '*' && c != '>';
    if (!ok) {
      return absl::InvalidArgumentError("nats inbox_prefix: \"" + o.inbox_prefix +
                                        "\" is not a literal subject (tokens separated by '.', no "
                                        "spaces, no '*' or '>')");
    }
  }
  return absl::OkStatus();
}

// The options NatsBus::Connect and LoopRequester::Connect share: servers, name, authentication,

absl::Status SetServerOptions(natsOptions* o, const NatsBusOptions& options) {
  std::vector<const char*> urls;
  for (const auto& u : options.servers) urls.push_back(u.c_str());
  auto check = [](natsStatus st, std::string_view field) -> absl::Status {
    if (st == NATS_OK) return absl::OkStatus();
    return absl::InvalidArgumentError("nats " + std::string(field) + ": " + natsStatus_GetText(st));
  };
  WISP_RETURN_IF_ERROR(
      check(natsOptions_SetServers(o, urls.data(), static_cast<int>(urls.size())), "servers"));
  if (!options.name.empty())
    WISP_RETURN_IF_ERROR(check(natsOptions_SetName(o, options.name.c_str()), "name"));
  if (!options.user.empty()) {
    WISP_RETURN_IF_ERROR(
        check(natsOptions_SetUserInfo(o, options.user.c_str(), options.password.c_str()), "user"));
  }
  if (!options.token.empty())
    WISP_RETURN_IF_ERROR(check(natsOptions_SetToken(o, options.token.c_str()), "token"));
  if (!options.creds_file.empty()) {
    WISP_RETURN_IF_ERROR(
        check(natsOptions_SetUserCredentialsFromFiles(o, options.creds_file.c_str(), nullptr),
              "creds file " + options.creds_file));
  }
  if (!options.tls_ca_file.empty()) {
    WISP_RETURN_IF_ERROR(check(natsOptions_SetSecure(o, true), "tls"));
    WISP_RETURN_IF_ERROR(
        check(natsOptions_LoadCATrustedCertificates(o, options.tls_ca_file.c_str()),
              "tls_ca_file " + options.tls_ca_file));
  }
  if (!options.tls_cert_file.empty()) {
    WISP_RETURN_IF_ERROR(check(natsOptions_SetSecure(o, true), "tls"));
    WISP_RETURN_IF_ERROR(check(natsOptions_LoadCertificatesChain(o, options.tls_cert_file.c_str(),
                                                                 options.tls_key_file.c_str()),
                               "tls_cert_file/tls_key_file"));
  }
  if (!options.inbox_prefix.empty()) {
    WISP_RETURN_IF_ERROR(
        check(natsOptions_SetCustomInboxPrefix(o, options.inbox_prefix.c_str()), "inbox_prefix"));
  }
  return absl::OkStatus();
}

}  // namespace internal

using namespace internal;

// ---- NatsBus::Impl ----

NatsBus::Impl::~Impl() {
  StopTicker();  // it visits `serves`; serving cores may outlive us
  CloseAsync();  // fails what is pending before the metrics go
  if (js != nullptr) jsCtx_Destroy(js);
  if (nc != nullptr) {
    closing = true;
    natsConnection_Close(nc);
    if (retirer) retirer->ReaderStopped();  // Close joined nats.c's reader
    std::unique_lock lock(mu);
    const bool done = cv.wait_for(lock, std::chrono::seconds(5), [&] { return closed; });
    lock.unlock();
    natsConnection_Destroy(nc);
    if (done) delete callbacks;  // else leak it: nats.c might still call back
  } else {
    delete callbacks;
  }
}

absl::Status NatsBus::Impl::CheckConnected(std::string_view subject) const {
  switch (natsConnection_Status(nc)) {
    case NATS_CONN_STATUS_CONNECTED:
      return absl::OkStatus();
    case NATS_CONN_STATUS_CLOSED:
      return absl::UnavailableError("request on " + std::string(subject) +
                                    ": bus connection closed");
    case NATS_CONN_STATUS_DRAINING_SUBS:
    case NATS_CONN_STATUS_DRAINING_PUBS:
      return absl::UnavailableError("request on " + std::string(subject) + ": bus draining");
    default:
      return absl::UnavailableError("request on " + std::string(subject) +
                                    ": not connected to NATS (reconnecting)");
  }
}

void NatsBus::Impl::SetConnected(bool up) {
  if (metrics) metrics->connected.Set(up ? 1 : 0);
}

void NatsBus::Impl::OnDisconnected(natsConnection*, void* c) {
  auto* impl = static_cast<Callbacks*>(c)->impl;
  impl->SetConnected(false);
  if (!impl->closing) SPDLOG_LOGGER_WARN(Logger(), "disconnected from NATS; reconnecting");
}
void NatsBus::Impl::OnReconnected(natsConnection* nc, void* c) {
  auto* impl = static_cast<Callbacks*>(c)->impl;
  impl->SetConnected(true);
  if (impl->metrics) impl->metrics->reconnects.Increment();
  char url[256] = {0};
  natsConnection_GetConnectedUrl(nc, url, sizeof(url));
  SPDLOG_LOGGER_INFO(Logger(), "reconnected to NATS at {}", url);
}
void NatsBus::Impl::OnConnected(natsConnection* nc, void* c) {
  auto* impl = static_cast<Callbacks*>(c)->impl;
  impl->SetConnected(true);
  char url[256] = {0};
  natsConnection_GetConnectedUrl(nc, url, sizeof(url));
  SPDLOG_LOGGER_INFO(Logger(), "connected to NATS at {}", url);
}
void NatsBus::Impl::OnClosed(natsConnection*, void* c) {
  auto* impl = static_cast<Callbacks*>(c)->impl;
  impl->SetConnected(false);
  // Notify under the lock: the destructor, woken by this, must not free the condition variable
  // while notify_all is still running.
  std::lock_guard lock(impl->mu);
  impl->closed = true;
  impl->cv.notify_all();
}
void NatsBus::Impl::OnError(natsConnection*, natsSubscription* sub, natsStatus err, void*) {
  if (err == NATS_SLOW_CONSUMER && sub != nullptr) {
    SPDLOG_LOGGER_WARN(Logger(), "slow consumer on {}: messages dropped",
                       natsSubscription_GetSubject(sub));
  } else {
    SPDLOG_LOGGER_WARN(Logger(), "NATS async error: {}", natsStatus_GetText(err));
  }
}
int64_t NatsBus::Impl::ReconnectDelay(natsConnection*, int attempts, void* c) {
  const auto& o = static_cast<Callbacks*>(c)->impl->options;
  return ReconnectDelayMs(attempts, Ms(o.reconnect_wait), Ms(o.reconnect_wait_max));
}

// ---- NatsBus ----

absl::StatusOr<std::unique_ptr<NatsBus>> NatsBus::Connect(const NatsBusOptions& options) {
  WISP_RETURN_IF_ERROR(ValidateOptions(options));
  auto impl = std::make_shared<Impl>();
  impl->options = options;
  if (options.registry != nullptr) {
    impl->metrics = std::make_unique<BusClientMetrics>(*options.registry);
    impl->metrics->connected.Set(0);
  }
  impl->callbacks = new Impl::Callbacks{impl.get()};
  void* cb = impl->callbacks;

  natsOptions* o = nullptr;
  natsStatus s = natsOptions_Create(&o);
  if (s != NATS_OK) return FromNats(s, "nats options");
  std::unique_ptr<natsOptions, void (*)(natsOptions*)> guard(o, natsOptions_Destroy);
  WISP_RETURN_IF_ERROR(SetServerOptions(o, options));
  natsOptions_SetTimeout(o, Ms(options.connect_timeout));
  natsOptions_SetAllowReconnect(o, true);
  natsOptions_SetMaxReconnect(o, -1);  // forever
  natsOptions_SetCustomReconnectDelay(o, Impl::ReconnectDelay, cb);
  natsOptions_SetPingInterval(o, std::max<int64_t>(Ms(options.ping_interval), 100));
  natsOptions_SetMaxPingsOut(o, 2);
  natsOptions_SetSendAsap(o, true);
  natsOptions_SetFailRequestsOnDisconnect(o, true);
  natsOptions_SetDisconnectedCB(o, Impl::OnDisconnected, cb);
  natsOptions_SetReconnectedCB(o, Impl::OnReconnected, cb);
  natsOptions_SetClosedCB(o, Impl::OnClosed, cb);
  natsOptions_SetErrorHandler(o, Impl::OnError, cb);
  if (options.retry_on_failed_connect) {
    natsOptions_SetRetryOnFailedConnect(o, true, Impl::OnConnected, cb);
  }

  s = natsConnection_Connect(&impl->nc, o);
  if (s == NATS_NOT_YET_CONNECTED && options.retry_on_failed_connect) {
    SPDLOG_LOGGER_WARN(Logger(), "NATS not reachable yet; retrying in the background");
  } else if (s != NATS_OK) {
    absl::Status st = FromNats(s, "connecting to NATS");
    impl->nc = nullptr;  // nothing to close; callbacks never registered with a live connection
    return absl::UnavailableError(std::string(st.message()));
  } else {
    impl->SetConnected(true);
  }
  impl->retirer = std::make_shared<SubscriptionRetirer>(impl->nc);
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Wait = Ms(options.jetstream_timeout);
  s = natsConnection_JetStream(&impl->js, impl->nc, &jo);
  if (s != NATS_OK) return FromNats(s, "JetStream context");
  impl->jetstream = NewJetStream(*impl);
  impl->StartAsync();
  return std::unique_ptr<NatsBus>(new NatsBus(std::move(impl)));
}

NatsBus::NatsBus(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
NatsBus::~NatsBus() = default;

absl::Status NatsBus::Publish(std::string_view subject, std::string_view data,
                              const Headers& headers) {
  const std::string subj(subject);
  if (headers.empty()) {
    return FromNats(
        natsConnection_Publish(impl_->nc, subj.c_str(), data.data(), static_cast<int>(data.size())),
        "publish on " + subj);
  }
  WISP_ASSIGN_OR_RETURN(MsgPtr msg, BuildMsg(subject, nullptr, data, headers));
  return FromNats(natsConnection_PublishMsg(impl_->nc, msg.get()), "publish on " + subj);
}

ConnectionState NatsBus::State() const {
  switch (natsConnection_Status(impl_->nc)) {
    case NATS_CONN_STATUS_CONNECTED:
    case NATS_CONN_STATUS_DRAINING_SUBS:
    case NATS_CONN_STATUS_DRAINING_PUBS:
      return ConnectionState::kConnected;
    case NATS_CONN_STATUS_CLOSED:
      return ConnectionState::kClosed;
    default:
      return ConnectionState::kReconnecting;
  }
}

std::string NatsBus::ConnectedUrl() const {
  char url[256] = {0};
  if (natsConnection_GetConnectedUrl(impl_->nc, url, sizeof(url)) != NATS_OK) return "";
  return url;
}

absl::Status NatsBus::Drain(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::vector<std::shared_ptr<DrainableServe>> loop_serves;
  std::vector<std::shared_ptr<DrainableServe>> serves = impl_->LiveServes(&loop_serves);
  // First stop taking requests and let the delivered ones finish while replies can still go out.
  for (auto& core : serves) core->StartDrain();
  for (auto& core : loop_serves) core->StartDrain();
  if (!serves.empty()) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    natsConnection_FlushTimeout(impl_->nc, std::max<int64_t>(left.count(), 1));
  }
  bool idle = true;
  for (auto& core : serves) {
    if (!core->Finished()) idle = core->WaitDrained(deadline) && idle;
  }
  // Their handlers may use this connection (KV, requests): they finish before it drains.
  for (auto& core : loop_serves) {
    if (!core->Finished()) idle = core->WaitDrained(deadline) && idle;
    core->Close();
  }
  impl_->closing = true;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  natsStatus s = natsConnection_DrainTimeout(impl_->nc, std::max<int64_t>(left.count(), 1));
  if (s != NATS_OK && s != NATS_CONNECTION_CLOSED) natsConnection_Close(impl_->nc);
  std::unique_lock lock(impl_->mu);
  const bool closed = impl_->cv.wait_until(lock, deadline + std::chrono::milliseconds(500),
                                           [&] { return impl_->closed; });
  lock.unlock();
  if (!closed) natsConnection_Close(impl_->nc);
  impl_->CloseAsync();  // nothing more can answer
  if (!idle || !closed) return absl::DeadlineExceededError("bus drain did not finish in time");
  return absl::OkStatus();
}

}  // namespace wisp::bus
