#include <cctype>

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
