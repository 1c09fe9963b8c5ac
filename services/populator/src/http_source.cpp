#include "http_source.hpp"

namespace wisp::populator {

absl::StatusOr<std::unique_ptr<HttpSource>> HttpSource::Open(std::string_view url,
                                                             const HttpOptions& options) {
  // Like CDI's importer, a custom CA adds to the system roots rather than replacing them.
  WISP_ASSIGN_OR_RETURN(http::ClientPtr client,
                        http::NewClient({.tls = {.ca_pem = options.ca_pem, .system_roots = true},
                                         .connect_timeout = options.connect_timeout,
                                         .read_timeout = options.read_timeout,
                                         .max_redirects = options.max_redirects,
                                         .user_agent = "wisp-populator/" WISP_VERSION,
                                         .max_idle_per_host = 0,
                                         .name = "http-source"}));
  http::ClientRequest req{.url = std::string(url)};
  for (const auto& [k, v] : options.headers) req.headers.emplace_back(k, v);
  if (options.range_start > 0) {
    req.range_start = options.range_start;
    req.if_range = options.if_range;
  }
  WISP_ASSIGN_OR_RETURN(http::ResponseStreamPtr body, client->Open(req));
  const http::ClientResponse& res = body->response();
  WISP_RETURN_IF_ERROR(http::StatusOf(res));
  if (res.status != 200 && res.status != 206) {
    return absl::FailedPreconditionError("unexpected HTTP " + std::to_string(res.status) + " " +
                                         res.reason + " from " + res.url);
  }
  HttpResponseInfo info;
  info.status = res.status;
  info.partial = res.status == 206;
  info.content_length = res.content_length;
  info.etag = std::string(res.Header("etag"));
  info.last_modified = std::string(res.Header("last-modified"));
  info.final_url = res.url;
  if (info.partial) {
    if (res.content_range->first != options.range_start) {
      return absl::UnavailableError("server resumed at byte " +
                                    std::to_string(res.content_range->first) + ", asked for " +
                                    std::to_string(options.range_start));
    }
    info.total_size = res.content_range->total;
  } else {
    info.total_size = info.content_length;
  }
  return std::unique_ptr<HttpSource>(new HttpSource(std::move(body), std::move(info)));
}

absl::StatusOr<size_t> HttpSource::Read(uint8_t* buf, size_t n) {
  return body_->Read(reinterpret_cast<char*>(buf), n);
}

}  // namespace wisp::populator
