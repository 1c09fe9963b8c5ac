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
  ByteSource& inner;
  size_t chunk;
  size_t depth;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::vector<uint8_t>> chunks;
  size_t front_pos = 0;
  bool done = false;  // the reader has stopped (end of stream or error)
  bool stop = false;  // the consumer is gone
  absl::Status error = absl::OkStatus();
  std::thread reader;

  State(ByteSource& in, size_t c, size_t d) : inner(in), chunk(c), depth(d) {}

  void Run() {
    for (;;) {
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return stop || chunks.size() < depth; });
        if (stop) break;
      }
      std::vector<uint8_t> buf(chunk);
      auto got = ReadFull(inner, buf.data(), buf.size());
      std::lock_guard lock(mu);
      if (!got.ok()) {
        error = got.status();
        break;
      }
      if (*got == 0) break;
      buf.resize(*got);
      chunks.push_back(std::move(buf));
      cv.notify_all();
      if (*got < chunk) break;  // ReadFull stops short only at the end
    }
    std::lock_guard lock(mu);
    done = true;
    cv.notify_all();
  }
};

PrefetchSource::PrefetchSource(ByteSource& inner, size_t chunk, size_t depth)
    : state_(std::make_unique<State>(inner, chunk, depth)) {
  state_->reader = std::thread([s = state_.get()] { s->Run(); });
}

PrefetchSource::~PrefetchSource() {
  {
    std::lock_guard lock(state_->mu);
    state_->stop = true;
  }
  state_->cv.notify_all();
  state_->reader.join();
}

absl::StatusOr<size_t> PrefetchSource::Read(uint8_t* buf, size_t n) {
  State& s = *state_;
  std::unique_lock lock(s.mu);
  s.cv.wait(lock, [&] { return !s.chunks.empty() || s.done; });
  if (s.chunks.empty()) {
    if (!s.error.ok()) return s.error;
    return 0;
  }
  auto& front = s.chunks.front();
  size_t take = std::min(n, front.size() - s.front_pos);
  std::memcpy(buf, front.data() + s.front_pos, take);
  s.front_pos += take;
  if (s.front_pos == front.size()) {
    s.chunks.pop_front();
    s.front_pos = 0;
    s.cv.notify_all();
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
