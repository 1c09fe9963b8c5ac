#include "upload_service.hpp"

#include <openssl/rand.h>

#include <cstring>
#include <deque>
#include <optional>
#include <filesystem>

#include "checksum.hpp"
#include "progress.hpp"
#include "volume_lock.hpp"
#include "volume_service.hpp"
#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/log/log.hpp"

namespace wisp::populator {
namespace {

namespace subjects = bus::subjects;

std::string RandomHex(size_t bytes) {
  std::vector<unsigned char> raw(bytes);
  RAND_bytes(raw.data(), static_cast<int>(raw.size()));
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : raw) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 0xf]);
  }
  return out;
}

std::string PhaseText(v1::VolumePhase phase) { return v1::VolumePhase_Name(phase); }

// The bytes between the chunk handler (producer) and the importer (consumer): at most `capacity`
// chunks queued; Push blocks while full. Either side can end it: Finish (clean end), Abort (an
// error the importer will see) or CloseReader (the importer stopped; pushes fail with its status).
class ChunkQueue final : public ByteSource {
 public:
  explicit ChunkQueue(size_t capacity) : capacity_(capacity) {}

  absl::Status Push(std::string data, std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_until(lock, deadline,
                        [&] { return queue_.size() < capacity_ || reader_closed_ || error_; })) {
      return absl::DeadlineExceededError("the volume is not taking bytes fast enough; retry");
    }
    if (reader_closed_) return reader_status_;
    if (error_) return *error_;
    queue_.push_back(std::move(data));
    cv_.notify_all();
    return absl::OkStatus();
  }
  void Finish() {
    std::lock_guard lock(mu_);
    eof_ = true;
    cv_.notify_all();
  }
  void Abort(absl::Status status) {
    std::lock_guard lock(mu_);
    if (!error_) error_ = std::move(status);
    cv_.notify_all();
  }
  void CloseReader(absl::Status status) {
    std::lock_guard lock(mu_);
    reader_closed_ = true;
    reader_status_ =
        status.ok() ? absl::FailedPreconditionError("the upload already ended") : std::move(status);
    queue_.clear();
    cv_.notify_all();
  }

  absl::StatusOr<size_t> Read(uint8_t* buf, size_t n) override {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !queue_.empty() || eof_ || error_; });
    if (error_) return *error_;
    if (queue_.empty()) return size_t{0};  // eof
    std::string& front = queue_.front();
    size_t take = std::min(n, front.size() - offset_);
    std::memcpy(buf, front.data() + offset_, take);
    offset_ += take;
    if (offset_ == front.size()) {
      queue_.pop_front();
      offset_ = 0;
      cv_.notify_all();
    }
    return take;
  }

 private:
  const size_t capacity_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  size_t offset_ = 0;
  bool eof_ = false;
  bool reader_closed_ = false;
  absl::Status reader_status_;
  std::optional<absl::Status> error_;
};

}  // namespace

struct UploadService::Session {
  explicit Session(size_t queue_chunks) : queue(queue_chunks) {}
  std::string id;
  std::string volume_id;
  ChunkQueue queue;
  std::thread thread;
  // Held from the open until RunImport ends; touched only before the thread starts and by it.
  std::optional<VolumeLock> volume_lock;
  // Guarded by UploadService::mu_.
  int64_t next_seq = 0;
  uint64_t received = 0;
  bool last_seen = false;
  std::chrono::steady_clock::time_point last_chunk;
  // Guarded by mu.
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;
  absl::StatusOr<v1::VolumeStatus> outcome = absl::UnknownError("not finished");
};

UploadService::UploadService(bus::Bus& bus, VolumeStore& store, Importer& importer,
                             PopulatorMetrics& metrics, Clock& clock, UploadServiceConfig config)
    : bus_(bus),
      store_(store),
      importer_(importer),
      metrics_(metrics),
      clock_(clock),
      config_(std::move(config)) {
  if (config_.instance_id.empty()) config_.instance_id = RandomHex(8);
  chunk_subject_ = subjects::UploadChunks(config_.node_name, config_.instance_id);
}

