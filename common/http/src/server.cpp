// Boost.Beast HTTP/1.1 server behind wisp::http::Server.
//
// Threading: `threads` I/O threads, each running an io_context of its own; the acceptor hands
// each new connection to the next one in turn, and everything that connection does (TLS, reads,
// writes, timers) runs on that one thread, so a connection needs no strand and an I/O thread
// never wakes another to pass work on. (One io_context shared by all threads, with a strand per
// connection, cost the admission benchmark's gateway about a fifth more CPU per request: the
// scheduler's futex hand-offs between its threads.) An asynchronous handler runs on the
// connection's I/O thread and must not block. A synchronous handler, which may block (a bus round
// trip), runs on a pool of `threads` worker threads instead, so it never stalls the other
// connections of its I/O thread. Every handler answers through a Responder (a synchronous one as
// it returns); the Responder posts the write onto the connection's io_context, so an asynchronous
// handler may answer from any thread. Each connection is a Session kept alive by
// shared_from_this across its callbacks and, while its handler has not answered, by the server's
// table of waiting connections.
//
// Reading and writing: sockets are non-blocking, and a connection reads and parses (or writes)
// synchronously until the socket reports would_block, then waits for readiness once. A request
// that arrived whole is read, and an answer the socket takes whole is written, without any
// asynchronous operation. TLS is OpenSSL on the socket itself (tls_stream.hpp); Beast's
// ssl_stream layered four composed operations and a memory BIO pair over each read, which cost
// more CPU at the admission benchmark's peak than the cryptography. Timeouts are one lazily
// moved timer per connection (Arm). Streaming routes keep Beast's asynchronous reads, over the
// same streams.
#include <sys/stat.h>
#include <unistd.h>

#include <utility>  // before boost/asio: Boost 1.74 awaitable.hpp uses std::exchange under C++20
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <filesystem>
#include <list>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "tls_stream.hpp"
#include "wisp/http/server.hpp"
#include "wisp/log/log.hpp"

namespace wisp::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace ssl = boost::asio::ssl;
using tcp = asio::ip::tcp;
using local = asio::local::stream_protocol;
// Streams on their io_context's own executor type rather than the type-erased any_io_executor:
// every asynchronous step copies and queries its executor, which type erasure made about 5% of
// the gateway's CPU at the admission peak. A connection lives on one io_context (one thread).
using Executor = asio::io_context::executor_type;
using TcpSocket = tcp::socket::rebind_executor<Executor>::other;
using LocalSocket = local::socket::rebind_executor<Executor>::other;
using TcpStream = beast::basic_stream<tcp, Executor>;
using LocalStream = beast::basic_stream<local, Executor>;
using TlsStream = detail::TlsStream<TcpStream>;
using Timer = asio::steady_timer::rebind_executor<Executor>::other;
using Clock = std::chrono::steady_clock;

struct Route {
  std::string method;
  std::string path;
  bool prefix = false;
  AsyncHandler handler;  // runs on the connection's I/O thread
  Handler sync;          // or this, on the worker pool
};

struct StreamRoute {
  std::string method;
  std::string prefix;
  StreamHandler handler;
  StreamOptions options;
};
// What Stop() asks of every live connection (see Core::live).
class Connection {
 public:
  virtual ~Connection() = default;
  // From any thread: closes the connection on its own thread if it is waiting for a request that
  // has not begun to arrive; else it finishes the request it has and closes after the answer.
  virtual void CloseIfIdle() = 0;
};

// Shared by the server and its sessions; outlives both through shared_ptr.
struct Core {
  ServerOptions options;
  std::vector<Route> routes;
  std::vector<StreamRoute> stream_routes;
  std::shared_ptr<spdlog::logger> logger;
  std::atomic<int> sessions{0};
  std::atomic<bool> stopping{false};
  // Every connection, so Stop() can close the idle ones at once: a client that keeps a connection
  // alive between requests (kube-apiserver does) would otherwise hold Stop() for its whole grace.
  std::mutex live_mu;
  std::unordered_map<Connection*, std::weak_ptr<Connection>> live;
  std::unique_ptr<asio::thread_pool> sync_pool;  // synchronous handlers; from Start() on
  // Connections waiting for their handler's answer, owned here rather than by the Responder: a
  // connection must not outlive the io_context its socket belongs to, so Stop() drops them while
  // the io_context still exists, and a Responder called after that finds nothing to answer.
  std::mutex io_mu;
  bool io_stopped = false;
  uint64_t next_waiting = 0;
  std::unordered_map<uint64_t, std::shared_ptr<void>> waiting;

  // Threads running streaming handlers; finished ones are joined when the next one starts.
  struct StreamThread {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::mutex stream_mu;
  std::list<StreamThread> stream_threads;
  std::atomic<int> streams_running{0};

