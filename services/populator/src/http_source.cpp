#include "http_source.hpp"

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/version.hpp>

#include <cctype>
#include <charconv>
#include <limits>

namespace wisp::populator {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using beast::error_code;

struct HttpSource::Impl {
  HttpOptions options;
  HttpResponseInfo info;
  Url url;
  asio::io_context ioc;
  asio::ssl::context ssl_ctx{asio::ssl::context::tls_client};
  std::optional<beast::tcp_stream> tcp_stream;
  std::optional<beast::ssl_stream<beast::tcp_stream>> tls_stream;
  beast::flat_buffer buffer;
  std::optional<http::response_parser<http::buffer_body>> parser;
  uint64_t body_read = 0;
  // A body with a Content-Length and no transfer coding is read straight from the stream into the
  // caller's buffer: Beast's parser would read it into `buffer` first and copy it from there.
  bool direct = false;
  uint64_t body_left = 0;  // direct: bytes of the body not read yet

  // Runs one async operation to completion on our private io_context: gives sync code timeouts.
  template <typename Start>
  error_code Run(Start start) {
    error_code result = asio::error::would_block;
    start([&result](error_code ec, auto&&...) { result = ec; });
    ioc.restart();
    ioc.run();
    return result;
  }

  beast::tcp_stream& Lowest() {
    return tls_stream ? beast::get_lowest_layer(*tls_stream) : *tcp_stream;
  }

  template <typename F>
  auto WithStream(F&& f) {
    if (tls_stream) return f(*tls_stream);
    return f(*tcp_stream);
  }

  std::string Where() const { return url.host + ":" + url.port; }

