// NatsBus's JetStream: streams, durable pull consumers, publish with ack.
#include "nats_internal.hpp"
#include "wisp/bus/replicas.hpp"

namespace wisp::bus::internal {
namespace {

void LogRaised(const std::string& stream, int had, int now) {
  SPDLOG_LOGGER_INFO(Logger(), "raised JetStream stream {} from {} to {} replicas in place", stream,
                     std::max(had, 1), now);
}

// A single nats-server refuses a new stream with more than one replica, but accepts an update of
// an existing one to more (nats-server 2.9 keeps one copy and reports the number asked for). Its
// stream info names no cluster: refuse the same way it refuses a new stream.
absl::Status CheckClustered(const jsStreamInfo* si, const std::string& stream, int wanted) {
  const bool clustered =
      si->Cluster != nullptr && si->Cluster->Name != nullptr && *si->Cluster->Name != '\0';
  if (wanted <= 1 || clustered) return absl::OkStatus();
  return ReplicaPlacementError("stream " + stream + " asks for " + std::to_string(wanted) +
                               " replicas: replicas > 1 not supported in non-clustered mode "
                               "(the NATS server is not part of a JetStream cluster)");
}

class NatsJsMessage final : public JsMessage {
 public:
  NatsJsMessage(MsgPtr msg, jsCtx* js) : raw_(std::move(msg)), js_(js) {
    msg_ = ToMessage(raw_.get());
    jsMsgMetaData* meta = nullptr;
    if (natsMsg_GetMetaData(&meta, raw_.get()) == NATS_OK && meta != nullptr) {
      seq_ = meta->Sequence.Stream;
      deliveries_ = meta->NumDelivered;
      jsMsgMetaData_Destroy(meta);
    }
  }
  const Message& msg() const override { return msg_; }
  uint64_t stream_sequence() const override { return seq_; }
  uint64_t delivery_count() const override { return deliveries_; }

  absl::Status Ack() override {
    jsErrCode jerr = static_cast<jsErrCode>(0);
    return FromJs(natsMsg_AckSync(raw_.get(), nullptr, &jerr), jerr, "ack of " + msg_.subject);
  }
  absl::Status Nak(std::chrono::milliseconds delay) override {
    natsStatus s = delay.count() > 0 ? natsMsg_NakWithDelay(raw_.get(), Ms(delay), nullptr)
                                     : natsMsg_Nak(raw_.get(), nullptr);
    return FromNats(s, "nak of " + msg_.subject);
  }
  absl::Status InProgress() override {
    return FromNats(natsMsg_InProgress(raw_.get(), nullptr), "in-progress of " + msg_.subject);
  }
  absl::Status Term() override {
    return FromNats(natsMsg_Term(raw_.get(), nullptr), "term of " + msg_.subject);
  }

 private:
  MsgPtr raw_;
  [[maybe_unused]] jsCtx* js_;
  Message msg_;
  uint64_t seq_ = 0;
  uint64_t deliveries_ = 0;
};

class NatsPullConsumer final : public PullConsumer {
 public:
  NatsPullConsumer(natsSubscription* sub, jsCtx* js, std::shared_ptr<SubscriptionRetirer> retirer,
                   std::string name)
      : sub_(sub), js_(js), retirer_(std::move(retirer)), name_(std::move(name)) {}
  ~NatsPullConsumer() override {
    // Keep the durable consumer on the server: Destroy without Unsubscribe would leave the
    // subscription registered; Unsubscribe on a bound durable does not delete the consumer.
    retirer_->Retire(sub_);
  }

  absl::StatusOr<std::vector<JsMessagePtr>> Fetch(int batch,
                                                  std::chrono::milliseconds timeout) override {
    if (batch <= 0) return absl::InvalidArgumentError("Fetch: batch must be positive");
    natsMsgList list{nullptr, 0};
    jsErrCode jerr = static_cast<jsErrCode>(0);
    natsStatus s =
        natsSubscription_Fetch(&list, sub_, batch, std::max<int64_t>(Ms(timeout), 1), &jerr);
    std::vector<JsMessagePtr> out;
    for (int i = 0; i < list.Count; ++i) {
      if (list.Msgs[i] == nullptr) continue;
      out.push_back(std::make_unique<NatsJsMessage>(MsgPtr(list.Msgs[i]), js_));
      list.Msgs[i] = nullptr;
    }
    natsMsgList_Destroy(&list);
    if (s == NATS_TIMEOUT || (s == NATS_OK)) return out;
    if (!out.empty()) return out;
    return FromJs(s, jerr, "fetch from " + name_);
  }