UploadService::~UploadService() { Stop(); }

absl::Status UploadService::Serve(bus::Service* micro) {
  WISP_RETURN_IF_ERROR(ValidateNodeName(config_.node_name, "node-name"));
  auto serve = [&](std::string name, std::string subject, std::string_view queue,
                   bus::RequestHandler handler) -> absl::Status {
    if (micro != nullptr) return micro->AddEndpoint(name, subject, queue, std::move(handler));
    WISP_ASSIGN_OR_RETURN(auto sub, bus_.Serve(subject, queue, std::move(handler)));
    subs_.push_back(std::move(sub));
    return absl::OkStatus();
  };
  WISP_RETURN_IF_ERROR(
      serve("upload-open", subjects::Node(config_.node_name, subjects::kNodeUploadOpen),
            bus::queues::kPopulator, [this](const bus::Request& r) { return HandleOpen(r); }));
  // Only this instance listens here; the queue group is a formality.
  WISP_RETURN_IF_ERROR(serve("upload-chunk", chunk_subject_, bus::queues::kPopulator,
                             [this](const bus::Request& r) { return HandleChunk(r); }));
  reaper_ = std::thread([this] { ReapLoop(); });
  return absl::OkStatus();
}

void UploadService::Stop() {
  for (auto& sub : subs_) (void)sub->Drain();
  subs_.clear();
  {
    std::lock_guard lock(mu_);
    if (stopping_ && !reaper_.joinable()) return;
    stopping_ = true;
    for (auto& [id, s] : sessions_) {
      s->queue.Abort(absl::UnavailableError("the populator is shutting down"));
    }
  }
  cv_.notify_all();
  if (reaper_.joinable()) reaper_.join();
  Reap(true);
}

size_t UploadService::active_sessions() {
  std::lock_guard lock(mu_);
  return sessions_.size();
}

