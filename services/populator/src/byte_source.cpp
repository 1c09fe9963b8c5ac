#include "byte_source.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "checksum.hpp"

namespace wisp::populator {

absl::StatusOr<size_t> ReadFull(ByteSource& source, uint8_t* buf, size_t n) {
  size_t total = 0;
  while (total < n) {
    WISP_ASSIGN_OR_RETURN(size_t got, source.Read(buf + total, n - total));
    if (got == 0) break;
    total += got;
  }
  return total;
}

absl::StatusOr<size_t> PrefixedSource::Read(uint8_t* buf, size_t n) {
  if (pos_ < prefix_.size()) {
    size_t take = std::min(n, prefix_.size() - pos_);
    std::memcpy(buf, prefix_.data() + pos_, take);
    pos_ += take;
    return take;
  }
  return inner_.Read(buf, n);
}

absl::StatusOr<std::span<const uint8_t>> PrefixedSource::ReadView(uint8_t* scratch, size_t n) {
  if (pos_ < prefix_.size()) {
    size_t take = std::min(n, prefix_.size() - pos_);
    pos_ += take;
    return std::span<const uint8_t>(prefix_.data() + pos_ - take, take);
  }
  return inner_.ReadView(scratch, n);
}

struct PrefetchSource::State {
  struct Filled {
    size_t index;
    size_t size;
  };
  ByteSource& inner;
  const size_t chunk;
  const size_t depth;
  PipelinedSha256* const hasher;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::unique_ptr<uint8_t[]>> buffers;  // grows up to `depth`, never shrinks
  std::vector<size_t> free;                         // indexes of buffers nobody holds
  std::vector<int> holders;                         // per buffer: consumer and/or hasher
  std::deque<Filled> ready;                         // read, in order, for the consumer
  size_t front_pos = 0;
  std::optional<size_t> held;  // a chunk popped off `ready` whose view the consumer may still use
  bool done = false;           // the reader has stopped (end of stream or error)
  bool stop = false;           // the consumer is gone
  absl::Status error = absl::OkStatus();
  std::thread reader;

  State(ByteSource& in, size_t c, size_t d, PipelinedSha256* h)
      : inner(in), chunk(c), depth(std::max<size_t>(d, 1)), hasher(h) {}

  // With `mu` held.
  void Release(size_t index) {
    if (--holders[index] == 0) {
      free.push_back(index);
      cv.notify_all();
    }
  }

  // With `mu` held: the consumer is done with the view it was handed last.
  void ReleaseHeld() {
    if (held) Release(*held);
    held.reset();
  }

  // With `lock` held: the next bytes for the consumer (up to n), empty at the end; the chunk
  // they are in stays out of the pool until the consumer's next call.
  absl::StatusOr<std::span<const uint8_t>> Next(std::unique_lock<std::mutex>& lock, size_t n) {
    ReleaseHeld();
    cv.wait(lock, [&] { return !ready.empty() || done; });
    if (ready.empty()) {
      if (!error.ok()) return error;
      return std::span<const uint8_t>();
    }
    const Filled front = ready.front();
    // The reader never touches a chunk in `ready` or held, and `buffers` only grows under the
    // lock (the unique_ptrs move, the chunks do not).
    const uint8_t* data = buffers[front.index].get() + front_pos;
    size_t take = std::min(n, front.size - front_pos);
    front_pos += take;
    if (front_pos == front.size) {
      ready.pop_front();
      front_pos = 0;
      held = front.index;
    }
    return std::span<const uint8_t>(data, take);
  }

  void Run() {
    for (;;) {
      size_t index = 0;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return stop || !free.empty() || buffers.size() < depth; });
        if (stop) break;
        if (free.empty()) {
          // Not zeroed: ReadFull overwrites what the consumer gets to see.
          buffers.push_back(std::unique_ptr<uint8_t[]>(new uint8_t[chunk]));
          holders.push_back(0);
          index = buffers.size() - 1;
        } else {
          index = free.back();
          free.pop_back();
        }
      }
      uint8_t* buf = buffers[index].get();
      // Fill the chunk; on an error, the bytes before it still go out first.
      size_t got = 0;
      absl::Status status = absl::OkStatus();
      while (got < chunk) {
        auto n = inner.Read(buf + got, chunk - got);
        if (!n.ok()) status = n.status();
        if (!n.ok() || *n == 0) break;
        got += *n;
      }
      std::unique_lock lock(mu);
      if (!status.ok()) error = status;
      if (got == 0) {
        free.push_back(index);
        break;
      }
      holders[index] = hasher ? 2 : 1;
      ready.push_back({index, got});
      cv.notify_all();
      if (hasher) {
        lock.unlock();
        // In read order, so the digest covers the bytes as served.
        hasher->Submit(buf, got, [this, index] {
          std::lock_guard l(mu);
          Release(index);
        });
        lock.lock();
      }
      if (got < chunk) break;  // short only at the end or an error
    }
    std::lock_guard lock(mu);
    done = true;
    cv.notify_all();
  }
};

PrefetchSource::PrefetchSource(ByteSource& inner, size_t chunk, size_t depth,
                               PipelinedSha256* hasher)
    : state_(std::make_unique<State>(inner, chunk, depth, hasher)) {
  state_->reader = std::thread([s = state_.get()] { s->Run(); });
}

PrefetchSource::~PrefetchSource() {
  State& s = *state_;
  {
    std::lock_guard lock(s.mu);
    s.stop = true;
  }
  s.cv.notify_all();
  s.reader.join();
  // The consumer lets go of what it never read; the hasher may still hold chunks it was given.
  std::unique_lock lock(s.mu);
  s.ReleaseHeld();
  for (const auto& f : s.ready) s.Release(f.index);
  s.ready.clear();
  s.cv.wait(lock, [&] { return s.free.size() == s.buffers.size(); });
}

absl::StatusOr<size_t> PrefetchSource::Read(uint8_t* buf, size_t n) {
  State& s = *state_;
  std::unique_lock lock(s.mu);
  WISP_ASSIGN_OR_RETURN(auto view, s.Next(lock, n));
  lock.unlock();
  if (!view.empty()) std::memcpy(buf, view.data(), view.size());  // held until the next call
  return view.size();
}

absl::StatusOr<std::span<const uint8_t>> PrefetchSource::ReadView(uint8_t*, size_t n) {
  std::unique_lock lock(state_->mu);
  return state_->Next(lock, n);
}

absl::StatusOr<std::unique_ptr<FileSource>> FileSource::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    std::string msg = "opening " + path + ": " + std::strerror(err);
    return err == ENOENT ? absl::NotFoundError(msg) : absl::InternalError(msg);
  }
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  return std::unique_ptr<FileSource>(new FileSource(fd, path));
}

FileSource::~FileSource() { ::close(fd_); }

absl::StatusOr<size_t> FileSource::Read(uint8_t* buf, size_t n) {
  for (;;) {
    ssize_t got = ::read(fd_, buf, n);
    if (got >= 0) return static_cast<size_t>(got);
    if (errno == EINTR) continue;
    return absl::InternalError("reading " + path_ + ": " + std::strerror(errno));
  }
}

}  // namespace wisp::populator