  const StreamRoute* FindStream(std::string_view method, std::string_view path) const {
    for (const auto& r : stream_routes) {
      if (r.method == method && path.substr(0, r.prefix.size()) == r.prefix) return &r;
    }
    return nullptr;
  }

  // Runs `fn` on a thread of its own; false when `limit` handlers already run.
  bool StartStreamThread(int limit, std::function<void()> fn) {
    std::lock_guard lock(stream_mu);
    for (auto it = stream_threads.begin(); it != stream_threads.end();) {
      if (*it->done) {
        it->thread.join();
        it = stream_threads.erase(it);
      } else {
        ++it;
      }
    }
    if (streams_running >= limit) return false;
    ++streams_running;
    auto done = std::make_shared<std::atomic<bool>>(false);
    stream_threads.push_back({std::thread([this, fn = std::move(fn), done] {
                                fn();
                                --streams_running;
                                *done = true;
                              }),
                              done});
    return true;
  }

  void JoinStreamThreads() {
    std::list<StreamThread> all;
    {
      std::lock_guard lock(stream_mu);
      all.swap(stream_threads);
    }
    for (auto& t : all) t.thread.join();
  }

  // Parks a connection until Take(id); 0 (and nothing parked) once stopped.
  uint64_t Park(std::shared_ptr<void> session) {
    std::lock_guard lock(io_mu);
    if (io_stopped) return 0;
    const uint64_t id = ++next_waiting;
    waiting.emplace(id, std::move(session));
    return id;
  }

  void Dispatch(Request req, Responder done) const {
    bool path_known = false;
    for (const auto& r : stream_routes) {
      if (req.path.rfind(r.prefix, 0) == 0) path_known = true;
    }
    const Route* best = nullptr;
    for (const auto& r : routes) {
      const bool match = r.prefix ? req.path.rfind(r.path, 0) == 0 : req.path == r.path;
      if (!match) continue;
      path_known = true;
      if (r.method == req.method && (best == nullptr || r.path.size() > best->path.size()))
        best = &r;
    }
    if (best == nullptr) {
      return done(path_known
                      ? Response::Error(405, "method " + req.method + " not allowed on " + req.path)
                      : Response::Error(404, "no handler for " + req.path));
    }
    if (best->sync) {
      // Routes are fixed before Start(), so `best` outlives the server's pool.
      return asio::post(*sync_pool, [this, best, req = std::move(req), done = std::move(done)] {
        Call(*best, req, done);
      });
    }
    Call(*best, req, done);
  }

  void Call(const Route& route, const Request& req, const Responder& done) const {
    try {
      if (route.sync) {
        done(route.sync(req));
      } else {
        route.handler(req, done);
      }
    } catch (const std::exception& e) {
      SPDLOG_LOGGER_ERROR(logger, "{} {}: handler threw: {}", req.method, req.path, e.what());
      done(Response::Error(500, "internal error"));  // ignored if the handler had answered
    }
  }
};

bhttp::response<bhttp::string_body> ToBeast(Response r, unsigned version, bool keep_alive) {
  bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(r.status), version};
  res.set(bhttp::field::server, "wisp");
  res.set(bhttp::field::content_type, r.content_type);
  for (auto& [k, v] : r.headers) res.set(k, v);
  res.keep_alive(keep_alive);
  res.body() = std::move(r.body);
  res.prepare_payload();
  return res;
}