bus::Reply UploadService::HandleOpen(const bus::Request& request) {
  auto req = bus::ParseBody<v1::UploadOpenRequest>(request);
  if (!req.ok()) return bus::Reply::Error(req.status());
  const std::string id = req->volume_id();
  if (auto st = ValidateVolumeId(id); !st.ok()) return bus::Reply::Error(st);
  log::ScopedRequestId rid(id);
  std::string sha;
  if (!req->sha256().empty()) {
    auto normalized = NormalizeSha256(req->sha256(), "sha256");
    if (!normalized.ok()) return bus::Reply::Error(normalized.status());
    sha = *normalized;
  }
  {
    std::lock_guard lock(mu_);
    if (stopping_) return bus::Reply::Error(absl::UnavailableError("the populator is stopping"));
  }
  // One writer of a volume at a time (volume_lock.hpp): an upload still running, here or in
  // another populator on this node, keeps the volume even when its record looks stale; taking it
  // over would let the old session's end remove the new one's bytes.
  auto exists = store_.Get(id);
  if (!exists.ok()) {
    if (absl::IsNotFound(exists.status())) {
      return bus::Reply::Error(absl::NotFoundError("volume " + id + " not found"));
    }
    return bus::Reply::Error(exists.status());
  }
  // What is no upload target here is refused below, naming why, without touching its directory.
  const v1::VolumeSpec& found = exists->first.spec();
  std::optional<VolumeLock> volume_lock;
  if (found.source().has_upload() && found.node() == config_.node_name) {
    auto taken_lock = VolumeLock::TryAcquire(config_.volume_root + "/" + id);
    if (!taken_lock.ok()) {
      if (absl::IsFailedPrecondition(taken_lock.status())) {
        return bus::Reply::Error(absl::FailedPreconditionError(
            "an upload to volume " + found.name() + " is already in progress on this node"));
      }
      return bus::Reply::Error(taken_lock.status());
    }
    volume_lock.emplace(*std::move(taken_lock));
  }
  const int64_t now = clock_.NowUnixSeconds();
  const int64_t stale =
      std::chrono::duration_cast<std::chrono::seconds>(config_.stale_after).count();
  absl::Status refused = absl::OkStatus();
  auto taken = store_.Mutate(id, [&](v1::VolumeStatus& s) {
    if (!s.spec().source().has_upload()) {
      const auto& src = s.spec().source();
      refused = absl::FailedPreconditionError("volume " + s.spec().name() + " (" + id +
                                              ") is not an upload target (its source is " +
                                              (src.has_http()    ? "http"
                                               : src.has_clone() ? "a clone"
                                                                 : "blank") +
                                              ")");
      return false;
    }
    if (s.spec().node() != config_.node_name) {
      refused = absl::FailedPreconditionError("volume " + id + " lives on node " + s.spec().node() +
                                              ", not " + config_.node_name);
      return false;
    }
    switch (s.phase()) {
      case v1::UPLOAD_READY:
      case v1::PENDING:
        break;
      case v1::UPLOAD_IN_PROGRESS:
        if (now - s.updated_unix() > stale) break;  // its uploader died: take over
        refused = absl::FailedPreconditionError("an upload to volume " + s.spec().name() +
                                                " is already in progress");
        return false;
      case v1::SUCCEEDED:
        refused = absl::FailedPreconditionError("volume " + s.spec().name() +
                                                " is already populated (phase SUCCEEDED)");
        return false;
      default:
        refused = absl::FailedPreconditionError("volume " + s.spec().name() + " is " +
                                                PhaseText(s.phase()) + ", not ready for an upload");
        return false;
    }
    s.set_phase(v1::UPLOAD_IN_PROGRESS);
    s.set_progress(kProgressUnknown);
    s.set_message("upload from " + (req->remote().empty() ? "the gateway" : req->remote()) +
                  " in progress");
    s.set_bytes_read(0);
    s.set_bytes_written(0);
    s.set_attempts(s.attempts() + 1);
    return true;
  });
  if (!taken.ok()) {
    if (taken.status().code() == absl::StatusCode::kNotFound) {
      return bus::Reply::Error(absl::NotFoundError("volume " + id + " not found"));
    }
    return bus::Reply::Error(taken.status());
  }
  if (!refused.ok()) return bus::Reply::Error(refused);

  auto session = std::make_shared<Session>(config_.queue_chunks);
  session->volume_lock = std::move(volume_lock);
  session->id = RandomHex(12);
  session->volume_id = id;
  session->last_chunk = clock_.Steady();
  if (sha.empty()) sha = taken->spec().source().sha256();
  {
    std::lock_guard lock(mu_);
    sessions_[session->id] = session;
    session->thread =
        std::thread([this, s = session.get(), volume = *taken, sha, total = req->total_bytes()] {
          RunImport(*s, volume, sha, total);
        });
  }
  SPDLOG_LOGGER_INFO(
      log::Get("upload"), "upload session {} open for volume {} ({} bytes)", session->id, id,
      req->total_bytes() >= 0 ? std::to_string(req->total_bytes()) : std::string("unknown"));
  v1::UploadOpenResponse resp;
  resp.set_session_id(session->id);
  resp.set_chunk_subject(chunk_subject_);
  resp.set_max_chunk_bytes(config_.max_chunk_bytes);
  return bus::ProtoReply(resp);
}

