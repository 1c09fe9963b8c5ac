// TLS for the HTTP server: OpenSSL reads and writes the connection's socket itself.
//
// asio's ssl::stream (and Beast's ssl_stream over it) puts a memory BIO pair between OpenSSL and
// the socket, and layers a composed operation per record over the socket's own: every request
// then goes through four nested asynchronous operations, each copying its executor and counting
// work. At the admission benchmark's peak that machinery cost more CPU than TLS itself. Here the
// socket is non-blocking and OpenSSL owns its file descriptor, as in nginx: the synchronous
// read_some and write_some do one SSL_read or SSL_write and report `would_block` with the
// direction OpenSSL waits for (blocked_on), so the server can parse and answer whatever is ready
// and wait on the socket only when nothing is. The asynchronous operations, for the paths that
// use Beast's composed reads (streaming uploads, the TLS handshake), retry the same calls after
// waiting on the socket. Timeouts are the caller's: cancelling the socket ends a pending wait.
#pragma once

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>

#include <cerrno>

#include <utility>  // before boost/asio: Boost 1.74 awaitable.hpp uses std::exchange under C++20
#include <algorithm>
#include <string>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>

namespace wisp::http::detail {

// A socket BIO that sends with MSG_NOSIGNAL: OpenSSL's own socket BIO writes with write(2), and
// a peer gone away would raise SIGPIPE in a process that has not ignored it.
BIO* NewSocketBio(int fd);

template <typename NextLayer>
class TlsStream {
 public:
  using next_layer_type = NextLayer;
  using executor_type = typename NextLayer::executor_type;