template <typename Stream>
class Session : public std::enable_shared_from_this<Session<Stream>>,
                public BodyReader,
                public Connection {
 public:
  // `keep` holds whatever the stream refers to (the TLS context) for the session's lifetime, so a
  // certificate reload never frees a context a live connection still uses.
  Session(Stream stream, std::shared_ptr<Core> core, std::string remote,
          std::shared_ptr<void> keep = nullptr)
      : keep_(std::move(keep)),
        stream_(std::move(stream)),
        timer_(stream_.get_executor()),
        core_(std::move(core)),
        remote_(std::move(remote)) {
    ++core_->sessions;
  }
  ~Session() override {
    {
      std::lock_guard lock(core_->live_mu);
      core_->live.erase(this);
    }
    --core_->sessions;
  }

  void Run() {
    {
      std::lock_guard lock(core_->live_mu);
      core_->live.emplace(this, this->shared_from_this());
    }
    if constexpr (kTls) {
      if (!stream_.ok()) {
        char why[256];
        ERR_error_string_n(ERR_get_error(), why, sizeof(why));
        SPDLOG_LOGGER_ERROR(core_->logger, "{}: could not set up TLS: {}", remote_, why);
        return Close();
      }
      Arm(core_->options.read_timeout);
      stream_.async_handshake(ssl::stream_base::server,
                              [self = this->shared_from_this()](beast::error_code ec) {
                                if (!ec) self->Read();
                              });
    } else {
      beast::error_code ignored;
      beast::get_lowest_layer(stream_).socket().non_blocking(true, ignored);
      Read();
    }
  }

 private:
  static constexpr bool kTls = std::is_same_v<Stream, TlsStream>;

  // Timeouts: one timer per connection, moved lazily. Arm() only sets the deadline unless the
  // timer would fire after it; a timer that fires before the deadline in force waits again. So a
  // request costs a clock read, not timer-queue work. At the deadline the socket's pending
  // operations are cancelled, and Timed() turns their operation_aborted into a timeout.
  void Arm(Clock::duration d) {
    deadline_ = Clock::now() + d;
    if (!timer_waiting_ || timer_.expiry() > deadline_) WaitTimer();
  }
  void Disarm() { deadline_ = Clock::time_point::max(); }
  void WaitTimer() {
    timer_waiting_ = true;
    timer_.expires_at(deadline_);  // a wait it replaces ends with operation_aborted and returns
    timer_.async_wait([weak = this->weak_from_this()](beast::error_code ec) {
      if (ec) return;
      if (auto self = weak.lock()) self->OnTimer();
    });
  }
  void OnTimer() {
    timer_waiting_ = false;
    if (deadline_ == Clock::time_point::max()) return;
    if (Clock::now() < deadline_) return WaitTimer();
    timed_out_ = true;
    beast::error_code ignored;
    beast::get_lowest_layer(stream_).socket().cancel(ignored);
  }
  beast::error_code Timed(beast::error_code ec) const {
    return timed_out_ && ec == asio::error::operation_aborted ? beast::error::timeout : ec;
  }
  void StopTimer() {
    Disarm();
    if (timer_waiting_) timer_.cancel();
    timer_waiting_ = false;
  }

  // What a non-blocking read or write that reported would_block waits for.
  asio::socket_base::wait_type Blocked(bool reading) const {
    if constexpr (kTls) {
      return stream_.blocked_on();
    } else {
      return reading ? asio::socket_base::wait_read : asio::socket_base::wait_write;
    }
  }

  void CloseIfIdle() override {
    asio::post(stream_.get_executor(), [self = this->shared_from_this()] {
      // Nothing of a next request has reached the HTTP layer: close, as an idle timeout would.
      // (A request whose first bytes are still inside a TLS record races this as it would race
      // the idle timeout.)
      const bool started = self->buffer_.size() > 0 ||
                           (self->parser_ && self->parser_->got_some()) ||
                           (self->header_parser_ && self->header_parser_->got_some());
      if (self->idle_ && !started) {
        beast::error_code ignored;
        beast::get_lowest_layer(self->stream_).socket().cancel(ignored);
      }
    });
  }

  void Read() {
    if (core_->stopping) return Close();
    idle_ = true;
    if (!core_->stream_routes.empty()) return ReadHeader();
    parser_.emplace();
    parser_->body_limit(core_->options.max_body_bytes);
    parser_->header_limit(64 * 1024);
    // The first request of a connection gets read_timeout; later ones may idle longer.
    Arm(first_ ? core_->options.read_timeout : core_->options.idle_timeout);
    first_ = false;
    ReadMore();
  }

  // Parses what the socket has, then waits for more only if the request is still incomplete: a
  // request that arrived whole (or was already buffered behind the previous one) is read without
  // any asynchronous operation. The socket is non-blocking, so the synchronous read stops at
  // would_block with its progress in buffer_ and parser_.
  void ReadMore() {
    beast::error_code ec;
    bhttp::read(stream_, buffer_, *parser_, ec);
    if (ec == asio::error::would_block) {
      beast::get_lowest_layer(stream_).socket().async_wait(
          Blocked(true), [self = this->shared_from_this()](beast::error_code ec) {
            if (ec) return self->OnRead(self->Timed(ec));
            self->ReadMore();
          });
      return;
    }
    OnRead(ec);
  }

  void OnRead(beast::error_code ec) {
    idle_ = false;
    if (ec == bhttp::error::body_limit) {
      return Write(
          Response::Error(413, "request body larger than " +
                                   std::to_string(core_->options.max_body_bytes) + " bytes"),
          11, false);
    }
    if (ec == bhttp::error::header_limit) {
      return Write(Response::Error(431, "request headers larger than 64 KiB"), 11, false);
    }
    if (ec == bhttp::error::end_of_stream || ec == beast::error::timeout ||
        ec == asio::error::operation_aborted || ec == asio::error::connection_reset ||
        ec == asio::error::eof) {
      return Close();
    }
    if (ec) {
      // A malformed request line or header: answer once and close.
      return Write(Response::Error(400, "malformed HTTP request: " + ec.message()), 11, false);
    }
    auto beast_req = parser_->release();
    Request req;
    req.method = std::string(beast_req.method_string());
    req.target = std::string(beast_req.target());
    auto q = req.target.find('?');
    req.path = req.target.substr(0, q);
    if (q != std::string::npos) req.query = req.target.substr(q + 1);
    for (const auto& field : beast_req) {
      std::string name(field.name_string());
      for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      req.headers[name] = std::string(field.value());
    }
    req.body = std::move(beast_req.body());
    req.remote = remote_;
    const bool keep_alive = beast_req.keep_alive() && !core_->stopping;
    // The handler may take long; lift the socket timer so a slow handler does not cut the
    // connection.
    Disarm();
    const unsigned version = beast_req.version();
    const uint64_t id = core_->Park(this->shared_from_this());
    if (id == 0) return Close();
    core_->Dispatch(
        std::move(req), Responder([core = core_, id, version, keep_alive](Response r) {
          // Queue the write on the connection's io_context, unless the server has stopped (then
          // the connection is gone). Posted, not dispatched, even from its own thread: the lock
          // must not be held while the write starts (TLS encrypts the response right there), and
          // it must be held until the connection is handed to its io_context, which Stop() then
          // drains.
          std::lock_guard lock(core->io_mu);
          auto node = core->waiting.extract(id);
          if (node.empty()) return;
          auto self = std::static_pointer_cast<Session>(std::move(node.mapped()));
          auto* executor_owner = self.get();
          asio::post(executor_owner->stream_.get_executor(),
                     [self = std::move(self), version, keep_alive, r = std::move(r)]() mutable {
                       self->Write(std::move(r), version, keep_alive);
                     });
        }));
  }

  // With streaming routes: the headers first, then either the whole body into parser_ (the
  // synchronous path) or a streaming handler on its own thread.
  void ReadHeader() {
    header_parser_.emplace();
    header_parser_->header_limit(64 * 1024);
    // Beast checks Content-Length against the limit when the header completes; the route decides
    // the limit, so the header parser allows anything and OnHeader checks.
    header_parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    Arm(first_ ? core_->options.read_timeout : core_->options.idle_timeout);
    first_ = false;
    bhttp::async_read_header(stream_, buffer_, *header_parser_,
                             [self = this->shared_from_this()](beast::error_code ec, size_t) {
                               self->OnHeader(self->Timed(ec));
                             });
  }

  void OnHeader(beast::error_code ec) {
    idle_ = false;
    if (ec) return OnRead(ec);  // the same answers as a failed whole read
    const auto& h = header_parser_->get();
    const std::string_view target(h.target().data(), h.target().size());
    const std::string_view path = target.substr(0, target.find('?'));
    const StreamRoute* route = core_->FindStream(
        std::string_view(h.method_string().data(), h.method_string().size()), path);
    if (route == nullptr) {
      if (auto len = header_parser_->content_length();
          len && *len > core_->options.max_body_bytes) {
        return OnRead(bhttp::error::body_limit);
      }
      parser_.emplace(std::move(*header_parser_));
      header_parser_.reset();
      parser_->body_limit(core_->options.max_body_bytes);  // chunked bodies: counted as they come
      bhttp::async_read(stream_, buffer_, *parser_,
                        [self = this->shared_from_this()](beast::error_code ec, size_t) {
                          self->OnRead(self->Timed(ec));
                        });
      return;
    }
    StartStream(*route);
  }

  void StartStream(const StreamRoute& route) {
    const auto& h = header_parser_->get();
    Request req;
    req.method = std::string(h.method_string());
    req.target = std::string(h.target());
    auto q = req.target.find('?');
    req.path = req.target.substr(0, q);
    if (q != std::string::npos) req.query = req.target.substr(q + 1);
    for (const auto& field : h) {
      std::string name(field.name_string());
      for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      req.headers[name] = std::string(field.value());
    }
    req.remote = remote_;
    const unsigned version = h.version();
    const bool keep_alive = h.keep_alive();
    {
      std::string expect(req.Header("expect"));
      for (auto& c : expect) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      expect_continue_ = expect == "100-continue";
    }
    body_parser_.emplace(std::move(*header_parser_));
    header_parser_.reset();
    body_parser_->body_limit(route.options.max_body_bytes);
    body_limit_ = route.options.max_body_bytes;
    if (auto len = body_parser_->content_length(); len && *len > route.options.max_body_bytes) {
      linger_ = true;
      return Write(Response::Error(413, "request body of " + std::to_string(*len) +
                                            " bytes is larger than " +
                                            std::to_string(route.options.max_body_bytes)),
                   version, false);
    }
    Disarm();
    auto self = this->shared_from_this();
    const bool started = core_->StartStreamThread(
        route.options.max_concurrent, [self, req = std::move(req), &route, version, keep_alive] {
          Response r;
          try {
            r = route.handler(req, *self);
          } catch (const std::exception& e) {
            SPDLOG_LOGGER_ERROR(self->core_->logger, "{} {}: handler threw: {}", req.method,
                                req.path, e.what());
            r = Response::Error(500, "internal error");
          }
          // A body left unread cannot be skipped reliably: answer, then close.
          const bool keep = keep_alive && !self->failed_ && self->body_parser_->is_done();
          // Unread body bytes at close would make the kernel reset the connection, and the
          // client could lose the answer: half-close and discard them for a moment instead.
          const bool linger = !self->failed_ && !self->body_parser_->is_done();
          asio::post(self->stream_.get_executor(),
                     [self, r = std::move(r), version, keep, linger]() mutable {
                       self->linger_ = linger;
                       self->Write(std::move(r), version, keep);
                     });
        });
    if (!started) {
      linger_ = true;
      Write(Response::Error(503, "too many uploads in progress; retry later"), version, false);
    }
  }

 public:
  // BodyReader, called from the streaming handler's thread. Each read runs on the connection's
  // strand into a buffer the read owns, so a read abandoned at shutdown writes into nothing freed.
  absl::StatusOr<size_t> Read(char* out, size_t n) override {
    if (failed_) return *failed_;
    if (n == 0) return size_t{0};
    while (!body_parser_->is_done()) {
      struct Op {
        std::mutex mu;
        std::condition_variable cv;
        bool done = false;
        beast::error_code ec;
        size_t got = 0;
        size_t filled = 0;  // on the strand only
        std::vector<char> buf;
      };
      auto op = std::make_shared<Op>();
      op->buf.resize(n);
      auto self = this->shared_from_this();
      const bool send_continue = std::exchange(expect_continue_, false);
      asio::post(stream_.get_executor(), [self, op, send_continue] {
        auto finish = [op](beast::error_code ec, size_t got) {
          std::lock_guard lock(op->mu);
          op->ec = ec;
          op->got = got;
          op->done = true;
          op->cv.notify_all();
        };
        // Reads until the buffer is full or the body ends: one hop between threads per Read,
        // however small the pieces the socket delivers (a TLS record is at most 16 KiB).
        auto read = std::make_shared<std::function<void()>>();
        *read = [self, op, finish, weak = std::weak_ptr<std::function<void()>>(read)] {
          auto& body = self->body_parser_->get().body();
          body.data = op->buf.data() + op->filled;
          body.size = op->buf.size() - op->filled;
          self->Arm(self->core_->options.read_timeout);
          // The pending read holds the loop alive (the loop itself holds only a weak reference).
          bhttp::async_read_some(
              self->stream_, self->buffer_, *self->body_parser_,
              [self, op, finish, again = weak.lock()](beast::error_code ec, size_t) {
                ec = self->Timed(ec);
                if (ec == bhttp::error::need_buffer) ec = {};
                op->filled = op->buf.size() - self->body_parser_->get().body().size;
                if (ec || op->filled == op->buf.size() || self->body_parser_->is_done()) {
                  return finish(ec, op->filled);
                }
                (*again)();
              });
        };
        if (!send_continue) return (*read)();
        static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
        self->Arm(self->core_->options.read_timeout);
        asio::async_write(self->stream_, asio::buffer(kContinue.data(), kContinue.size()),
                          [self, read, finish](beast::error_code ec, size_t) {
                            if (ec) return finish(self->Timed(ec), 0);
                            (*read)();
                          });
      });
      {
        std::unique_lock lock(op->mu);
        while (!op->cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return op->done; })) {
          if (core_->stopping) {
            failed_ = absl::CancelledError("the server is stopping");
            return *failed_;
          }
        }
      }
      if (op->ec) {
        body_read_ += op->got;  // received, then dropped with the failed read
        failed_ = BodyError(op->ec);
        return *failed_;
      }
      if (op->got > 0) {
        std::memcpy(out, op->buf.data(), op->got);
        body_read_ += op->got;
        return op->got;
      }
    }
    return size_t{0};
  }
  std::optional<uint64_t> content_length() const override {
    if (!body_parser_) return std::nullopt;
    auto len = body_parser_->content_length();
    return len ? std::optional<uint64_t>(*len) : std::nullopt;
  }
  uint64_t bytes_read() const override { return body_read_; }

 private:
  absl::Status BodyError(beast::error_code ec) const {
    const std::string after = " after " + std::to_string(body_read_) + " bytes of the body";
    if (ec == bhttp::error::body_limit) {
      return absl::OutOfRangeError("request body larger than " + std::to_string(body_limit_) +
                                   " bytes");
    }
    if (ec == beast::error::timeout) {
      return absl::DeadlineExceededError("the client sent no data for " +
                                         std::to_string(core_->options.read_timeout.count()) + "s" +
                                         after);
    }
    if (ec == bhttp::error::partial_message || ec == bhttp::error::end_of_stream ||
        ec == asio::error::eof || ec == asio::error::connection_reset ||
        ec == asio::error::operation_aborted || ec == asio::ssl::error::stream_truncated) {
      return absl::UnavailableError("the client closed the connection" + after);
    }
    if (ec.category() == bhttp::make_error_code(bhttp::error::bad_chunk).category()) {
      return absl::InvalidArgumentError("malformed request body: " + ec.message() + after);
    }
    return absl::UnavailableError("reading the request body: " + ec.message() + after);
  }

  void Write(Response r, unsigned version, bool keep_alive) {
    response_.emplace(ToBeast(std::move(r), version, keep_alive));
    serializer_.emplace(*response_);
    keep_alive_ = keep_alive;
    Arm(core_->options.read_timeout);
    WriteMore();
  }

  // Writes as much of the answer as the socket takes, as ReadMore reads: an asynchronous wait
  // only when the socket's send buffer is full.
  void WriteMore() {
    beast::error_code ec;
    bhttp::write(stream_, *serializer_, ec);
    if (ec == asio::error::would_block) {
      beast::get_lowest_layer(stream_).socket().async_wait(
          Blocked(false), [self = this->shared_from_this()](beast::error_code ec) {
            if (ec) return self->Close();
            self->WriteMore();
          });
      return;
    }
    serializer_.reset();
    response_.reset();
    if (ec || !keep_alive_) return Close();
    Read();
  }

  void Close() {
    StopTimer();
    beast::error_code ec;
    if (linger_) {
      linger_ = false;
      beast::get_lowest_layer(stream_).socket().shutdown(asio::socket_base::shutdown_send, ec);
      return Drain(0);
    }
    if constexpr (kTls) {
      beast::get_lowest_layer(stream_).socket().shutdown(tcp::socket::shutdown_both, ec);
    } else {
      beast::get_lowest_layer(stream_).socket().shutdown(Stream::socket_type::shutdown_both, ec);
    }
  }

  // Reads and drops what the client still sends (at most 64 MiB, 2 s without data), then closes.
  void Drain(uint64_t total) {
    auto scratch = std::make_shared<std::array<char, 16384>>();
    auto& lowest = beast::get_lowest_layer(stream_);
    Arm(std::chrono::seconds(2));
    lowest.async_read_some(asio::buffer(*scratch), [self = this->shared_from_this(), scratch,
                                                    total](beast::error_code ec, size_t n) {
      if (ec || total + n > (64u << 20)) {
        beast::error_code ignored;
        beast::get_lowest_layer(self->stream_)
            .socket()
            .shutdown(asio::socket_base::shutdown_both, ignored);
        return;
      }
      self->Drain(total + n);
    });
  }

  std::shared_ptr<void> keep_;
  Stream stream_;
  Timer timer_;
  Clock::time_point deadline_ = Clock::time_point::max();
  bool timer_waiting_ = false;
  bool timed_out_ = false;
  std::shared_ptr<Core> core_;
  std::string remote_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  bool first_ = true;
  bool idle_ = false;  // a read for the next request is pending (this connection's thread only)
  // Streaming routes only.
  std::optional<bhttp::request_parser<bhttp::empty_body>> header_parser_;
  std::optional<bhttp::request_parser<bhttp::buffer_body>> body_parser_;
  bool expect_continue_ = false;
  std::optional<absl::Status> failed_;
  uint64_t body_read_ = 0;
  uint64_t body_limit_ = 0;
  bool linger_ = false;
  // The answer being written.
  std::optional<bhttp::response<bhttp::string_body>> response_;
  std::optional<bhttp::response_serializer<bhttp::string_body>> serializer_;
  bool keep_alive_ = false;
};

