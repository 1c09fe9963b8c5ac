#pragma once
// ByteSource: the pull interface every stage of the import pipeline speaks (HTTP body,
// decompressors, hashing tap, local file). Pulling keeps backpressure simple: the writer asks for
// bytes when it can take them, so memory stays at one buffer per stage.
//
// Contract: Read() fills up to `n` bytes and returns how many; 0 means a clean end of stream.
// A stream that ends early (a truncated body, a cut compressed stream) is an error, never 0.
//
//   HashingSource tap(http_body, &sha);
//   for (;;) { WISP_ASSIGN_OR_RETURN(size_t got, tap.Read(buf, sizeof buf)); if (got == 0) break; }
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "wisp/status/status.hpp"

namespace wisp::populator {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual absl::StatusOr<size_t> Read(uint8_t* buf, size_t n) = 0;
  // Like Read, but may hand out a view of the source's own memory instead of copying into
  // `scratch` (which it fills otherwise); the view stays valid until the next call on this source.
  // Empty means a clean end of stream.
  virtual absl::StatusOr<std::span<const uint8_t>> ReadView(uint8_t* scratch, size_t n) {
    WISP_ASSIGN_OR_RETURN(size_t got, Read(scratch, n));
    return std::span<const uint8_t>(scratch, got);
  }
};
using ByteSourcePtr = std::unique_ptr<ByteSource>;

// Reads until `n` bytes or end of stream; returns the count (less than n only at the end).
absl::StatusOr<size_t> ReadFull(ByteSource& source, uint8_t* buf, size_t n);

// Serves `prefix` first, then the rest of `inner`: lets format detection peek without losing bytes.
class PrefixedSource final : public ByteSource {
 public:
  PrefixedSource(std::vector<uint8_t> prefix, ByteSource& inner)
      : prefix_(std::move(prefix)), inner_(inner) {}
  absl::StatusOr<size_t> Read(uint8_t* buf, size_t n) override;
  absl::StatusOr<std::span<const uint8_t>> ReadView(uint8_t* scratch, size_t n) override;

 private:
  std::vector<uint8_t> prefix_;
  size_t pos_ = 0;
  ByteSource& inner_;
};

class PipelinedSha256;

// Reads `inner` ahead on its own thread into up to `depth` chunks of `chunk` bytes, so the network
// and the decompress/write work overlap. Errors and the end of `inner` arrive in order, after all
// the bytes read before them. Destruction stops the reader (after its current read returns).
// The chunks come from a pool allocated once (no per-chunk allocation, zeroing or page faults).
// With `hasher`, every chunk read is also handed to it, in order, without a copy: the chunk goes
// back to the pool once both the consumer and the hasher are done with it. The hasher must outlive
// this source; the destructor waits until it has released every chunk.
class PrefetchSource final : public ByteSource {
 public:
  PrefetchSource(ByteSource& inner, size_t chunk = 1 << 20, size_t depth = 8,
                 PipelinedSha256* hasher = nullptr);
  ~PrefetchSource() override;
  absl::StatusOr<size_t> Read(uint8_t* buf, size_t n) override;
  // A view into the chunk pool (no copy).
  absl::StatusOr<std::span<const uint8_t>> ReadView(uint8_t* scratch, size_t n) override;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Reads a local file (clone sources, qcow2 scratch files, tests).
class FileSource final : public ByteSource {
 public:
  static absl::StatusOr<std::unique_ptr<FileSource>> Open(const std::string& path);
  ~FileSource() override;
  absl::StatusOr<size_t> Read(uint8_t* buf, size_t n) override;

 private:
  explicit FileSource(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  std::string path_;
};

}  // namespace wisp::populator
