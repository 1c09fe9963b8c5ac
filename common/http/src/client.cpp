#include "wisp/http/client.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>

#include <utility>  // before boost/asio (see server.cpp)
#include <algorithm>
#include <charconv>
#include <limits>
#include <map>
#include <mutex>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "wisp/http/url.hpp"
#include "wisp/log/log.hpp"

namespace wisp::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using beast::error_code;
using Clock = std::chrono::steady_clock;

std::string Lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string Ms(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }

bool IsRedirect(int code) {
  return code == 301 || code == 302 || code == 303 || code == 307 || code == 308;
}

// "bytes <first>-<last>/<total|*>"
std::optional<ContentRange> ParseContentRange(std::string_view v) {
  ContentRange r;
  if (v.substr(0, 6) != "bytes ") return std::nullopt;
  v.remove_prefix(6);
  const size_t dash = v.find('-'), slash = v.find('/');
  if (dash == std::string_view::npos || slash == std::string_view::npos || dash > slash) {
    return std::nullopt;
  }
  auto num = [](std::string_view s, uint64_t& out) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && p == s.data() + s.size() && !s.empty();
  };
  if (!num(v.substr(0, dash), r.first) || !num(v.substr(dash + 1, slash - dash - 1), r.last)) {
    return std::nullopt;
  }
  std::string_view total = v.substr(slash + 1);
  if (total != "*") {
    uint64_t t = 0;
    if (!num(total, t)) return std::nullopt;
    r.total = t;
  }
  return r;
}

// Whether the peer's TLS alert says it refused (or missed) our client certificate.
bool IsClientCertAlert(const error_code& ec) {
  if (ec.category() != asio::error::get_ssl_category()) return false;
  switch (ERR_GET_REASON(static_cast<unsigned long>(ec.value()))) {
    case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
    case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_REVOKED:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
    case SSL_R_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE:
    case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
    case SSL_R_TLSV1_ALERT_ACCESS_DENIED:
      return true;
    default:
      return false;
  }
}

bool IsClosed(const error_code& ec) {
  return ec == asio::error::eof || ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe || ec == ssl::error::stream_truncated ||
         ec == bhttp::error::end_of_stream || ec == asio::error::connection_aborted;
}

std::shared_ptr<ssl::context> MakeTlsContext() {
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_client);
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                   ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
  SSL_CTX_set_min_proto_version(ctx->native_handle(), TLS1_2_VERSION);
  ctx->set_verify_mode(ssl::verify_peer);
  return ctx;
}

absl::StatusOr<std::shared_ptr<ssl::context>> LoadTls(const TlsConfig& t) {
  auto ctx = MakeTlsContext();
  error_code ec;
  const bool custom = !t.ca_pem.empty() || !t.ca_file.empty();
  if (!custom || t.system_roots) {
    ctx->set_default_verify_paths(ec);
    if (ec) return absl::InvalidArgumentError("tls.system_roots: " + ec.message());
  }
  if (!t.ca_pem.empty()) {
    ctx->add_certificate_authority(asio::buffer(t.ca_pem), ec);
    if (ec) return absl::InvalidArgumentError("tls.ca_pem: not a PEM CA bundle: " + ec.message());
  }
  if (!t.ca_file.empty()) {
    ctx->load_verify_file(t.ca_file, ec);
    if (ec) {
      return absl::InvalidArgumentError("tls.ca_file: cannot load \"" + t.ca_file +
                                        "\": " + ec.message());
    }
  }
  const bool has_cert = !t.cert_pem.empty() || !t.cert_file.empty();
  const bool has_key = !t.key_pem.empty() || !t.key_file.empty();
  if (has_cert != has_key) {
    return absl::InvalidArgumentError("tls: a client certificate needs both cert and key");
  }
  if (has_cert) {
    if (!t.cert_pem.empty()) {
      ctx->use_certificate_chain(asio::buffer(t.cert_pem), ec);
      if (ec) return absl::InvalidArgumentError("tls.cert_pem: not a PEM certificate");
    } else {
      ctx->use_certificate_chain_file(t.cert_file, ec);
      if (ec)
        return absl::InvalidArgumentError("tls.cert_file: cannot load \"" + t.cert_file + "\"");
    }
    // Key errors never quote the key.
    if (!t.key_pem.empty()) {
      ctx->use_private_key(asio::buffer(t.key_pem), ssl::context::pem, ec);
      if (ec) return absl::InvalidArgumentError("tls.key_pem: not a PEM private key");
    } else {
      ctx->use_private_key_file(t.key_file, ssl::context::pem, ec);
      if (ec) return absl::InvalidArgumentError("tls.key_file: cannot load \"" + t.key_file + "\"");
    }
    if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
      ERR_clear_error();
      return absl::InvalidArgumentError("tls: the client key does not match the certificate");
    }
  }
  return ctx;
}