absl::StatusOr<std::shared_ptr<ssl::context>> LoadTls(const ServerOptions& o) {
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                   ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                   ssl::context::single_dh_use);
  SSL_CTX_set_min_proto_version(ctx->native_handle(), TLS1_2_VERSION);
  beast::error_code ec;
  ctx->use_certificate_chain_file(o.cert_file, ec);
  if (ec) return absl::InvalidArgumentError("tls-cert: " + o.cert_file + ": " + ec.message());
  ctx->use_private_key_file(o.key_file, ssl::context::pem, ec);
  if (ec) return absl::InvalidArgumentError("tls-key: " + o.key_file + ": " + ec.message());
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
    return absl::InvalidArgumentError("tls-key: " + o.key_file + " does not match " + o.cert_file);
  }
  if (!o.client_ca_file.empty()) {
    ctx->load_verify_file(o.client_ca_file, ec);
    if (ec) {
      return absl::InvalidArgumentError("client-ca: " + o.client_ca_file + ": " + ec.message());
    }
    ctx->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
  }
  return ctx;
}

int64_t MTime(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return -1;
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

class BeastServer final : public Server {
 public:
  explicit BeastServer(ServerOptions options) : core_(std::make_shared<Core>()) {
    core_->options = std::move(options);
    core_->logger = log::Get(core_->options.name);
    for (int i = 0; i < std::max(1, core_->options.threads); ++i) {
      // Concurrency hint 1: one thread runs it, so the scheduler never wakes another.
      iocs_.push_back(std::make_unique<asio::io_context>(1));
    }
  }
  ~BeastServer() override { Stop(std::chrono::milliseconds(0)); }

  void Handle(std::string method, std::string path, Handler handler) override {
    core_->routes.push_back({std::move(method), std::move(path), false, {}, std::move(handler)});
  }
  void HandlePrefix(std::string method, std::string prefix, Handler handler) override {
    core_->routes.push_back({std::move(method), std::move(prefix), true, {}, std::move(handler)});
  }
  void HandleAsync(std::string method, std::string path, AsyncHandler handler) override {
    core_->routes.push_back({std::move(method), std::move(path), false, std::move(handler), {}});
  }
  void HandleStream(std::string method, std::string prefix, StreamHandler handler,
                    StreamOptions options) override {
    core_->stream_routes.push_back(
        {std::move(method), std::move(prefix), std::move(handler), options});
  }

  absl::Status Start() override {
    const auto& o = core_->options;
    const bool tls = !o.cert_file.empty() || !o.key_file.empty();
    if (tls) {
      if (o.cert_file.empty() || o.key_file.empty()) {
        return absl::InvalidArgumentError("tls-cert and tls-key must be set together");
      }
      WISP_ASSIGN_OR_RETURN(tls_, LoadTls(o));
      tls_enabled_ = true;
      cert_mtime_ = MTime(o.cert_file) ^ MTime(o.key_file);
      last_check_ = std::chrono::steady_clock::now();
    }
    beast::error_code ec;
    if (!o.unix_socket.empty()) {
      std::filesystem::path path(o.unix_socket);
      std::error_code fec;
      if (std::filesystem::is_socket(path, fec)) std::filesystem::remove(path, fec);  // stale
      unix_acceptor_.emplace(*iocs_[0]);
      unix_acceptor_->open(local{}, ec);
      if (!ec) unix_acceptor_->bind(local::endpoint(o.unix_socket), ec);
      if (!ec) unix_acceptor_->listen(asio::socket_base::max_listen_connections, ec);
      if (ec)
        return absl::UnavailableError("listening on unix socket " + o.unix_socket + ": " +
                                      ec.message());
      ::chmod(o.unix_socket.c_str(), o.socket_mode);
      AcceptUnix();
    } else {
      auto address = asio::ip::make_address(o.address, ec);
      if (ec)
        return absl::InvalidArgumentError("listen address \"" + o.address + "\": " + ec.message());
      tcp_acceptor_.emplace(*iocs_[0]);
      tcp::endpoint ep(address, o.port);
      tcp_acceptor_->open(ep.protocol(), ec);
      if (!ec) tcp_acceptor_->set_option(asio::socket_base::reuse_address(true), ec);
      if (!ec) tcp_acceptor_->bind(ep, ec);
      if (!ec) tcp_acceptor_->listen(asio::socket_base::max_listen_connections, ec);
      if (ec) {
        return absl::UnavailableError("listening on " + o.address + ":" + std::to_string(o.port) +
                                      ": " + ec.message());
      }
      port_ = tcp_acceptor_->local_endpoint().port();
      AcceptTcp();
    }
    core_->sync_pool = std::make_unique<asio::thread_pool>(std::max(1, o.threads));
    for (auto& ioc : iocs_) {
      work_.push_back(asio::make_work_guard(*ioc));
      threads_.emplace_back([ioc = ioc.get()] { ioc->run(); });
    }
    return absl::OkStatus();
  }

  uint16_t port() const override { return port_; }
  std::vector<asio::io_context*> IoContexts() override {
    std::vector<asio::io_context*> out;
    for (auto& ioc : iocs_) out.push_back(ioc.get());
    return out;
  }

  void Stop(std::chrono::milliseconds grace) override {
    if (threads_.empty()) return;
    core_->stopping = true;
    // On the acceptors' thread: an accept handler re-arming there must not race it.
    asio::post(*iocs_[0], [this] {
      beast::error_code ec;
      if (tcp_acceptor_) tcp_acceptor_->close(ec);
      if (unix_acceptor_) unix_acceptor_->close(ec);
    });
    // Connections between requests close now; the others once their request is answered (their
    // keep-alive ends with `stopping`).
    std::vector<std::shared_ptr<Connection>> live;
    {
      std::lock_guard lock(core_->live_mu);
      for (auto& [ptr, weak] : core_->live) {
        if (auto c = weak.lock()) live.push_back(std::move(c));
      }
    }
    for (auto& c : live) c->CloseIfIdle();
    live.clear();
    const auto until = std::chrono::steady_clock::now() + grace;
    while (core_->sessions > 0 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::unordered_map<uint64_t, std::shared_ptr<void>> waiting;
    {
      std::lock_guard lock(core_->io_mu);
      core_->io_stopped = true;
      waiting.swap(core_->waiting);
    }
    // Synchronous handlers still queued are dropped (their Responders find nothing to answer);
    // running ones finish.
    core_->sync_pool->stop();
    core_->sync_pool->join();
    work_.clear();
    for (auto& ioc : iocs_) ioc->stop();
    for (auto& t : threads_) t.join();
    threads_.clear();
    // Streaming handlers see Cancelled from their next body read and return.
    core_->JoinStreamThreads();
    waiting.clear();  // unanswered connections close while their io_context still exists
    if (!core_->options.unix_socket.empty()) ::unlink(core_->options.unix_socket.c_str());
  }

 private:
  std::shared_ptr<ssl::context> CurrentTls() {
    std::lock_guard lock(tls_mu_);
    const auto now = std::chrono::steady_clock::now();
    if (now - last_check_ >= core_->options.cert_reload_interval) {
      last_check_ = now;
      const auto& o = core_->options;
      const int64_t m = MTime(o.cert_file) ^ MTime(o.key_file);
      if (m != cert_mtime_) {
        auto fresh = LoadTls(o);
        if (fresh.ok()) {
          tls_ = *fresh;
          cert_mtime_ = m;
          SPDLOG_LOGGER_INFO(core_->logger, "reloaded TLS certificate {}", o.cert_file);
        } else {
          // Keep serving with the old pair: a half-written renewal must not take the door down.
          SPDLOG_LOGGER_WARN(core_->logger, "keeping previous TLS certificate: {}",
                             std::string(fresh.status().message()));
        }
      }
    }
    return tls_;
  }

  void AcceptTcp() {
    tcp_acceptor_->async_accept(NextIoc(), [this](beast::error_code ec, TcpSocket s) {
      if (ec) {
        if (ec != asio::error::operation_aborted && !core_->stopping) AcceptTcp();
        return;
      }
      beast::error_code ignored;
      s.set_option(tcp::no_delay(true), ignored);
      std::string remote = s.remote_endpoint(ignored).address().to_string();
      if (tls_enabled_) {
        auto ctx = CurrentTls();
        std::make_shared<Session<TlsStream>>(TlsStream(TcpStream(std::move(s)), *ctx), core_,
                                             std::move(remote), ctx)
            ->Run();
      } else {
        std::make_shared<Session<TcpStream>>(TcpStream(std::move(s)), core_, std::move(remote))
            ->Run();
      }
      AcceptTcp();
    });
  }

  void AcceptUnix() {
    unix_acceptor_->async_accept(NextIoc(), [this](beast::error_code ec, LocalSocket s) {
      if (ec) {
        if (ec != asio::error::operation_aborted && !core_->stopping) AcceptUnix();
        return;
      }
      std::make_shared<Session<LocalStream>>(LocalStream(std::move(s)), core_, "unix")->Run();
      AcceptUnix();
    });
  }

  // The io_context for the next connection, in turn. Called on the acceptors' thread only.
  asio::io_context& NextIoc() { return *iocs_[next_ioc_++ % iocs_.size()]; }

  std::shared_ptr<Core> core_;
  // One per I/O thread; the acceptors live on the first.
  std::vector<std::unique_ptr<asio::io_context>> iocs_;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  size_t next_ioc_ = 0;
  std::optional<tcp::acceptor> tcp_acceptor_;
  std::optional<local::acceptor> unix_acceptor_;
  std::vector<std::thread> threads_;
  uint16_t port_ = 0;
  std::mutex tls_mu_;
  std::shared_ptr<ssl::context> tls_;
  bool tls_enabled_ = false;
  int64_t cert_mtime_ = 0;
  std::chrono::steady_clock::time_point last_check_;
};

}  // namespace

struct Responder::State {
  explicit State(std::function<void(Response)> s) : send(std::move(s)) {}
  std::function<void(Response)> send;
  std::atomic<bool> answered{false};
  ~State() {
    if (!answered.exchange(true)) send(Response::Error(500, "the handler did not answer"));
  }
};

Responder::Responder(std::function<void(Response)> send)
    : state_(std::make_shared<State>(std::move(send))) {}

void Responder::operator()(Response response) const {
  if (state_ && !state_->answered.exchange(true)) state_->send(std::move(response));
}

absl::StatusOr<std::unique_ptr<Server>> Server::Create(ServerOptions options) {
  if (options.threads < 1 || options.threads > 256) {
    return absl::InvalidArgumentError("http threads: must be between 1 and 256");
  }
  if (options.max_body_bytes == 0)
    return absl::InvalidArgumentError("max body size: must be positive");
  return std::unique_ptr<Server>(new BeastServer(std::move(options)));
}

}  // namespace wisp::http
