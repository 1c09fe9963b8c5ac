#include <cctype>
#include <charconv>

#include "wisp/http/server.hpp"

namespace wisp::http {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string UrlDecode(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '+') {
      out.push_back(' ');
    } else if (in[i] == '%' && i + 2 < in.size() && HexValue(in[i + 1]) >= 0 &&
               HexValue(in[i + 2]) >= 0) {
      out.push_back(static_cast<char>(HexValue(in[i + 1]) * 16 + HexValue(in[i + 2])));
      i += 2;
    } else {
      out.push_back(in[i]);
    }
  }
  return out;
}

std::string JsonEscape(std::string_view in) {
  std::string out;
  for (unsigned char c : in) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c < 0x20) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\u00";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xf]);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<HostPort> ParseHostPort(std::string_view field, std::string_view address) {
  const std::string quoted = std::string(field) + ": \"" + std::string(address) + "\"";
  const auto colon = address.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == address.size()) {
    return absl::InvalidArgumentError(quoted + " is not host:port");
  }
  const std::string_view digits = address.substr(colon + 1);
  int port = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
  if (ec != std::errc() || end != digits.data() + digits.size() || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(quoted + " has no valid port");
  }
  HostPort out;
  out.port = static_cast<uint16_t>(port);
  std::string_view host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  out.host = host.empty() ? "0.0.0.0" : std::string(host);
  return out;
}

std::string_view Request::Header(std::string_view lower_name) const {
  auto it = headers.find(lower_name);
  return it == headers.end() ? std::string_view() : std::string_view(it->second);
}

std::optional<std::string> Request::Query(std::string_view name) const {
  std::string_view q = query;
  while (!q.empty()) {
    auto amp = q.find('&');
    std::string_view pair = q.substr(0, amp);
    auto eq = pair.find('=');
    if (UrlDecode(pair.substr(0, eq)) == name) {
      return eq == std::string_view::npos ? std::string() : UrlDecode(pair.substr(eq + 1));
    }
    if (amp == std::string_view::npos) break;
    q.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

Response Response::Json(int status, std::string body) {
  Response r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

Response Response::Error(int status, std::string_view message) {
  return Json(status, "{\"error\":\"" + JsonEscape(message) + "\"}");
}

Response Response::Text(int status, std::string body) {
  Response r;
  r.status = status;
  r.content_type = "text/plain; charset=utf-8";
  r.body = std::move(body);
  return r;
}

}  // namespace wisp::http