// One connection with its own io_context: every step is an async operation run to completion on
// it, which gives synchronous callers per-step deadlines without a thread of their own.
struct Conn {
  std::shared_ptr<ssl::context> tls_ctx;  // outlives the client when a stream does
  asio::io_context ioc{1};
  std::optional<beast::tcp_stream> tcp;
  std::optional<beast::ssl_stream<beast::tcp_stream>> tls;
  beast::flat_buffer buffer;
  std::string key;    // scheme://host:port
  std::string where;  // host:port

  template <typename Start>
  error_code Run(Start start) {
    error_code result = asio::error::would_block;
    start([&result](error_code ec, auto&&...) { result = ec; });
    ioc.restart();
    ioc.run();
    return result;
  }
  beast::tcp_stream& Lowest() { return tls ? beast::get_lowest_layer(*tls) : *tcp; }
  template <typename F>
  auto WithStream(F&& f) {
    if (tls) return f(*tls);
    return f(*tcp);
  }
  // False when the server closed an idle connection (or sent something unasked).
  bool LooksAlive() {
    if (buffer.size() > 0) return false;
    pollfd p{Lowest().socket().native_handle(), POLLIN, 0};
    return ::poll(&p, 1, 0) == 0;
  }
};
using ConnPtr = std::unique_ptr<Conn>;

struct Pool {
  std::mutex mu;
  std::map<std::string, std::vector<ConnPtr>> idle;
  int max_per_host = 4;

  ConnPtr Take(const std::string& key) {
    std::lock_guard lock(mu);
    auto it = idle.find(key);
    while (it != idle.end() && !it->second.empty()) {
      ConnPtr c = std::move(it->second.back());
      it->second.pop_back();
      if (c->LooksAlive()) return c;
    }
    return nullptr;
  }
  void Put(ConnPtr c) {
    if (max_per_host <= 0) return;
    std::lock_guard lock(mu);
    auto& list = idle[c->key];
    if (static_cast<int>(list.size()) >= max_per_host) list.erase(list.begin());
    list.push_back(std::move(c));
  }
};

// The state of one request: its URL (after redirects) and its deadlines.
struct Call {
  const ClientRequest* request = nullptr;
  std::string method;
  Url url;
  std::chrono::milliseconds read_timeout{0};
  Clock::time_point deadline = Clock::time_point::max();
  std::chrono::milliseconds total{0};
  bool deadline_hit = false;  // the last armed step was cut by the total deadline
  bool drop_auth = false;     // redirected to another host
  bool body_allowed = true;   // false after a redirect that turned the request into a GET

  std::string What() const { return method + " " + url.Redacted(); }
  // Arms the stream for a step of at most `step`, within the total deadline.
  void Arm(beast::tcp_stream& s, std::chrono::milliseconds step) {
    auto until = Clock::now() + step;
    deadline_hit = deadline < until;
    s.expires_at(deadline_hit ? deadline : until);
  }
  absl::Status Timeout(std::string_view step, std::chrono::milliseconds limit) const {
    if (deadline_hit) {
      return absl::DeadlineExceededError(What() + ": deadline of " + Ms(total) + " passed");
    }
    return absl::DeadlineExceededError(What() + ": " + std::string(step) + " timed out after " +
                                       Ms(limit));
  }
  // The one mapping of transport errors (see client.hpp).
  absl::Status IoError(std::string_view step, const error_code& ec,
                       std::chrono::milliseconds limit) const {
    if (ec == beast::error::timeout) return Timeout(step, limit);
    if (IsClientCertAlert(ec)) {
      return absl::UnauthenticatedError(What() + ": the server refused the client certificate (" +
                                        ec.message() + ")");
    }
    return absl::UnavailableError(What() + ": " + std::string(step) + ": " + ec.message());
  }
};

