#include "wisp/http/url.hpp"

#include <cctype>
#include <charconv>

namespace wisp::http {

std::string Url::Redacted() const {
  std::string path = target.substr(0, target.find('?'));
  bool default_port = (scheme == "http" && port == "80") || (scheme == "https" && port == "443");
  return scheme + "://" + host + (default_port ? "" : ":" + port) + path;
}

absl::StatusOr<Url> ParseUrl(std::string_view url, std::string_view field) {
  Url out;
  auto bad = [&](std::string why) {
    return absl::InvalidArgumentError(std::string(field) + ": " + why);
  };
  size_t sep = url.find("://");
  if (sep == std::string_view::npos) return bad("not an absolute URL (want http:// or https://)");
  for (char c : url.substr(0, sep)) out.scheme.push_back(static_cast<char>(std::tolower(c)));
  if (out.scheme != "http" && out.scheme != "https") {
    return bad("scheme \"" + out.scheme + "\" is not supported (want http or https)");
  }
  std::string_view rest = url.substr(sep + 3);
  size_t slash = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, slash);
  out.target = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
  if (size_t hash = out.target.find('#'); hash != std::string::npos) out.target.resize(hash);
  if (out.target.empty() || out.target[0] != '/') out.target = "/" + out.target;
  if (size_t at = authority.rfind('@'); at != std::string_view::npos) {
    out.user_info = std::string(authority.substr(0, at));
    authority.remove_prefix(at + 1);
  }
  std::string_view port;
  if (!authority.empty() && authority[0] == '[') {
    size_t close = authority.find(']');
    if (close == std::string_view::npos) return bad("unterminated IPv6 address");
    out.host = std::string(authority.substr(1, close - 1));
    if (close + 1 < authority.size() && authority[close + 1] == ':')
      port = authority.substr(close + 2);
  } else {
    size_t colon = authority.rfind(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  if (out.host.empty()) return bad("has no host");
  if (!port.empty()) {
    int p = 0;
    auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
    if (ec != std::errc() || ptr != port.data() + port.size() || p <= 0 || p > 65535) {
      return bad("port \"" + std::string(port) + "\" is not a number in 1..65535");
    }
    out.port = std::string(port);
  } else {
    out.port = out.scheme == "https" ? "443" : "80";
  }
  return out;
}

}  // namespace wisp::http