void UploadService::RunImport(Session& session, const v1::VolumeStatus& volume, std::string sha256,
                              int64_t total) {
  const std::string& id = volume.volume_id();
  log::ScopedRequestId rid(id);
  auto log = log::Get("upload");
  const std::string dir = config_.volume_root + "/" + id;
  const auto started = clock_.Steady();
  metrics_.jobs_in_progress.Increment();
  ImportSpec spec;
  spec.kind = SourceKind::kStream;
  spec.stream = &session.queue;
  if (total >= 0) spec.stream_size = static_cast<uint64_t>(total);
  spec.format = volume.spec().source().format();
  spec.sha256 = sha256;
  spec.capacity = static_cast<uint64_t>(volume.spec().capacity_bytes());
  spec.dir = dir;
  bool deleted = false;
  ImportMeter meter(metrics_, id, clock_, config_.status_interval);
  ProgressFn progress = [&](const ImportProgress& p) -> absl::Status {
    if (!meter.Record(p)) return absl::OkStatus();
    auto st = store_.Mutate(id, [&](v1::VolumeStatus& s) {
      if (s.phase() != v1::UPLOAD_IN_PROGRESS) {
        deleted = s.phase() == v1::DELETING;
        return false;
      }
      s.set_progress(FormatProgress(p.Ratio()));
      s.set_bytes_read(static_cast<int64_t>(p.bytes_read));
      s.set_bytes_written(static_cast<int64_t>(p.bytes_written));
      if (p.stage != "download") s.set_message("upload received; " + p.stage + " in progress");
      return true;
    });
    if (!st.ok() && st.status().code() == absl::StatusCode::kNotFound) deleted = true;
    if (deleted) return absl::CancelledError("volume was deleted during the upload");
    return absl::OkStatus();
  };
  absl::StatusOr<ImportResult> result = importer_.Run(spec, progress);
  metrics_.jobs_in_progress.Decrement();
  const double seconds = std::chrono::duration<double>(clock_.Steady() - started).count();
  absl::StatusOr<v1::VolumeStatus> outcome = absl::UnknownError("not recorded");
  if (result.ok()) {
    outcome = store_.Mutate(id, [&](v1::VolumeStatus& s) {
      s.set_phase(v1::SUCCEEDED);
      s.set_progress(kProgressDone);
      s.set_message("");
      s.set_format(result->format);
      if (!result->sha256.empty()) s.set_sha256(result->sha256);
      s.set_virtual_size(static_cast<int64_t>(result->virtual_size));
      s.set_bytes_read(static_cast<int64_t>(result->bytes_read));
      s.set_bytes_written(static_cast<int64_t>(result->bytes_written));
      return true;
    });
    if (outcome.ok()) {
      meter.Done();
      metrics_.jobs_succeeded.Increment();
      metrics_.job_duration.Observe(seconds);
      SPDLOG_LOGGER_INFO(log, "volume {} uploaded ({}, {} bytes in {:.1f}s)", id, result->format,
                         result->bytes_read, seconds);
    } else {
      // disk.img is in place but the record says otherwise: do not claim success.
      SPDLOG_LOGGER_WARN(log, "recording the upload of {}: {}", id, outcome.status().ToString());
      outcome = absl::UnavailableError("the upload completed but recording it failed: " +
                                       std::string(outcome.status().message()));
    }
  } else {
    Importer::Cleanup(dir);
    std::error_code ec;
    std::filesystem::remove(dir + "/" + kDiskImage, ec);
    const absl::Status& error = result.status();
    const std::string message =
        "upload failed: " + std::string(error.message()) + "; PUT the image again to retry";
    if (deleted) {
      std::filesystem::remove_all(dir, ec);
    } else {
      (void)store_.Mutate(id, [&](v1::VolumeStatus& s) {
        if (s.phase() != v1::UPLOAD_IN_PROGRESS) return false;
        s.set_phase(v1::UPLOAD_READY);
        s.set_progress(kProgressUnknown);
        s.set_message(message);
        return true;
      });
    }
    metrics_.jobs_failed.Increment();
    metrics_.job_duration.Observe(seconds);
    metrics_.RemoveProgress(id);
    SPDLOG_LOGGER_WARN(log, "volume {}: {}", id, message);
    outcome = error;
  }
  session.queue.CloseReader(outcome.status());
  session.volume_lock.reset();  // done writing: the next upload or job may have the volume
  {
    std::lock_guard lock(session.mu);
    session.finished = true;
    session.outcome = std::move(outcome);
  }
  session.cv.notify_all();
  cv_.notify_all();
}