class StreamImpl;
using ParserPtr = std::unique_ptr<bhttp::response_parser<bhttp::buffer_body>>;

ParserPtr NewParser(const std::string& method) {
  auto parser = std::make_unique<bhttp::response_parser<bhttp::buffer_body>>();
  // Not boost::none: Boost 1.74 compares the optional with ">" and a none limit rejects every
  // body.
  parser->body_limit(std::numeric_limits<std::uint64_t>::max());
  if (method == "HEAD") parser->skip(true);
  return parser;
}

class BeastClient final : public Client {
 public:
  BeastClient(ClientOptions options, std::shared_ptr<ssl::context> tls)
      : options_(std::move(options)), tls_(std::move(tls)), logger_(log::Get(options_.name)) {
    pool_->max_per_host = options_.max_idle_per_host;
  }

  absl::StatusOr<ClientResponse> Send(const ClientRequest& request) override;
  absl::StatusOr<ResponseStreamPtr> Open(const ClientRequest& request) override;

  const ClientOptions& options() const { return options_; }
  std::shared_ptr<Pool> pool() const { return pool_; }

 private:
  absl::StatusOr<std::unique_ptr<StreamImpl>> OpenImpl(const ClientRequest& request);
  absl::StatusOr<ConnPtr> Connect(Call& call);
  // Sends the request on `conn` and reads the response header into `parser`. `sent_all` says
  // whether the whole body went out (an early answer leaves the connection unusable).
  absl::Status Exchange(Call& call, Conn& conn, ParserPtr& parser, bool& sent_all, bool& got_bytes);

  ClientOptions options_;
  std::shared_ptr<ssl::context> tls_;
  std::shared_ptr<spdlog::logger> logger_;
  std::shared_ptr<Pool> pool_ = std::make_shared<Pool>();
};

class StreamImpl final : public ResponseStream {
 public:
  StreamImpl(std::shared_ptr<Pool> pool, ConnPtr conn, Call call, ParserPtr parser,
             ClientResponse response, bool reusable)
      : pool_(std::move(pool)),
        conn_(std::move(conn)),
        call_(std::move(call)),
        parser_(std::move(parser)),
        response_(std::move(response)),
        reusable_(reusable) {
    if (parser_->is_done()) {
      Finish();
    } else if (!parser_->chunked() && parser_->content_length()) {
      // A body with a Content-Length and no transfer coding is read straight from the stream into
      // the caller's buffer: Beast's parser would read it into `buffer` first and copy it out.
      direct_ = true;
      left_ = *parser_->content_length();
      if (left_ == 0) Finish();
    }
  }
  ~StreamImpl() override = default;

  const ClientResponse& response() const override { return response_; }
  uint64_t bytes_read() const override { return read_; }

  absl::StatusOr<size_t> Read(char* buf, size_t n) override {
    if (!pending_.empty()) {
      size_t k = std::min(n, pending_.size());
      std::copy_n(pending_.data(), k, buf);
      pending_.erase(0, k);
      return k;
    }
    return ReadBody(buf, n);
  }

  absl::StatusOr<std::optional<std::string>> ReadLine(size_t max_line) override {
    size_t scanned = 0;
    while (true) {
      size_t nl = pending_.find('\n', scanned);
      if (nl != std::string::npos) {
        std::string line = pending_.substr(0, nl);
        pending_.erase(0, nl + 1);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        return std::optional<std::string>(std::move(line));
      }
      scanned = pending_.size();
      if (pending_.size() > max_line) {
        return absl::ResourceExhaustedError(call_.What() + ": a line is longer than " +
                                            std::to_string(max_line) + " bytes");
      }
      char chunk[16 * 1024];
      WISP_ASSIGN_OR_RETURN(size_t got, ReadBody(chunk, sizeof chunk));
      if (got == 0) {
        if (pending_.empty()) return std::optional<std::string>();
        std::string last = std::move(pending_);
        pending_.clear();
        return std::optional<std::string>(std::move(last));
      }
      pending_.append(chunk, got);
    }
  }

