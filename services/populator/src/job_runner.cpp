#include "job_runner.hpp"

#include <condition_variable>
#include <filesystem>
#include <mutex>

#include "checksum.hpp"
#include "progress.hpp"
#include "volume_lock.hpp"
#include "volume_service.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/log/log.hpp"

namespace wisp::populator {
namespace {

namespace subjects = bus::subjects;

// Sends InProgress every `interval` from its own thread until destroyed.
class Heartbeat {
 public:
  Heartbeat(bus::JsMessage& msg, std::mutex& msg_mu, std::chrono::milliseconds interval)
      : thread_([this, &msg, &msg_mu, interval] {
          std::unique_lock lock(mu_);
          while (!done_) {
            if (cv_.wait_for(lock, interval, [this] { return done_; })) break;
            std::lock_guard msg_lock(msg_mu);
            (void)msg.InProgress();
          }
        }) {}
  ~Heartbeat() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

absl::StatusOr<ImportSpec> ToImportSpec(const v1::VolumeSpec& spec, const std::string& root,
                                        const std::string& dir, std::chrono::milliseconds timeout) {
  ImportSpec out;
  out.capacity = static_cast<uint64_t>(spec.capacity_bytes());
  out.dir = dir;
  const auto& src = spec.source();
  out.format = src.format();
  out.sha256 = src.sha256();
  switch (src.kind_case()) {
    case v1::PopulationSource::kHttp:
      out.kind = SourceKind::kHttp;
      out.url = src.http().url();
      out.http.ca_pem = src.http().ca_pem();
      out.http.connect_timeout = timeout;
      out.http.read_timeout = timeout;
      for (const auto& [k, v] : src.http().headers()) out.http.headers[k] = v;
      break;
    case v1::PopulationSource::kBlank:
      out.kind = SourceKind::kBlank;
      break;
    case v1::PopulationSource::kClone:
      WISP_RETURN_IF_ERROR(ValidateVolumeId(src.clone().volume_id()));
      out.kind = SourceKind::kClone;
      out.clone_from = root + "/" + src.clone().volume_id() + "/" + kDiskImage;
      break;
    default:
      return absl::InvalidArgumentError("job has no importable source");
  }
  return out;
}

}  // namespace

std::chrono::milliseconds Backoff(const JobRunnerConfig& config, uint64_t attempt) {
  auto d = config.backoff_base;
  for (uint64_t i = 1; i < attempt && d < config.backoff_max; ++i) d *= 2;
  return std::min(d, config.backoff_max);
}

JobRunner::JobRunner(bus::JetStream& js, VolumeStore& store, Importer& importer,
                     PopulatorMetrics& metrics, Clock& clock, JobRunnerConfig config)
    : js_(js),
      store_(store),
      importer_(importer),
      metrics_(metrics),
      clock_(clock),
      config_(std::move(config)) {}

JobRunner::~JobRunner() { Stop(); }

bus::StreamConfig JobRunner::StreamConfig() {
  bus::StreamConfig c;
  c.name = std::string(bus::streams::kPopulateJobs);
  c.subjects = {std::string(subjects::kJobsPopulatePrefix) + ".>"};
  c.work_queue = true;
  return c;
}

bus::ConsumerConfig JobRunner::ConsumerConfig() const {
  bus::ConsumerConfig c;
  c.durable = std::string(bus::streams::kPopulateDurable) + "-" + config_.node_name;
  // Durable names may not hold '.', '*', '>' or whitespace; node names may hold dots.
  for (char& ch : c.durable) {
    if (ch == '.') ch = '_';
  }
  c.filter_subject = subjects::PopulateJobs(config_.node_name);
  c.ack_wait = config_.ack_wait;
  c.max_deliver = -1;  // attempts are counted by us, so a failure always ends in FAILED
  return c;
}

absl::StatusOr<bus::PullConsumerPtr> JobRunner::Subscribe() {
  return js_.PullSubscribe(bus::streams::kPopulateJobs, ConsumerConfig());
}

absl::StatusOr<bool> JobRunner::RunOnce(bus::PullConsumer& consumer,
                                        std::chrono::milliseconds wait) {
  WISP_ASSIGN_OR_RETURN(auto msgs, consumer.Fetch(1, wait));
  if (msgs.empty()) return false;
  for (auto& m : msgs) Process(*m);
  return true;
}

void JobRunner::Finish(bus::JsMessage& msg, const std::string& id, const ImportResult& result,
                       bool external, std::chrono::steady_clock::time_point started) {
  auto done = store_.Mutate(id, [&](v1::VolumeStatus& s) {
    s.set_phase(external ? v1::PENDING_POPULATION : v1::SUCCEEDED);
    s.set_progress(kProgressDone);
    s.set_message("");
    s.set_node_lost(false);  // done after all, if this node was thought lost meanwhile
    s.set_format(result.format.empty() ? s.format() : result.format);
    if (!result.sha256.empty()) s.set_sha256(result.sha256);
    if (result.virtual_size > 0) s.set_virtual_size(static_cast<int64_t>(result.virtual_size));
    if (result.bytes_read > 0 || s.bytes_read() == 0) {
      s.set_bytes_read(static_cast<int64_t>(result.resumed_from + result.bytes_read));
    }
    if (result.bytes_written > 0) s.set_bytes_written(static_cast<int64_t>(result.bytes_written));
    return true;
  });
  if (!done.ok()) {
    // disk.img is in place; the redelivered job will find it and record SUCCEEDED.
    SPDLOG_LOGGER_WARN(log::Get("jobs"), "recording success of {}: {}", id,
                       done.status().ToString());
    (void)msg.Nak(config_.backoff_base);
    return;
  }
  metrics_.Progress(id).Set(1.0);
  metrics_.jobs_succeeded.Increment();
  metrics_.job_duration.Observe(std::chrono::duration<double>(clock_.Steady() - started).count());
  (void)msg.Ack();
  SPDLOG_LOGGER_INFO(
      log::Get("jobs"), "volume {} populated ({}, {} bytes read{})", id, result.format,
      result.bytes_read,
      result.resumed_from ? ", resumed at " + std::to_string(result.resumed_from) : "");
}

void JobRunner::Process(bus::JsMessage& msg) {
  auto log = log::Get("jobs");
  std::mutex msg_mu;
  v1::PopulateJob job;
  if (!job.ParseFromString(msg.msg().data) || !ValidateVolumeId(job.volume_id()).ok()) {
    SPDLOG_LOGGER_ERROR(log, "dropping an unreadable job on {}", msg.msg().subject);
    (void)msg.Term();
    return;
  }
  const std::string id = job.volume_id();
  log::ScopedRequestId rid(id);
  const std::string dir = config_.volume_root + "/" + id;
  auto current = store_.Get(id);
  if (!current.ok()) {
    if (current.status().code() == absl::StatusCode::kNotFound) {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
      (void)msg.Ack();  // the volume was deleted before its job ran
    } else {
      (void)msg.Nak(config_.backoff_base);
    }
    return;
  }
  v1::VolumePhase phase = current->first.phase();
  if (IsTerminal(phase) || phase == v1::DELETING) {
    // Failed elsewhere while this node did not answer (LostNodeSweeper): what an earlier attempt
    // left here is of no use any more.
    if (phase == v1::FAILED && current->first.node_lost()) Importer::Cleanup(dir);
    (void)msg.Ack();
    return;
  }
  // One import of a volume at a time on this node, whichever worker or populator process holds
  // its job. JetStream hands a job out again when its heartbeats stop arriving, and they can be
  // lost while the first delivery still runs (NATS failing over); two imports writing one
  // disk.img.part make a disk that matches neither (seen in FaultsWispTest: SUCCEEDED, the
  // source's sha256 recorded, disk.img different). The delivery that finds the volume locked
  // hands the job back, and the holder's ack ends it.
  auto volume_lock = VolumeLock::TryAcquire(dir);
  if (!volume_lock.ok()) {
    if (absl::IsFailedPrecondition(volume_lock.status())) {
      SPDLOG_LOGGER_INFO(log,
                         "volume {} is being populated by another worker on this node; its job "
                         "comes back in {} s",
                         id, config_.ack_wait.count());
      (void)msg.Nak(config_.ack_wait);
    } else {
      SPDLOG_LOGGER_WARN(log, "{}", std::string(volume_lock.status().message()));
      (void)msg.Nak(config_.backoff_base);
    }
    return;
  }
  const auto attempt = msg.delivery_count();
  const bool external = job.spec().external_population();
  const auto started = clock_.Steady();
  if (std::filesystem::exists(dir + "/" + kDiskImage)) {
    // A previous attempt completed and verified the import but died before recording it.
    ImportResult result;
    result.format = current->first.format();
    Finish(msg, id, result, external, started);
    return;
  }
  auto spec = ToImportSpec(job.spec(), config_.volume_root, dir, config_.http_timeout);
  auto started_status = store_.Mutate(id, [&](v1::VolumeStatus& s) {
    s.set_phase(v1::IMPORT_IN_PROGRESS);
    s.set_attempts(static_cast<int32_t>(attempt));
    return true;
  });
  if (!started_status.ok()) {
    (void)msg.Nak(Backoff(config_, attempt));
    return;
  }

  metrics_.jobs_in_progress.Increment();
  absl::StatusOr<ImportResult> result = absl::UnknownError("not run");
  bool deleted = false;
  bool lost = false;  // failed elsewhere while this node did not answer (LostNodeSweeper)
  if (!spec.ok()) {
    result = spec.status();
  } else {
    Heartbeat heartbeat(msg, msg_mu, config_.heartbeat_interval);
    ImportMeter meter(metrics_, id, clock_, config_.status_interval);
    ProgressFn progress = [&](const ImportProgress& p) -> absl::Status {
      if (stopping_) return absl::CancelledError("populator is shutting down");
      if (!meter.Record(p)) return absl::OkStatus();
      auto st = store_.Mutate(id, [&](v1::VolumeStatus& s) {
        if (s.phase() == v1::DELETING) {
          deleted = true;
          return false;
        }
        if (s.phase() == v1::FAILED && s.node_lost()) {
          lost = true;
          return false;
        }
        s.set_progress(FormatProgress(p.Ratio()));
        s.set_bytes_read(static_cast<int64_t>(p.bytes_read));
        s.set_bytes_written(static_cast<int64_t>(p.bytes_written));
        return true;
      });
      if (!st.ok() && st.status().code() == absl::StatusCode::kNotFound) deleted = true;
      if (deleted) return absl::CancelledError("volume was deleted");
      if (lost) return absl::CancelledError("volume was failed while this node was lost");
      return absl::OkStatus();
    };
    result = importer_.Run(*spec, progress);
  }
  metrics_.jobs_in_progress.Decrement();
  std::lock_guard lock(msg_mu);

  if (result.ok()) {
    Finish(msg, id, *result, external, started);
    return;
  }
  const absl::Status& error = result.status();
  if (deleted) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    (void)msg.Ack();
    return;
  }
  if (lost) {
    // Its record says FAILED (node lost) and is left so: the partial bytes go, the job ends.
    SPDLOG_LOGGER_WARN(log,
                       "import of {} stopped: the volume was failed while this node did not "
                       "answer",
                       id);
    Importer::Cleanup(dir);
    (void)msg.Ack();
    return;
  }
  if (error.code() == absl::StatusCode::kCancelled && stopping_) {
    SPDLOG_LOGGER_INFO(log, "import of {} interrupted by shutdown; handing the job back", id);
    (void)msg.Nak(std::chrono::milliseconds(0));
    return;
  }
  const bool last =
      config_.max_attempts > 0 && attempt >= static_cast<uint64_t>(config_.max_attempts);
  if (IsPermanent(error) || last) {
    std::string message(error.message());
    if (!IsPermanent(error)) message += " (gave up after " + std::to_string(attempt) + " attempts)";
    Importer::Cleanup(dir);
    auto st = store_.Mutate(id, [&](v1::VolumeStatus& s) {
      if (s.phase() == v1::DELETING) return false;
      s.set_phase(v1::FAILED);
      s.set_message(message);
      return true;
    });
    if (!st.ok() && st.status().code() != absl::StatusCode::kNotFound) {
      (void)msg.Nak(Backoff(config_, attempt));  // could not record the failure: try again
      return;
    }
    SPDLOG_LOGGER_WARN(log, "volume {} failed: {}", id, message);
    metrics_.jobs_failed.Increment();
    metrics_.job_duration.Observe(std::chrono::duration<double>(clock_.Steady() - started).count());
    metrics_.RemoveProgress(id);
    (void)msg.Term();
    return;
  }
  auto delay = Backoff(config_, attempt);
  std::string message = "attempt " + std::to_string(attempt) + " of " +
                        std::to_string(config_.max_attempts) + " failed, retrying in " +
                        std::to_string(delay.count() / 1000.0).substr(0, 4) +
                        "s: " + std::string(error.message());
  (void)store_.Mutate(id, [&](v1::VolumeStatus& s) {
    if (s.phase() == v1::DELETING) return false;
    s.set_phase(v1::IMPORT_SCHEDULED);
    s.set_message(message);
    return true;
  });
  SPDLOG_LOGGER_INFO(log, "volume {}: {}", id, message);
  metrics_.jobs_retried.Increment();
  (void)msg.Nak(delay);
}

absl::Status JobRunner::StartWorkers(int n) {
  std::vector<bus::PullConsumerPtr> consumers;
  for (int i = 0; i < n; ++i) {
    WISP_ASSIGN_OR_RETURN(auto c, Subscribe());
    consumers.push_back(std::move(c));
  }
  for (auto& c : consumers) {
    workers_.emplace_back([this, consumer = std::shared_ptr<bus::PullConsumer>(std::move(c))] {
      while (!stopping_) {
        auto ran = RunOnce(*consumer, config_.fetch_wait);
        if (!ran.ok() && !stopping_) {
          SPDLOG_LOGGER_WARN(log::Get("jobs"), "fetching jobs: {}", ran.status().ToString());
          std::this_thread::sleep_for(config_.fetch_wait);
        }
      }
    });
  }
  return absl::OkStatus();
}

void JobRunner::Stop() {
  stopping_ = true;
  for (auto& t : workers_) {
    if (t.joinable()) t.join();
  }
  workers_.clear();
}

}  // namespace wisp::populator
