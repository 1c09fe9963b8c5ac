#pragma once
// UploadService: the populator's side of PUT /v1/upload/<volume> (CDI's upload server, adapted to
// the bus). The gateway checks the upload token and streams the body here in chunks; the bytes
// go through the same Importer pipeline as an HTTP import (format detection, gz/xz/zst, qcow2 via
// qemu-img, sparse writes, capacity and sha256 checks, disk.img.part renamed into place only once
// complete and verified).
//
// Protocol (messages in proto/wisp/v1/volume.proto):
//   - open: subjects::Node(node, "upload.open"), queue group wisp-populator, so any instance on the
//     volume's node may take it. It moves the volume UPLOAD_READY -> UPLOAD_IN_PROGRESS (compare-
//     and-set: one upload per volume; a record left UPLOAD_IN_PROGRESS by a dead instance is taken
//     over once it has not been updated for stale_after) and answers this instance's chunk
//     subject, subjects::UploadChunks(node, instance).
//   - chunks: one request per chunk, in order (seq 0, 1, ...). The reply is the ack: it comes once
//     the chunk is queued for the importer, which holds at most queue_chunks chunks, so a slow disk
//     slows the client down (back-pressure) and memory stays bounded. The reply to the last chunk
//     comes once disk.img is in place and carries the volume (SUCCEEDED).
//   - abort (the client went away), a chunk out of order, or no chunk for idle_timeout: the
//     upload is discarded, the partial file removed, and the volume goes back to UPLOAD_READY with
//     a message saying what happened ("upload failed: ...; PUT the image again"); never SUCCEEDED
//     with partial data. A bad image (unknown format, larger than the volume, checksum mismatch)
//     ends the same way, and the chunk that found it is answered with the importer's error.
//   - Progress, bytes and the message go to KV and wisp.v1.events.volume.<id> as for imports.
//
// Errors: NotFound (no such volume / session), FailedPrecondition (not an upload target, already
// populated, upload already in progress, chunk out of order), InvalidArgument (bad request).
//
//   UploadService uploads(bus, store, importer, metrics, clock, {.node_name = n, .volume_root =
//   r}); WISP_RETURN_IF_ERROR(uploads.Serve(micro));
//   ... uploads.Stop();
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "importer.hpp"
#include "populator_metrics.hpp"
#include "volume_store.hpp"
#include "wisp/bus/bus.hpp"
#include "wisp/bus/service.hpp"
#include "wisp/status/clock.hpp"
#include "wisp/v1/volume.pb.h"

namespace wisp::populator {

struct UploadServiceConfig {
  std::string node_name;
  std::string volume_root;
  std::string instance_id;  // "" = random; names this instance's chunk subject
  std::chrono::milliseconds idle_timeout{std::chrono::seconds(60)};
  std::chrono::milliseconds stale_after{std::chrono::minutes(2)};
  std::chrono::milliseconds status_interval{std::chrono::seconds(1)};
  size_t queue_chunks = 8;
  int max_chunk_bytes = 512 * 1024;  // under NATS' default 1 MiB max_payload, with room
};

class UploadService {
 public:
  UploadService(bus::Bus& bus, VolumeStore& store, Importer& importer, PopulatorMetrics& metrics,
                Clock& clock, UploadServiceConfig config);
  ~UploadService();

  // Serves the open and chunk subjects (as endpoints of `micro` when given).
  absl::Status Serve(bus::Service* micro = nullptr);
  // Stops serving, aborts running uploads ("populator is shutting down") and joins their threads.
  void Stop();

  bus::Reply HandleOpen(const bus::Request& request);
  bus::Reply HandleChunk(const bus::Request& request);

  const std::string& chunk_subject() const { return chunk_subject_; }
  size_t active_sessions();

 private:
  struct Session;
  void RunImport(Session& session, const v1::VolumeStatus& volume, std::string sha256,
                 int64_t total);
  void ReapLoop();
  void Reap(bool all);

  bus::Bus& bus_;
  VolumeStore& store_;
  Importer& importer_;
  PopulatorMetrics& metrics_;
  Clock& clock_;
  UploadServiceConfig config_;
  std::string chunk_subject_;
  std::vector<bus::SubscriptionPtr> subs_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::map<std::string, std::shared_ptr<Session>> sessions_;
  std::thread reaper_;
};

}  // namespace wisp::populator