 private:
  void Finish() {
    done_ = true;
    if (reusable_ && parser_->keep_alive() && conn_ && conn_->buffer.size() == 0) {
      pool_->Put(std::move(conn_));
    }
    conn_.reset();
  }

  absl::Status BodyError(const error_code& ec) {
    conn_.reset();
    failed_ = true;
    if (IsClosed(ec) || ec == bhttp::error::partial_message) {
      // Offsets of the whole resource, so a resumed (Range) body reads the same way.
      const uint64_t start = response_.content_range ? response_.content_range->first : 0;
      std::optional<uint64_t> total =
          response_.content_range ? response_.content_range->total : response_.content_length;
      return absl::UnavailableError("HTTP body truncated: received " +
                                    std::to_string(start + read_) + " of " +
                                    (total ? std::to_string(*total) : std::string("?")) +
                                    " bytes from " + call_.url.Redacted());
    }
    return call_.IoError("reading the body", ec, call_.read_timeout);
  }

  absl::StatusOr<size_t> ReadBody(char* buf, size_t n) {
    if (failed_) return absl::FailedPreconditionError(call_.What() + ": the body failed before");
    if (done_ || n == 0) return 0;
    if (direct_) return ReadDirect(buf, n);
    while (true) {
      auto& body = parser_->get().body();
      body.data = buf;
      body.size = n;
      call_.Arm(conn_->Lowest(), call_.read_timeout);
      error_code ec = conn_->WithStream([&](auto& s) {
        return conn_->Run(
            [&](auto handler) { bhttp::async_read_some(s, conn_->buffer, *parser_, handler); });
      });
      if (ec == bhttp::error::need_buffer) ec = {};
      const size_t got = n - body.size;
      read_ += got;
      if (ec) return BodyError(ec);
      if (parser_->is_done()) Finish();
      if (got > 0 || done_) return got;
    }
  }

  absl::StatusOr<size_t> ReadDirect(char* buf, size_t n) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(n, left_));
    size_t got = 0;
    error_code ec;
    if (conn_->buffer.size() > 0) {
      // Body bytes that arrived with the header.
      got = asio::buffer_copy(asio::buffer(buf, want), conn_->buffer.data());
      conn_->buffer.consume(got);
    } else {
      while (got == 0 && !ec) {
        call_.Arm(conn_->Lowest(), call_.read_timeout);
        ec = conn_->WithStream([&](auto& s) {
          return conn_->Run([&](auto handler) {
            s.async_read_some(asio::buffer(buf, want),
                              [&got, handler](error_code e, size_t k) mutable {
                                got = k;
                                handler(e);
                              });
          });
        });
      }
    }
    read_ += got;
    left_ -= got;
    if (got == 0) return BodyError(ec);
    if (left_ == 0) Finish();
    return got;
  }

  std::shared_ptr<Pool> pool_;
  ConnPtr conn_;
  Call call_;
  ParserPtr parser_;
  ClientResponse response_;
  bool reusable_;
  bool direct_ = false;
  bool done_ = false;
  bool failed_ = false;
  uint64_t left_ = 0;
  uint64_t read_ = 0;
  std::string pending_;  // ReadLine's bytes past the last line
};