 private:
  natsSubscription* sub_;
  jsCtx* js_;
  std::shared_ptr<SubscriptionRetirer> retirer_;
  std::string name_;
};

class NatsJetStream final : public JetStream {
 public:
  explicit NatsJetStream(NatsBus::Impl* impl) : impl_(impl) {}

  absl::Status EnsureStream(const StreamConfig& config) override {
    if (config.name.empty()) return absl::InvalidArgumentError("stream name is empty");
    if (config.subjects.empty()) {
      return absl::InvalidArgumentError("stream " + config.name + ": subjects is empty");
    }
    jsStreamConfig sc;
    jsStreamConfig_Init(&sc);
    std::vector<const char*> subjects;
    for (const auto& s : config.subjects) subjects.push_back(s.c_str());
    sc.Name = config.name.c_str();
    sc.Subjects = subjects.data();
    sc.SubjectsLen = static_cast<int>(subjects.size());
    sc.Retention = config.work_queue ? js_WorkQueuePolicy : js_LimitsPolicy;
    sc.Storage = js_FileStorage;
    sc.Replicas = config.replicas;
    sc.MaxAge = Ns(config.max_age);
    if (config.max_msg_size > 0) sc.MaxMsgSize = static_cast<int32_t>(config.max_msg_size);
    sc.Duplicates = Ns(config.duplicate_window);
    jsStreamInfo* si = nullptr;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    natsStatus s = js_AddStream(&si, impl_->js, &sc, nullptr, &jerr);
    if (s != NATS_OK && jerr == JSStreamNameExistErr) {
      // It exists with another configuration: update it to this one, except that its replicas
      // are only ever raised (PlanReplicas), so a service started with a smaller
      // jetstream-replicas does not take copies away.
      jsStreamInfo* current = nullptr;
      jerr = static_cast<jsErrCode>(0);
      s = js_GetStreamInfo(&current, impl_->js, sc.Name, nullptr, &jerr);
      if (s != NATS_OK) return FromJs(s, jerr, "reading stream " + config.name);
      const int had = static_cast<int>(current->Config->Replicas);
      absl::Status clustered = CheckClustered(current, config.name, config.replicas);
      jsStreamInfo_Destroy(current);
      WISP_RETURN_IF_ERROR(clustered);
      const ReplicaPlan plan = PlanReplicas(had, config.replicas);
      sc.Replicas = plan.target;
      jerr = static_cast<jsErrCode>(0);
      s = js_UpdateStream(&si, impl_->js, &sc, nullptr, &jerr);
      if (s == NATS_OK && plan.raise) LogRaised(config.name, had, plan.target);
    }
    if (si != nullptr) jsStreamInfo_Destroy(si);
    return FromJs(s, jerr, "ensuring stream " + config.name);
  }

  absl::StatusOr<uint64_t> Publish(std::string_view subject, std::string_view data,
                                   const Headers& headers, std::string_view msg_id) override {
    WISP_ASSIGN_OR_RETURN(MsgPtr msg, BuildMsg(subject, nullptr, data, headers));
    jsPubOptions po;
    jsPubOptions_Init(&po);
    const std::string id(msg_id);
    if (!id.empty()) po.MsgId = id.c_str();
    po.MaxWait = Ms(impl_->options.jetstream_timeout);
    jsPubAck* pa = nullptr;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    natsStatus s = js_PublishMsg(&pa, impl_->js, msg.get(), &po, &jerr);
    if (s != NATS_OK) {
      if (pa != nullptr) jsPubAck_Destroy(pa);
      return FromJs(s, jerr, "JetStream publish on " + std::string(subject));
    }
    const uint64_t seq = pa->Sequence;
    jsPubAck_Destroy(pa);
    return seq;
  }

