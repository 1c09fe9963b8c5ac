#pragma once
// sha256 of the source bytes exactly as served (before decompression), and a ByteSource tap that
// feeds it and counts bytes read.
//
//   Sha256 sha;
//   HashingSource tap(body, &sha);          // pull from tap instead of body
//   ... ; if (sha.HexDigest() != want) fail;
#include <openssl/evp.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "byte_source.hpp"

namespace wisp::populator {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(const uint8_t* data, size_t n);
  // Lower-case hex; the object is finished afterwards.
  std::string HexDigest();

 private:
  EVP_MD_CTX* ctx_;
};

// Sha256 on its own thread, so hashing overlaps the download and the writes and costs wall time
// only when it is the slowest stage. Submit() queues a span that must stay valid until its `done`
// runs (on the hasher thread, in submission order, right after the span is hashed): a buffer pool
// hands a chunk to the writer and the hasher at once and takes it back when both are done.
// Update() hashes synchronously (behind whatever is queued); HexDigest() waits for everything
// submitted. The destructor finishes the queued spans (their `done` still runs) and joins.
//
//   PipelinedSha256 sha;
//   sha.Submit(chunk, n, [&pool, i] { pool.Release(i); });   // repeatedly
//   if (sha.HexDigest() != want) fail;
class PipelinedSha256 {
 public:
  PipelinedSha256();
  ~PipelinedSha256();
  PipelinedSha256(const PipelinedSha256&) = delete;
  PipelinedSha256& operator=(const PipelinedSha256&) = delete;
  void Submit(const uint8_t* data, size_t n, std::function<void()> done);
  void Update(const uint8_t* data, size_t n);
  // Lower-case hex of everything submitted; the object is finished afterwards.
  std::string HexDigest();

 private:
  struct Item {
    const uint8_t* data;
    size_t n;
    std::function<void()> done;
  };
  void Run();
  void WaitIdle();

  Sha256 sha_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool busy_ = false;  // the hasher thread is working on an item it took off the queue
  bool stop_ = false;
  std::thread thread_;
};

// A checksum from a user (StorageClass parameter, DataVolume): 64 hex digits, case-insensitive,
// optionally prefixed "sha256:". Returns the lower-case hex, or InvalidArgument naming `field`.
absl::StatusOr<std::string> NormalizeSha256(std::string_view value, std::string_view field);

class HashingSource final : public ByteSource {
 public:
  HashingSource(ByteSource& inner, Sha256* sha) : inner_(inner), sha_(sha) {}
  absl::StatusOr<size_t> Read(uint8_t* buf, size_t n) override {
    WISP_ASSIGN_OR_RETURN(size_t got, inner_.Read(buf, n));
    if (sha_ != nullptr) sha_->Update(buf, got);
    bytes_ += got;
    return got;
  }
  absl::StatusOr<std::span<const uint8_t>> ReadView(uint8_t* scratch, size_t n) override {
    WISP_ASSIGN_OR_RETURN(auto view, inner_.ReadView(scratch, n));
    if (sha_ != nullptr) sha_->Update(view.data(), view.size());
    bytes_ += view.size();
    return view;
  }
  uint64_t bytes() const { return bytes_; }

 private:
  ByteSource& inner_;
  Sha256* sha_;
  uint64_t bytes_ = 0;
};

}  // namespace wisp::populator