absl::StatusOr<ConnPtr> BeastClient::Connect(Call& call) {
  const Url& url = call.url;
  auto conn = std::make_unique<Conn>();
  conn->key = url.scheme + "://" + url.host + ":" + url.port;
  conn->where = url.host + ":" + url.port;
  // Beast sizes each socket read by the buffer's free capacity (at least 512 bytes): without
  // room, a chunked body arrives 512 bytes per read.
  conn->buffer.reserve(1 << 20);
  const auto limit = options_.connect_timeout;
  const auto start = Clock::now();
  tcp::resolver resolver(conn->ioc);
  tcp::resolver::results_type results;
  asio::steady_timer timer(conn->ioc);
  bool resolve_timed_out = false;
  const auto resolve_until = std::min(call.deadline, start + limit);
  timer.expires_at(resolve_until);
  timer.async_wait([&](error_code e) {
    if (!e) {
      resolve_timed_out = true;
      resolver.cancel();
    }
  });
  error_code ec = conn->Run([&](auto handler) {
    resolver.async_resolve(url.host, url.port,
                           [&, handler](error_code e, tcp::resolver::results_type r) mutable {
                             timer.cancel();
                             results = std::move(r);
                             handler(e);
                           });
  });
  if (resolve_timed_out) {
    call.deadline_hit = call.deadline <= start + limit;
    return call.Timeout("resolving " + url.host, limit);
  }
  if (ec)
    return absl::UnavailableError(call.What() + ": resolving " + url.host + ": " + ec.message());
  const bool https = url.scheme == "https";
  if (https) {
    conn->tls_ctx = tls_;
    conn->tls.emplace(conn->ioc, *tls_);
  } else {
    conn->tcp.emplace(conn->ioc);
  }
  auto remaining = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(start + limit - Clock::now());
  };
  call.Arm(conn->Lowest(), remaining());
  ec = conn->Run([&](auto handler) {
    conn->Lowest().async_connect(
        results, [handler](error_code e, const tcp::endpoint&) mutable { handler(e); });
  });
  if (ec == beast::error::timeout) return call.Timeout("connecting to " + conn->where, limit);
  if (ec) {
    return absl::UnavailableError(call.What() + ": connecting to " + conn->where + ": " +
                                  ec.message());
  }
  conn->Lowest().socket().set_option(tcp::no_delay(true));
  if (!https) return conn;
  SSL* ssl_handle = conn->tls->native_handle();
  const std::string& name = options_.tls.server_name.empty() ? url.host : options_.tls.server_name;
  error_code addr_ec;
  (void)asio::ip::make_address(name, addr_ec);
  if (addr_ec) {
    SSL_set_tlsext_host_name(ssl_handle, name.c_str());
    SSL_set1_host(ssl_handle, name.c_str());
  } else {
    // No SNI for an address (RFC 6066); the certificate must name the IP.
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_handle), name.c_str());
  }
  call.Arm(conn->Lowest(), remaining());
  ec = conn->Run(
      [&](auto handler) { conn->tls->async_handshake(ssl::stream_base::client, handler); });
  if (ec) {
    const std::string hs = "TLS handshake with " + conn->where;
    const long verify = SSL_get_verify_result(ssl_handle);
    if (verify != X509_V_OK) {
      return absl::FailedPreconditionError(call.What() + ": " + hs +
                                           " failed: certificate verify failed (" +
                                           X509_verify_cert_error_string(verify) + ")");
    }
    if (ec == beast::error::timeout) return call.Timeout(hs, limit);
    if (IsClientCertAlert(ec)) return call.IoError(hs, ec, limit);
    if (IsClosed(ec)) {
      return absl::UnavailableError(call.What() + ": " + hs + ": the server closed the connection");
    }
    return absl::FailedPreconditionError(call.What() + ": " + hs + " failed: " + ec.message());
  }
  return conn;
}

