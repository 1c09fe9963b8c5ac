#include "byte_source.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
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
  bool done = false;  // the reader has stopped (end of stream or error)
  bool stop = false;  // the consumer is gone
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
      auto got = ReadFull(inner, buf, chunk);
      std::unique_lock lock(mu);
      if (!got.ok() || *got == 0) {
        free.push_back(index);
        if (!got.ok()) error = got.status();
        break;
      }
      holders[index] = hasher ? 2 : 1;
      ready.push_back({index, *got});
      cv.notify_all();
      if (hasher) {
        lock.unlock();
        // In read order, so the digest covers the bytes as served.
        hasher->Submit(buf, *got, [this, index] {
          std::lock_guard l(mu);
          Release(index);
        });
        lock.lock();
      }
      if (*got < chunk) break;  // ReadFull stops short only at the end
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
  for (const auto& f : s.ready) s.Release(f.index);
  s.ready.clear();
  s.cv.wait(lock, [&] { return s.free.size() == s.buffers.size(); });
}

absl::StatusOr<size_t> PrefetchSource::Read(uint8_t* buf, size_t n) {
  State& s = *state_;
  std::unique_lock lock(s.mu);
  s.cv.wait(lock, [&] { return !s.ready.empty() || s.done; });
  if (s.ready.empty()) {
    if (!s.error.ok()) return s.error;
    return 0;
  }
  const State::Filled front = s.ready.front();
  const uint8_t* data = s.buffers[front.index].get() + s.front_pos;
  size_t take = std::min(n, front.size - s.front_pos);
  // The reader never touches a chunk in `ready`, and `buffers` only grows under the lock (the
  // unique_ptrs move, the chunks do not): copy without holding the lock.
  lock.unlock();
  std::memcpy(buf, data, take);
  lock.lock();
  s.front_pos += take;
  if (s.front_pos == front.size) {
    s.ready.pop_front();
    s.front_pos = 0;
    s.Release(front.index);
  }
  return take;
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