  // Takes over `next`'s socket (made non-blocking) for a server-side TLS session on `ctx`.
  // ok() is false when OpenSSL could not allocate the session.
  TlsStream(NextLayer next, boost::asio::ssl::context& ctx)
      : next_(std::move(next)), ssl_(SSL_new(ctx.native_handle())) {
    boost::beast::error_code ignored;
    next_.socket().non_blocking(true, ignored);
    if (ssl_ == nullptr) return;
    SSL_set_mode(ssl_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    // Without read-ahead OpenSSL reads each record's 5-byte header, then its body: two recv calls
    // per record. With it, what the socket holds comes in one.
    SSL_set_read_ahead(ssl_, 1);
    SSL_set_accept_state(ssl_);
    BIO* bio = NewSocketBio(static_cast<int>(next_.socket().native_handle()));
    if (bio == nullptr) {
      SSL_free(ssl_);
      ssl_ = nullptr;
      return;
    }
    SSL_set_bio(ssl_, bio, bio);
  }
  TlsStream(TlsStream&& other) noexcept
      : next_(std::move(other.next_)),
        ssl_(std::exchange(other.ssl_, nullptr)),
        blocked_on_(other.blocked_on_) {}
  TlsStream& operator=(TlsStream&&) = delete;
  TlsStream(const TlsStream&) = delete;
  ~TlsStream() {
    if (ssl_ != nullptr) SSL_free(ssl_);
  }

  bool ok() const { return ssl_ != nullptr; }
  executor_type get_executor() noexcept { return next_.get_executor(); }
  NextLayer& next_layer() noexcept { return next_; }
  const NextLayer& next_layer() const noexcept { return next_; }
  // What the last operation that reported would_block waits for.
  boost::asio::socket_base::wait_type blocked_on() const { return blocked_on_; }

  // One non-blocking server handshake step; would_block until it completes.
  void handshake(boost::beast::error_code& ec) {
    Call(ec, [this](size_t*) { return SSL_do_handshake(ssl_); });
  }

  template <typename MutableBuffers>
  size_t read_some(const MutableBuffers& buffers, boost::beast::error_code& ec) {
    for (auto it = boost::asio::buffer_sequence_begin(buffers);
         it != boost::asio::buffer_sequence_end(buffers); ++it) {
      const boost::asio::mutable_buffer b = *it;
      if (b.size() == 0) continue;
      return Call(ec, [&](size_t* n) { return SSL_read_ex(ssl_, b.data(), b.size(), n); });
    }
    ec = {};
    return 0;
  }
  template <typename MutableBuffers>
  size_t read_some(const MutableBuffers& buffers) {
    return OrThrow([&](boost::beast::error_code& ec) { return read_some(buffers, ec); });
  }

  // Writes at most one buffer's worth (up to 64 KiB, gathered into one piece so that a response's
  // header and body leave in one TLS record).
  template <typename ConstBuffers>
  size_t write_some(const ConstBuffers& buffers, boost::beast::error_code& ec) {
    const size_t total = boost::beast::buffer_bytes(buffers);
    if (total == 0) {
      ec = {};
      return 0;
    }
    const void* data = nullptr;
    size_t size = 0;
    const boost::asio::const_buffer first = *boost::asio::buffer_sequence_begin(buffers);
    if (first.size() == total || first.size() >= kMaxWrite) {
      data = first.data();
      size = std::min(first.size(), kMaxWrite);
    } else {
      size = std::min(total, kMaxWrite);
      scratch_.resize(size);
      boost::asio::buffer_copy(boost::asio::buffer(scratch_), buffers, size);
      data = scratch_.data();
    }
    return Call(ec, [&](size_t* n) { return SSL_write_ex(ssl_, data, size, n); });
  }
  template <typename ConstBuffers>
  size_t write_some(const ConstBuffers& buffers) {
    return OrThrow([&](boost::beast::error_code& ec) { return write_some(buffers, ec); });
  }

  template <typename MutableBuffers, typename Handler>
  auto async_read_some(const MutableBuffers& buffers, Handler&& handler) {
    return boost::asio::async_compose<Handler, void(boost::beast::error_code, size_t)>(
        Retry<true>(
            [this, buffers](boost::beast::error_code& ec) { return read_some(buffers, ec); }),
        handler, next_.socket());
  }
  template <typename ConstBuffers, typename Handler>
  auto async_write_some(const ConstBuffers& buffers, Handler&& handler) {
    return boost::asio::async_compose<Handler, void(boost::beast::error_code, size_t)>(
        Retry<true>(
            [this, buffers](boost::beast::error_code& ec) { return write_some(buffers, ec); }),
        handler, next_.socket());
  }
  template <typename Handler>
  auto async_handshake(boost::asio::ssl::stream_base::handshake_type, Handler&& handler) {
    return boost::asio::async_compose<Handler, void(boost::beast::error_code)>(
        Retry<false>([this](boost::beast::error_code& ec) {
          handshake(ec);
          return size_t{0};
        }),
        handler, next_.socket());
  }

 private:
  static constexpr size_t kMaxWrite = 64 * 1024;

  // The throwing form of a stream operation that reports through an error_code.
  template <typename Op>
  static size_t OrThrow(Op op) {
    boost::beast::error_code ec;
    const size_t n = op(ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }

  // One SSL_* call (`call(&bytes)`, returning 1 on success) on a clean error queue and errno, so
  // that a failure is this call's; the bytes it moved, or 0 with `ec` set.
  template <typename SslCall>
  size_t Call(boost::beast::error_code& ec, SslCall call) {
    if (ssl_ == nullptr) {
      ec = boost::asio::error::no_memory;
      return 0;
    }
    size_t n = 0;
    ERR_clear_error();
    errno = 0;
    const int r = call(&n);
    if (r == 1) {
      ec = {};
      return n;
    }
    Fail(r, ec);
    return 0;
  }

  // Turns a failed SSL_* call into the error codes asio's ssl::stream gives for the same events.
  void Fail(int r, boost::beast::error_code& ec) {
    const int saved_errno = errno;
    switch (SSL_get_error(ssl_, r)) {
      case SSL_ERROR_WANT_READ:
        blocked_on_ = boost::asio::socket_base::wait_read;
        ec = boost::asio::error::would_block;
        return;
      case SSL_ERROR_WANT_WRITE:
        blocked_on_ = boost::asio::socket_base::wait_write;
        ec = boost::asio::error::would_block;
        return;
      case SSL_ERROR_ZERO_RETURN:
        ec = boost::asio::error::eof;  // the peer's close_notify
        return;
      case SSL_ERROR_SYSCALL:
        if (ERR_peek_error() == 0) {
          // errno 0: the peer closed the TCP connection in the middle of the TLS stream.
          ec = saved_errno == 0
                   ? boost::beast::error_code(boost::asio::ssl::error::stream_truncated)
                   : boost::beast::error_code(saved_errno, boost::system::system_category());
          return;
        }
        [[fallthrough]];
      default: {
        const unsigned long e = ERR_get_error();
        ERR_clear_error();
        if (ERR_GET_REASON(e) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
          ec = boost::asio::ssl::error::stream_truncated;  // closed without close_notify
        } else {
          ec =
              boost::beast::error_code(static_cast<int>(e), boost::asio::error::get_ssl_category());
        }
      }
    }
  }

  // Tries `attempt` at once and after each wait on the socket until it stops reporting
  // would_block. A result ready on the first try is posted, never delivered from inside the
  // initiating call.
  template <bool kSized, typename Attempt>
  struct RetryOp {
    TlsStream* stream;
    Attempt attempt;
    enum { kStart, kWaiting, kPosted } state = kStart;
    boost::beast::error_code result;
    size_t n = 0;

    template <typename Self>
    void operator()(Self& self, boost::beast::error_code ec = {}) {
      if (state == kPosted) return Complete(self, result);
      if (ec) return Complete(self, ec);  // the wait failed or was cancelled
      n = attempt(ec);
      if (ec == boost::asio::error::would_block) {
        state = kWaiting;
        return stream->next_.socket().async_wait(stream->blocked_on_, std::move(self));
      }
      if (state == kStart) {
        state = kPosted;
        result = ec;
        return boost::asio::post(std::move(self));
      }
      Complete(self, ec);
    }
    template <typename Self>
    void Complete(Self& self, boost::beast::error_code ec) {
      if constexpr (kSized) {
        self.complete(ec, ec ? 0 : n);
      } else {
        self.complete(ec);
      }
    }
  };
  template <bool kSized, typename Attempt>
  RetryOp<kSized, Attempt> Retry(Attempt attempt) {
    return {this, std::move(attempt)};
  }

  NextLayer next_;
  SSL* ssl_ = nullptr;
  boost::asio::socket_base::wait_type blocked_on_ = boost::asio::socket_base::wait_read;
  std::string scratch_;
};

}  // namespace wisp::http::detail