  absl::StatusOr<PullConsumerPtr> PullSubscribe(std::string_view stream,
                                                const ConsumerConfig& config) override {
    if (config.durable.empty()) return absl::InvalidArgumentError("consumer durable name is empty");
    const std::string stream_name(stream);
    jsConsumerConfig cc;
    jsConsumerConfig_Init(&cc);
    cc.Durable = config.durable.c_str();
    cc.AckPolicy = js_AckExplicit;
    cc.DeliverPolicy = js_DeliverAll;
    cc.AckWait = Ns(config.ack_wait);
    cc.MaxDeliver = config.max_deliver;
    cc.MaxAckPending = config.max_ack_pending;
    if (!config.filter_subject.empty()) cc.FilterSubject = config.filter_subject.c_str();
    jsConsumerInfo* ci = nullptr;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    // Create it, or bring an existing durable to this configuration.
    natsStatus s =
        js_GetConsumerInfo(&ci, impl_->js, stream_name.c_str(), cc.Durable, nullptr, &jerr);
    if (ci != nullptr) jsConsumerInfo_Destroy(ci), ci = nullptr;
    if (s == NATS_NOT_FOUND || jerr == JSConsumerNotFoundErr) {
      jerr = static_cast<jsErrCode>(0);
      s = js_AddConsumer(&ci, impl_->js, stream_name.c_str(), &cc, nullptr, &jerr);
    } else if (s == NATS_OK) {
      s = js_UpdateConsumer(&ci, impl_->js, stream_name.c_str(), &cc, nullptr, &jerr);
    }
    if (ci != nullptr) jsConsumerInfo_Destroy(ci);
    WISP_RETURN_IF_ERROR(
        FromJs(s, jerr, "ensuring consumer " + config.durable + " on stream " + stream_name));

    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = stream_name.c_str();
    so.Consumer = config.durable.c_str();
    so.ManualAck = true;
    natsSubscription* sub = nullptr;
    jerr = static_cast<jsErrCode>(0);
    const char* subject = config.filter_subject.empty() ? nullptr : config.filter_subject.c_str();
    s = js_PullSubscribe(&sub, impl_->js, subject, config.durable.c_str(), nullptr, &so, &jerr);
    WISP_RETURN_IF_ERROR(FromJs(s, jerr, "binding consumer " + config.durable));
    return PullConsumerPtr(std::make_unique<NatsPullConsumer>(sub, impl_->js, impl_->retirer,
                                                              stream_name + "/" + config.durable));
  }

 private:
  NatsBus::Impl* impl_;
};

}  // namespace

absl::Status RaiseReplicas(jsCtx* js, const std::string& stream, int wanted) {
  jsStreamInfo* si = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  natsStatus s = js_GetStreamInfo(&si, js, stream.c_str(), nullptr, &jerr);
  if (s != NATS_OK) return FromJs(s, jerr, "reading stream " + stream);
  if (absl::Status clustered = CheckClustered(si, stream, wanted); !clustered.ok()) {
    jsStreamInfo_Destroy(si);
    return clustered;
  }
  const int had = static_cast<int>(si->Config->Replicas);
  const ReplicaPlan plan = PlanReplicas(had, wanted);
  if (plan.raise) {
    // The stream's own configuration with only the replicas changed: an update replaces the whole
    // configuration, so nothing else may differ.
    si->Config->Replicas = plan.target;
    jsStreamInfo* updated = nullptr;
    jerr = static_cast<jsErrCode>(0);
    s = js_UpdateStream(&updated, js, si->Config, nullptr, &jerr);
    int now = plan.target;
    if (updated != nullptr) {
      now = static_cast<int>(updated->Config->Replicas);
      jsStreamInfo_Destroy(updated);
    }
    if (s == NATS_OK && now < plan.target) {
      // A server that accepted the update but kept fewer copies cannot place them either.
      jsStreamInfo_Destroy(si);
      return ReplicaPlacementError("raising the replicas of stream " + stream + " to " +
                                   std::to_string(plan.target) + ": the server kept " +
                                   std::to_string(std::max(now, 1)));
    }
    if (s == NATS_OK) LogRaised(stream, had, plan.target);
  }
  jsStreamInfo_Destroy(si);
  return FromJs(s, jerr, "raising the replicas of stream " + stream);
}

std::unique_ptr<JetStream> NewJetStream(NatsBus::Impl& impl) {
  return std::make_unique<NatsJetStream>(&impl);
}

}  // namespace wisp::bus::internal

namespace wisp::bus {

JetStream& NatsBus::Js() { return *impl_->jetstream; }

}  // namespace wisp::bus
