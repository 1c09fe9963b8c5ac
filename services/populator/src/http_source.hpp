#pragma once
// HttpSource: an image body pulled through ByteSource::Read from a GET made by http::Client
// (common/http), so an image of any size passes through one buffer; a Content-Length body goes
// straight from the socket into the caller's buffer.
//
// - TLS verifies the peer against the system roots plus `ca_pem` (a custom CA bundle) and checks
//   the host name (or IP).
// - Extra request headers (from a secret reference) are sent but never logged or put in errors.
// - `range_start` > 0 asks for "Range: bytes=<start>-" (with If-Range when a validator is known);
//   info().partial says whether the server honoured it. A server that answers 200 instead sends
//   the whole body and the caller must start over.
// - Redirects (301/302/303/307/308) are followed up to max_redirects (the client's are off).
//
// Errors are http::Client's one mapping (wisp/http/client.hpp), all naming the URL without its
// query string or user info: "HTTP 404 Not Found from https://host/path" is NotFound; a TLS
// certificate failure is FailedPrecondition "... certificate verify failed (...)"; a timeout
// DeadlineExceeded; a body cut short Unavailable "HTTP body truncated: received N of M bytes";
// a 2xx other than 200/206 FailedPrecondition "unexpected HTTP ...".
//
//   HttpOptions opts; opts.ca_pem = ca;
//   WISP_ASSIGN_OR_RETURN(auto body, HttpSource::Open("https://mirror/cirros.qcow2.xz", opts));
//   std::optional<uint64_t> total = body->info().total_size;
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "byte_source.hpp"
#include "wisp/http/client.hpp"
#include "wisp/http/url.hpp"

namespace wisp::populator {

using http::ParseUrl;  // absolute http(s) URLs (wisp/http/url.hpp)
using http::Url;

struct HttpOptions {
  std::string ca_pem;
  std::map<std::string, std::string> headers;
  uint64_t range_start = 0;
  std::string if_range;  // an ETag or Last-Modified value from an earlier response
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(30)};
  std::chrono::milliseconds read_timeout{std::chrono::seconds(60)};
  int max_redirects = 5;
};

struct HttpResponseInfo {
  int status = 0;
  bool partial = false;                    // 206: the body starts at range_start
  std::optional<uint64_t> content_length;  // bytes of this body
  std::optional<uint64_t> total_size;      // bytes of the whole resource
  std::string etag;
  std::string last_modified;
  std::string final_url;  // redacted, after redirects
};

class HttpSource final : public ByteSource {
 public:
  static absl::StatusOr<std::unique_ptr<HttpSource>> Open(std::string_view url,
                                                          const HttpOptions& options);
  const HttpResponseInfo& info() const { return info_; }
  absl::StatusOr<size_t> Read(uint8_t* buf, size_t n) override;

 private:
  HttpSource(http::ResponseStreamPtr body, HttpResponseInfo info)
      : body_(std::move(body)), info_(std::move(info)) {}
  http::ResponseStreamPtr body_;
  HttpResponseInfo info_;
};

}  // namespace wisp::populator