absl::Status BeastClient::Exchange(Call& call, Conn& conn, ParserPtr& parser, bool& sent_all,
                                   bool& got_bytes) {
  const ClientRequest& r = *call.request;
  const Url& url = call.url;
  sent_all = false;
  got_bytes = false;
  bhttp::request<bhttp::buffer_body> req{bhttp::string_to_verb(call.method), url.target, 11};
  if (req.method() == bhttp::verb::unknown) req.method_string(call.method);
  const bool default_port =
      (url.scheme == "http" && url.port == "80") || (url.scheme == "https" && url.port == "443");
  const std::string host =
      url.host.find(':') != std::string::npos ? "[" + url.host + "]" : url.host;
  req.set(bhttp::field::host, default_port ? host : host + ":" + url.port);
  req.set(bhttp::field::user_agent, options_.user_agent);
  req.set(bhttp::field::accept_encoding, "identity");
  const std::string& token = !r.bearer_token.empty() ? r.bearer_token : options_.bearer_token;
  if (!token.empty()) req.set(bhttp::field::authorization, "Bearer " + token);
  if (r.range_start) {
    req.set(bhttp::field::range, "bytes=" + std::to_string(*r.range_start) + "-" +
                                     (r.range_end ? std::to_string(*r.range_end) : ""));
    if (!r.if_range.empty()) req.set(bhttp::field::if_range, r.if_range);
  }
  for (const auto& [k, v] : r.headers) req.set(k, v);
  if (call.drop_auth) req.erase(bhttp::field::authorization);
  const bool has_reader = static_cast<bool>(r.body_reader) && call.body_allowed;
  const std::string_view body = call.body_allowed ? std::string_view(r.body) : std::string_view();
  if (has_reader) {
    if (r.body_size) {
      req.content_length(*r.body_size);
    } else {
      req.chunked(true);
    }
  } else if (!body.empty() || call.method == "POST" || call.method == "PUT" ||
             call.method == "PATCH") {
    req.content_length(body.size());
  }
  if (r.expect_continue && (has_reader || !body.empty())) {
    req.set(bhttp::field::expect, "100-continue");
  }
  req.body().data = nullptr;
  req.body().size = 0;
  req.body().more = has_reader || !body.empty();
  bhttp::request_serializer<bhttp::buffer_body> sr{req};

  auto write = [&]() -> error_code {
    call.Arm(conn.Lowest(), call.read_timeout);
    error_code ec = conn.WithStream(
        [&](auto& s) { return conn.Run([&](auto h) { bhttp::async_write(s, sr, h); }); });
    return ec == bhttp::error::need_buffer ? error_code{} : ec;
  };
  auto read_header = [&](std::chrono::milliseconds limit) -> error_code {
    call.Arm(conn.Lowest(), limit);
    error_code ec = conn.WithStream([&](auto& s) {
      return conn.Run([&](auto h) { bhttp::async_read_header(s, conn.buffer, *parser, h); });
    });
    if (!ec || conn.buffer.size() > 0) got_bytes = true;
    return ec;
  };
  // After a failed write the server may have answered and closed (a refusal): take its answer.
  auto early_answer = [&]() -> bool {
    parser = NewParser(call.method);
    return !read_header(std::min(call.read_timeout, std::chrono::milliseconds(2000)));
  };

  call.Arm(conn.Lowest(), call.read_timeout);
  error_code ec = conn.WithStream(
      [&](auto& s) { return conn.Run([&](auto h) { bhttp::async_write_header(s, sr, h); }); });
  if (ec) return call.IoError("sending the request to " + conn.where, ec, call.read_timeout);
  if (req.count(bhttp::field::expect) > 0) {
    ec = read_header(call.read_timeout);
    if (ec) return call.IoError("waiting for 100 Continue", ec, call.read_timeout);
    if (parser->get().result() != bhttp::status::continue_) return absl::OkStatus();  // refused
    parser = NewParser(call.method);
  }
  if (has_reader) {
    std::vector<char> chunk(256 * 1024);
    uint64_t sent = 0;
    while (true) {
      size_t n = 0;
      if (!r.body_size || sent < *r.body_size) {
        size_t want = chunk.size();
        if (r.body_size) want = static_cast<size_t>(std::min<uint64_t>(want, *r.body_size - sent));
        auto got = r.body_reader(chunk.data(), want);
        if (!got.ok()) return got.status();
        n = *got;
      }
      if (n == 0) {
        if (r.body_size && sent != *r.body_size) {
          return absl::DataLossError(call.What() + ": the body ended after " +
                                     std::to_string(sent) + " of " + std::to_string(*r.body_size) +
                                     " bytes");
        }
        req.body().data = nullptr;
        req.body().size = 0;
        req.body().more = false;
        ec = write();
        if (ec) {
          if (early_answer()) return absl::OkStatus();
          return call.IoError("finishing the body", ec, call.read_timeout);
        }
        break;
      }
      req.body().data = chunk.data();
      req.body().size = n;
      req.body().more = true;
      ec = write();
      if (ec) {
        if (early_answer()) return absl::OkStatus();
        return call.IoError("sending the body after " + std::to_string(sent) + " bytes", ec,
                            call.read_timeout);
      }
      sent += n;
    }
  } else if (!body.empty()) {
    req.body().data = const_cast<char*>(body.data());
    req.body().size = body.size();
    req.body().more = false;
    ec = write();
    if (ec) {
      if (early_answer()) return absl::OkStatus();
      return call.IoError("sending the body", ec, call.read_timeout);
    }
  }
  sent_all = true;
  const std::chrono::milliseconds answer_within = r.response_timeout.value_or(call.read_timeout);
  ec = read_header(answer_within);
  if (ec) {
    if (ec == beast::error::timeout) return call.Timeout("waiting for the response", answer_within);
    return call.IoError("reading the response from " + conn.where, ec, answer_within);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<StreamImpl>> BeastClient::OpenImpl(const ClientRequest& request) {
  Call call;
  call.request = &request;
  call.method = request.method.empty() ? "GET" : request.method;
  WISP_ASSIGN_OR_RETURN(call.url, ParseUrl(request.url));
  call.read_timeout = request.read_timeout.value_or(options_.read_timeout);
  call.total = request.total_timeout.value_or(options_.total_timeout);
  if (call.total.count() > 0) call.deadline = Clock::now() + call.total;
  const int max_redirects = request.max_redirects.value_or(options_.max_redirects);
  const std::string first_host = call.url.host;
  for (int hop = 0;; ++hop) {
    ParserPtr parser;
    ConnPtr conn;
    absl::Status st;
    bool sent_all = false;
    for (int attempt = 0; attempt < 2; ++attempt) {
      const std::string key = call.url.scheme + "://" + call.url.host + ":" + call.url.port;
      conn = pool_->Take(key);
      const bool reused = conn != nullptr;
      if (!conn) {
        WISP_ASSIGN_OR_RETURN(conn, Connect(call));
      }
      parser = NewParser(call.method);
      bool got_bytes = false;
      st = Exchange(call, *conn, parser, sent_all, got_bytes);
      // A kept-alive connection the server closed meanwhile: once more on a fresh one, when the
      // body can be sent again.
      if (!st.ok() && reused && !got_bytes && !request.body_reader &&
          st.code() == absl::StatusCode::kUnavailable) {
        continue;
      }
      break;
    }
    WISP_RETURN_IF_ERROR(st);
    auto& head = parser->get();
    const int code = static_cast<int>(head.result_int());
    if (IsRedirect(code) && max_redirects > 0) {
      if (hop >= max_redirects) {
        return absl::FailedPreconditionError(call.What() + ": more than " +
                                             std::to_string(max_redirects) + " redirects");
      }
      const bool change_to_get =
          code == 303 || ((code == 301 || code == 302) && call.method == "POST");
      if (!(request.body_reader && !change_to_get)) {
        std::string location(head[bhttp::field::location]);
        if (location.empty()) {
          return absl::FailedPreconditionError(call.What() + ": redirect without Location");
        }
        if (location.find("://") == std::string::npos) {
          // A relative reference: keep scheme and authority.
          if (location[0] != '/') {
            std::string path = call.url.target.substr(0, call.url.target.find('?'));
            location = path.substr(0, path.rfind('/') + 1) + location;
          }
          location = call.url.scheme + "://" +
                     (call.url.host.find(':') != std::string::npos ? "[" + call.url.host + "]"
                                                                   : call.url.host) +
                     ":" + call.url.port + location;
        }
        WISP_ASSIGN_OR_RETURN(Url next, ParseUrl(location, "redirect Location"));
        if (call.url.scheme == "https" && next.scheme == "http") {
          return absl::FailedPreconditionError(call.What() + ": refusing a redirect to " +
                                               next.Redacted() + " (https to http)");
        }
        if (next.host != first_host) call.drop_auth = true;
        if (change_to_get) {
          call.method = call.method == "HEAD" ? "HEAD" : "GET";
          call.body_allowed = false;
        }
        SPDLOG_LOGGER_DEBUG(logger_, "{} redirected ({}) to {}", call.What(), code,
                            next.Redacted());
        call.url = std::move(next);
        continue;  // the redirect's connection is dropped, not drained
      }
    }
    ClientResponse resp;
    resp.status = code;
    resp.reason = std::string(head.reason());
    resp.url = call.url.Redacted();
    resp.method = call.method;
    for (const auto& f : head)
      resp.headers.emplace_back(Lower(std::string(f.name_string())), std::string(f.value()));
    if (auto len = parser->content_length()) resp.content_length = *len;
    if (code == 206) {
      std::string cr(head[bhttp::field::content_range]);
      resp.content_range = ParseContentRange(cr);
      if (!resp.content_range) {
        return absl::UnavailableError(call.What() + ": bad Content-Range \"" + cr + "\"");
      }
    }
    SPDLOG_LOGGER_DEBUG(logger_, "{} -> {}", call.What(), code);
    return std::make_unique<StreamImpl>(pool_, std::move(conn), std::move(call), std::move(parser),
                                        std::move(resp), sent_all);
  }
}

absl::StatusOr<ResponseStreamPtr> BeastClient::Open(const ClientRequest& request) {
  WISP_ASSIGN_OR_RETURN(auto s, OpenImpl(request));
  return ResponseStreamPtr(std::move(s));
}

absl::StatusOr<ClientResponse> BeastClient::Send(const ClientRequest& request) {
  WISP_ASSIGN_OR_RETURN(auto s, OpenImpl(request));
  ClientResponse resp = s->response();
  const uint64_t limit = request.max_response_bytes.value_or(options_.max_response_bytes);
  auto too_big = [&] {
    return absl::ResourceExhaustedError(resp.method + " " + resp.url +
                                        ": response is larger than " + std::to_string(limit) +
                                        " bytes");
  };
  if (resp.content_length && *resp.content_length > limit) return too_big();
  if (resp.content_length) resp.body.reserve(static_cast<size_t>(*resp.content_length));
  char chunk[64 * 1024];
  while (true) {
    WISP_ASSIGN_OR_RETURN(size_t got, s->Read(chunk, sizeof chunk));
    if (got == 0) break;
    if (resp.body.size() + got > limit) return too_big();
    resp.body.append(chunk, got);
  }
  return resp;
}

}  // namespace

std::string_view ClientResponse::Header(std::string_view lower_name) const {
  for (const auto& [k, v] : headers) {
    if (k == lower_name) return v;
  }
  return {};
}

absl::Status StatusOfHttp(int status, std::string_view reason, std::string_view redacted_url) {
  if (status >= 200 && status < 300) return absl::OkStatus();
  std::string what = "HTTP " + std::to_string(status) + (reason.empty() ? "" : " ") +
                     std::string(reason) + " from " + std::string(redacted_url);
  switch (status) {
    case 400:
      return absl::InvalidArgumentError(what);
    case 401:
      return absl::UnauthenticatedError(what);
    case 403:
      return absl::PermissionDeniedError(what);
    case 404:
    case 410:
      return absl::NotFoundError(what);
    case 408:
      return absl::DeadlineExceededError(what);
    case 409:
      return absl::AbortedError(what);
    case 412:
      return absl::FailedPreconditionError(what);
    case 416:
      return absl::OutOfRangeError(what);
    case 429:
      return absl::ResourceExhaustedError(what);
    case 501:
      return absl::UnimplementedError(what);
    default:
      break;
  }
  if (status >= 500 && status < 600) return absl::UnavailableError(what);
  return absl::FailedPreconditionError(what);
}

absl::Status StatusOf(const ClientResponse& response) {
  return StatusOfHttp(response.status, response.reason, response.url);
}

absl::StatusOr<ClientPtr> NewClient(ClientOptions options) {
  if (options.connect_timeout.count() <= 0 || options.read_timeout.count() <= 0) {
    return absl::InvalidArgumentError("connect_timeout and read_timeout must be positive");
  }
  if (options.max_redirects < 0) return absl::InvalidArgumentError("max_redirects: negative");
  WISP_ASSIGN_OR_RETURN(auto tls, LoadTls(options.tls));
  return ClientPtr(std::make_unique<BeastClient>(std::move(options), std::move(tls)));
}

}  // namespace wisp::http