  absl::Status Connect() {
    tls_stream.reset();
    tcp_stream.reset();
    buffer.clear();
    // Beast sizes each socket read by the buffer's free capacity (at least 512 bytes): without
    // room, a body arrives 512 bytes per read.
    buffer.reserve(1 << 20);
    tcp::resolver resolver(ioc);
    tcp::resolver::results_type results;
    error_code ec = Run([&](auto handler) {
      resolver.async_resolve(url.host, url.port,
                             [&, handler](error_code e, tcp::resolver::results_type r) mutable {
                               results = std::move(r);
                               handler(e);
                             });
    });
    if (ec) return absl::UnavailableError("resolving " + url.host + ": " + ec.message());
    if (url.scheme == "https") {
      tls_stream.emplace(ioc, ssl_ctx);
    } else {
      tcp_stream.emplace(ioc);
    }
    Lowest().expires_after(options.connect_timeout);
    ec = Run([&](auto handler) {
      Lowest().async_connect(results,
                             [handler](error_code e, const tcp::endpoint&) mutable { handler(e); });
    });
    if (ec) return absl::UnavailableError("connecting to " + Where() + ": " + ec.message());
    Lowest().socket().set_option(tcp::no_delay(true));
    if (tls_stream) {
      SSL* ssl = tls_stream->native_handle();
      error_code addr_ec;
      (void)asio::ip::make_address(url.host, addr_ec);
      if (addr_ec) {
        SSL_set_tlsext_host_name(ssl, url.host.c_str());
        SSL_set1_host(ssl, url.host.c_str());
      } else {
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), url.host.c_str());
      }
      tls_stream->set_verify_mode(asio::ssl::verify_peer);
      Lowest().expires_after(options.connect_timeout);
      ec = Run([&](auto handler) {
        tls_stream->async_handshake(asio::ssl::stream_base::client, handler);
      });
      if (ec) {
        std::string why = ec.message();
        long verify = SSL_get_verify_result(ssl);
        if (verify != X509_V_OK) {
          why = std::string("certificate verify failed (") + X509_verify_cert_error_string(verify) +
                ")";
        } else if (ec == beast::error::timeout) {
          return absl::UnavailableError("TLS handshake with " + Where() + " timed out");
        }
        return absl::FailedPreconditionError("TLS handshake with " + Where() + " failed: " + why);
      }
    }
    return absl::OkStatus();
  }

  absl::Status SendAndReadHeader() {
    http::request<http::empty_body> req{http::verb::get, url.target, 11};
    bool default_port =
        (url.scheme == "http" && url.port == "80") || (url.scheme == "https" && url.port == "443");
    req.set(http::field::host, default_port ? url.host : url.host + ":" + url.port);
    req.set(http::field::user_agent, "wisp-populator/" WISP_VERSION);
    req.set(http::field::accept_encoding, "identity");
    for (const auto& [k, v] : options.headers) req.set(k, v);
    if (options.range_start > 0) {
      req.set(http::field::range, "bytes=" + std::to_string(options.range_start) + "-");
      if (!options.if_range.empty()) req.set(http::field::if_range, options.if_range);
    }
    Lowest().expires_after(options.read_timeout);
    error_code ec = WithStream(
        [&](auto& s) { return Run([&](auto handler) { http::async_write(s, req, handler); }); });
    if (ec) return absl::UnavailableError("sending request to " + Where() + ": " + ec.message());
    parser.emplace();
    // Not boost::none: Boost 1.74 compares the optional with ">" and a none limit rejects every
    // body.
    parser->body_limit(std::numeric_limits<std::uint64_t>::max());
    Lowest().expires_after(options.read_timeout);
    ec = WithStream([&](auto& s) {
      return Run([&](auto handler) { http::async_read_header(s, buffer, *parser, handler); });
    });
    if (ec == beast::error::timeout) {
      return absl::UnavailableError("timed out waiting for a response from " + Where());
    }
    if (ec) return absl::UnavailableError("reading response from " + Where() + ": " + ec.message());
    return absl::OkStatus();
  }

  absl::Status CheckStatus() {
    auto& res = parser->get();
    int code = static_cast<int>(res.result_int());
    info.status = code;
    std::string what = "HTTP " + std::to_string(code) + " " + std::string(res.reason()) + " from " +
                       url.Redacted();
    if (code == 404 || code == 410) return absl::NotFoundError(what);
    if (code == 401 || code == 403) return absl::PermissionDeniedError(what);
    if (code == 429 || code >= 500) return absl::UnavailableError(what);
    if (code >= 400) return absl::FailedPreconditionError(what);
    if (code != 200 && code != 206) return absl::FailedPreconditionError("unexpected " + what);
    info.partial = code == 206;
    if (auto len = parser->content_length()) info.content_length = *len;
    info.etag = std::string(res[http::field::etag]);
    info.last_modified = std::string(res[http::field::last_modified]);
    if (info.partial) {
      // Content-Range: bytes <first>-<last>/<total|*>
      std::string cr(res[http::field::content_range]);
      uint64_t first = 0, total = 0;
      size_t sp = cr.find(' '), dash = cr.find('-'), slash = cr.find('/');
      if (sp == std::string::npos || dash == std::string::npos || slash == std::string::npos ||
          std::from_chars(cr.data() + sp + 1, cr.data() + dash, first).ec != std::errc()) {
        return absl::UnavailableError("bad Content-Range \"" + cr + "\" from " + url.Redacted());
      }
      if (first != options.range_start) {
        return absl::UnavailableError("server resumed at byte " + std::to_string(first) +
                                      ", asked for " + std::to_string(options.range_start));
      }
      if (std::from_chars(cr.data() + slash + 1, cr.data() + cr.size(), total).ec == std::errc()) {
        info.total_size = total;
      }
    } else if (info.content_length) {
      info.total_size = info.content_length;
    }
    return absl::OkStatus();
  }

  absl::Status Open(std::string_view raw_url) {
    WISP_ASSIGN_OR_RETURN(url, ParseUrl(raw_url));
    ssl_ctx.set_default_verify_paths();
    if (!options.ca_pem.empty()) {
      error_code ec;
      ssl_ctx.add_certificate_authority(asio::buffer(options.ca_pem), ec);
      if (ec)
        return absl::InvalidArgumentError("ca_pem: not a valid PEM CA bundle: " + ec.message());
    }
    for (int hop = 0;; ++hop) {
      WISP_RETURN_IF_ERROR(Connect());
      WISP_RETURN_IF_ERROR(SendAndReadHeader());
      int code = static_cast<int>(parser->get().result_int());
      if (code == 301 || code == 302 || code == 303 || code == 307 || code == 308) {
        if (hop >= options.max_redirects) {
          return absl::FailedPreconditionError("too many redirects from " + url.Redacted());
        }
        std::string location(parser->get()[http::field::location]);
        if (location.empty()) {
          return absl::FailedPreconditionError("redirect without Location from " + url.Redacted());
        }
        if (location.find("://") == std::string::npos) {
          // Relative reference: keep scheme and authority.
          if (location[0] != '/') {
            location = url.target.substr(0, url.target.rfind('/') + 1) + location;
          }
          location = url.scheme + "://" + url.host + ":" + url.port + location;
        }
        WISP_ASSIGN_OR_RETURN(url, ParseUrl(location, "redirect Location"));
        continue;
      }
      info.final_url = url.Redacted();
      WISP_RETURN_IF_ERROR(CheckStatus());
      if (!parser->chunked() && parser->content_length()) {
        direct = true;
        body_left = *parser->content_length();
      }
      return absl::OkStatus();
    }
  }

  absl::Status BodyError(error_code ec) {
    if (ec == http::error::partial_message || ec == http::error::end_of_stream ||
        ec == asio::error::eof || ec == asio::ssl::error::stream_truncated ||
        ec == asio::error::connection_reset) {
      // Offsets of the whole resource, so a resumed (Range) body reads the same way.
      const uint64_t start = info.partial ? options.range_start : 0;
      return absl::UnavailableError(
          "HTTP body truncated: received " + std::to_string(start + body_read) + " of " +
          (info.total_size ? std::to_string(*info.total_size) : std::string("?")) + " bytes from " +
          url.Redacted());
    }
    if (ec == beast::error::timeout) {
      return absl::UnavailableError("timed out reading the body from " + url.Redacted());
    }
    return absl::UnavailableError("reading the body from " + url.Redacted() + ": " + ec.message());
  }

  absl::StatusOr<size_t> ReadDirect(uint8_t* buf, size_t n) {
    if (body_left == 0 || n == 0) return 0;
    const size_t want = static_cast<size_t>(std::min<uint64_t>(n, body_left));
    size_t got = 0;
    error_code ec;
    if (buffer.size() > 0) {
      // Body bytes that arrived with the header.
      got = asio::buffer_copy(asio::buffer(buf, want), buffer.data());
      buffer.consume(got);
    } else {
      while (got == 0 && !ec) {
        Lowest().expires_after(options.read_timeout);
        ec = WithStream([&](auto& s) {
          return Run([&](auto handler) {
            s.async_read_some(asio::buffer(buf, want),
                              [&got, handler](error_code e, size_t k) mutable {
                                got = k;
                                handler(e);
                              });
          });
        });
      }
    }
    body_read += got;
    body_left -= got;
    if (got > 0) return got;
    return BodyError(ec);
  }

  absl::StatusOr<size_t> Read(uint8_t* buf, size_t n) {
    if (direct) return ReadDirect(buf, n);
    while (true) {
      if (parser->is_done() || n == 0) return 0;
      auto& body = parser->get().body();
      body.data = buf;
      body.size = n;
      Lowest().expires_after(options.read_timeout);
      error_code ec = WithStream([&](auto& s) {
        return Run([&](auto handler) { http::async_read_some(s, buffer, *parser, handler); });
      });
      if (ec == http::error::need_buffer) ec = {};
      size_t got = n - body.size;
      body_read += got;
      if (ec) return BodyError(ec);
      if (got > 0) return got;
    }
  }
};

HttpSource::HttpSource(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpSource::~HttpSource() = default;
const HttpResponseInfo& HttpSource::info() const { return impl_->info; }

absl::StatusOr<std::unique_ptr<HttpSource>> HttpSource::Open(std::string_view url,
                                                             const HttpOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  WISP_RETURN_IF_ERROR(impl->Open(url));
  return std::unique_ptr<HttpSource>(new HttpSource(std::move(impl)));
}

absl::StatusOr<size_t> HttpSource::Read(uint8_t* buf, size_t n) { return impl_->Read(buf, n); }

}  // namespace wisp::populator
