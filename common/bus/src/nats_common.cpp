// What every part of NatsBus uses: status mapping, message conversion, replies, and the
// lifetime of nats.c subscriptions.
#include <cstdlib>

#include "nats_internal.hpp"
#include "wisp/bus/replicas.hpp"

namespace wisp::bus::internal {

std::shared_ptr<spdlog::logger> Logger() {
  static auto logger = log::Get("bus");
  return logger;
}

absl::Status FromNats(natsStatus s, std::string_view what) {
  if (s == NATS_OK) return absl::OkStatus();
  std::string text = std::string(what) + ": " + natsStatus_GetText(s);
  natsStatus last = NATS_OK;
  const char* detail = nats_GetLastError(&last);
  if (detail != nullptr && *detail != '\0' && std::string_view(detail) != natsStatus_GetText(s)) {
    text += " (" + std::string(detail) + ")";
  }
  switch (s) {
    case NATS_TIMEOUT:
      return absl::DeadlineExceededError(text);
    case NATS_NO_RESPONDERS:
      return NoRespondersError(text);
    case NATS_CONNECTION_CLOSED:
    case NATS_CONNECTION_DISCONNECTED:
    case NATS_NO_SERVER:
    case NATS_NOT_YET_CONNECTED:
    case NATS_STALE_CONNECTION:
    case NATS_IO_ERROR:
    case NATS_DRAINING:
    case NATS_CONNECTION_AUTH_FAILED:
      return absl::UnavailableError(text);
    case NATS_NOT_FOUND:
      return absl::NotFoundError(text);
    case NATS_INVALID_ARG:
    case NATS_INVALID_SUBJECT:
    case NATS_INVALID_QUEUE_NAME:
      return absl::InvalidArgumentError(text);
    case NATS_MAX_PAYLOAD:
      return absl::ResourceExhaustedError(text);
    case NATS_NOT_PERMITTED:
      return absl::PermissionDeniedError(text);
    default:
      return absl::InternalError(text);
  }
}

absl::Status FromJs(natsStatus s, jsErrCode jerr, std::string_view what) {
  if (s == NATS_OK) return absl::OkStatus();
  absl::Status base = FromNats(s, what);
  std::string text(base.message());
  if (jerr != 0) text += " [jetstream error " + std::to_string(static_cast<int>(jerr)) + "]";
  switch (jerr) {
    case JSStreamNotFoundErr:
    case JSConsumerNotFoundErr:
    case JSNoMessageFoundErr:
      return absl::NotFoundError(text);
    case JSStreamWrongLastSequenceErr:
      return absl::AbortedError(text);
    case JSStreamNameExistErr:
    case JSConsumerNameExistErr:
      return absl::AlreadyExistsError(text);
    case JSStreamSubjectOverlapErr:
      return absl::InvalidArgumentError(text);
    case JSNotEnabledErr:
      return absl::UnavailableError(text);
    case JSStreamReplicasNotSupportedErr:
    case JSInsufficientResourcesErr:
    case JSClusterNoPeersErr:
      return ReplicaPlacementError(text);
    default:
      break;
  }
  if (s == NATS_NO_RESPONDERS) {
    return absl::UnavailableError(text + " (no JetStream stream or server answered)");
  }
  return absl::Status(base.code(), text);
}

bool LastErrorContains(std::string_view needle) {
  natsStatus last = NATS_OK;
  const char* detail = nats_GetLastError(&last);
  return detail != nullptr && std::string_view(detail).find(needle) != std::string_view::npos;
}

Message ToMessage(natsMsg* m) {
  Message out;
  out.subject = natsMsg_GetSubject(m);
  if (const char* r = natsMsg_GetReply(m); r != nullptr) out.reply = r;
  if (const char* d = natsMsg_GetData(m); d != nullptr)
    out.data.assign(d, natsMsg_GetDataLength(m));
  const char** keys = nullptr;
  int count = 0;
  if (natsMsgHeader_Keys(m, &keys, &count) == NATS_OK) {
    for (int i = 0; i < count; ++i) {
      const char* value = nullptr;
      if (natsMsgHeader_Get(m, keys[i], &value) == NATS_OK && value != nullptr) {
        out.headers[keys[i]] = value;
      }
    }
    free(static_cast<void*>(keys));
  }
  return out;
}

absl::StatusOr<MsgPtr> BuildMsg(std::string_view subject, const char* reply, std::string_view data,
                                const Headers& headers) {
  natsMsg* raw = nullptr;
  const std::string subj(subject);
  natsStatus s =
      natsMsg_Create(&raw, subj.c_str(), reply, data.data(), static_cast<int>(data.size()));
  if (s != NATS_OK) return FromNats(s, "creating message on " + subj);
  MsgPtr msg(raw);
  for (const auto& [k, v] : headers) {
    s = natsMsgHeader_Set(msg.get(), k.c_str(), v.c_str());
    if (s != NATS_OK) return FromNats(s, "setting header " + k);
  }
  return msg;
}

void SendReply(natsConnection* nc, const std::string& subject, const Message& in,
               const Reply& reply) {
  if (in.reply.empty()) return;  // a publish to a service subject: nobody waits
  natsStatus s = NATS_OK;
  if (reply.headers.empty()) {  // most replies: no natsMsg to build (one copy fewer)
    s = natsConnection_Publish(nc, in.reply.c_str(), reply.data.data(),
                               static_cast<int>(reply.data.size()));
  } else {
    auto out = BuildMsg(in.reply, nullptr, reply.data, reply.headers);
    if (!out.ok()) return;
    s = natsConnection_PublishMsg(nc, out->get());
  }
  if (s != NATS_OK) {
    SPDLOG_LOGGER_WARN(Logger(), "reply on {} not sent: {}", subject, natsStatus_GetText(s));
  }
}

void SubscriptionRetirer::Retire(natsSubscription* sub) {
  if (sub == nullptr) return;
  natsSubscription_Unsubscribe(sub);
  // Only what was unsubscribed before the PING went out is known to be past the reader when
  // its PONG comes back, so the flush covers the batch taken now, not what is parked meanwhile.
  std::vector<natsSubscription*> batch;
  {
    std::lock_guard lock(mu_);
    if (!reader_stopped_) {
      parked_.push_back(sub);
      batch.swap(parked_);
    }
  }
  if (batch.empty()) {
    natsSubscription_Destroy(sub);
    return;
  }
  // Not connected (a reconnect may take long): park at once rather than wait out the flush,
  // so closing subscriptions during an outage (shutdown) does not stall.
  if (natsConnection_Status(nc_) != NATS_CONN_STATUS_CONNECTED ||
      natsConnection_FlushTimeout(nc_, kFlushMs) != NATS_OK) {
    std::lock_guard lock(mu_);
    if (!reader_stopped_) {
      parked_.insert(parked_.end(), batch.begin(), batch.end());
      return;
    }
  }
  for (natsSubscription* x : batch) natsSubscription_Destroy(x);
}

void SubscriptionRetirer::ReaderStopped() {
  std::vector<natsSubscription*> free;
  {
    std::lock_guard lock(mu_);
    reader_stopped_ = true;
    free.swap(parked_);
  }
  for (natsSubscription* x : free) natsSubscription_Destroy(x);
}

}  // namespace wisp::bus::internal
