#pragma once
// Absolute http(s) URLs, split the way wisp's HTTP clients connect and ask (host, port, target).
//
//   auto u = ParseUrl("https://[::1]:8443/v1/token?x=1#f", "sts-url");
//   // u->scheme "https", host "::1", port "8443", target "/v1/token?x=1"
//   ParseUrl("ftp://h/x", "url");  // InvalidArgument: url: scheme "ftp" is not supported ...
//
// The scheme is lower-cased; the port defaults to 80 or 443 and must be 1..65535; the fragment is
// dropped; user information ("user:pass@") is kept apart so callers can refuse it or keep it out
// of logs (Redacted()).
#include <string>
#include <string_view>

#include "wisp/status/status.hpp"

namespace wisp::http {

struct Url {
  std::string scheme;     // "http" | "https"
  std::string user_info;  // what stood before '@' in the authority, if anything
  std::string host;       // IPv6 without brackets
  std::string port;
  std::string target;  // path + query, "/" at least
  // scheme://host[:port]/path, without user info and query: safe for logs and messages.
  std::string Redacted() const;
};

// InvalidArgument naming `field` ("url: has no host") when `url` is not an absolute http(s) URL.
absl::StatusOr<Url> ParseUrl(std::string_view url, std::string_view field = "url");

}  // namespace wisp::http