bus::Reply UploadService::HandleChunk(const bus::Request& request) {
  auto req = bus::ParseBody<v1::UploadChunk>(request);
  if (!req.ok()) return bus::Reply::Error(req.status());
  std::shared_ptr<Session> session;
  {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(req->session_id());
    if (it != sessions_.end()) session = it->second;
  }
  if (!session) {
    return bus::Reply::Error(absl::NotFoundError("upload session " + req->session_id() +
                                                 " is not open on this populator (it ended)"));
  }
  auto wait_done = [&](std::chrono::steady_clock::time_point until) {
    std::unique_lock lock(session->mu);
    session->cv.wait_until(lock, until, [&] { return session->finished; });
    return session->finished;
  };
  // Leave the caller time to read the answer.
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::max(std::chrono::milliseconds(0), request.Remaining() - std::chrono::milliseconds(200));
  if (req->abort()) {
    session->queue.Abort(absl::UnavailableError(
        req->abort_reason().empty() ? "the client aborted the upload" : req->abort_reason()));
    wait_done(deadline);
    return bus::ProtoReply(v1::UploadChunkResponse());
  }
  {
    std::lock_guard lock(mu_);
    if (req->seq() != session->next_seq || session->last_seen) {
      absl::Status bad = absl::FailedPreconditionError(
          "upload chunk " + std::to_string(req->seq()) + " out of order (expected " +
          std::to_string(session->next_seq) + ")");
      session->queue.Abort(bad);
      return bus::Reply::Error(bad);
    }
    ++session->next_seq;
    session->last_chunk = clock_.Steady();
    session->last_seen = req->last();
  }
  const size_t size = req->data().size();
  if (size > 0) {
    absl::Status pushed = session->queue.Push(std::move(*req->mutable_data()), deadline);
    if (!pushed.ok()) {
      if (pushed.code() != absl::StatusCode::kDeadlineExceeded) {
        // The importer stopped: answer with what stopped it.
        wait_done(deadline);
        std::lock_guard lock(session->mu);
        if (session->finished && !session->outcome.ok()) {
          return bus::Reply::Error(session->outcome.status());
        }
      }
      return bus::Reply::Error(pushed);
    }
  }
  uint64_t received = 0;
  {
    std::lock_guard lock(mu_);
    session->received += size;
    received = session->received;
  }
  v1::UploadChunkResponse resp;
  resp.set_bytes_received(static_cast<int64_t>(received));
  if (!req->last()) return bus::ProtoReply(resp);
  session->queue.Finish();
  if (!wait_done(deadline)) {
    return bus::Reply::Error(absl::DeadlineExceededError(
        "the upload is complete but still being converted; follow the volume's status"));
  }
  std::lock_guard lock(session->mu);
  if (!session->outcome.ok()) return bus::Reply::Error(session->outcome.status());
  *resp.mutable_volume() = Sanitized(*session->outcome);
  return bus::ProtoReply(resp);
}

void UploadService::ReapLoop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, std::chrono::milliseconds(500));
    if (stopping_) break;
    const auto now = clock_.Steady();
    for (auto& [id, s] : sessions_) {
      if (!s->last_seen && now - s->last_chunk > config_.idle_timeout) {
        s->queue.Abort(absl::DeadlineExceededError(
            "no data for " +
            std::to_string(
                std::chrono::duration_cast<std::chrono::seconds>(config_.idle_timeout).count()) +
            "s after " + std::to_string(s->received) + " bytes (the client or gateway went away)"));
      }
    }
    lock.unlock();
    Reap(false);
    lock.lock();
  }
}

// Joins finished sessions. A finished session stays readable for the last chunk's answer for a
// while: it is removed once finished and either answered (last seen) or idle past the timeout.
void UploadService::Reap(bool all) {
  std::vector<std::shared_ptr<Session>> done;
  {
    std::lock_guard lock(mu_);
    const auto now = clock_.Steady();
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      bool finished;
      {
        std::lock_guard slock(it->second->mu);
        finished = it->second->finished;
      }
      const bool quiet = now - it->second->last_chunk > std::chrono::seconds(5);
      if (all || (finished && quiet)) {
        done.push_back(it->second);
        it = sessions_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& s : done) {
    if (all) s->queue.Abort(absl::UnavailableError("the populator is shutting down"));
    if (s->thread.joinable()) s->thread.join();
  }
}

}  // namespace wisp::populator
