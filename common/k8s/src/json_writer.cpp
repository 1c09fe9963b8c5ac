#include "wisp/k8s/json_writer.hpp"

#include <charconv>
#include <cstdint>
#include <cstring>

namespace wisp::k8s {

namespace {

// Printable ASCII other than '"' and '\\' is written as it is.
constexpr bool Plain(unsigned char c) { return c >= 0x20 && c < 0x80 && c != '"' && c != '\\'; }

// The length of the prefix of `s` that is written as it is. Eight bytes at a time: most strings
// (keys, names, paths, images) are all plain, and escaping is on every admission answer.
size_t PlainPrefix(std::string_view s) {
  constexpr uint64_t kOnes = 0x0101010101010101ULL;
  constexpr uint64_t kHigh = 0x8080808080808080ULL;
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t x;
    std::memcpy(&x, s.data() + i, 8);
    const uint64_t quote = x ^ (kOnes * '"');
    const uint64_t backslash = x ^ (kOnes * '\\');
    // A byte below 0x20, at or above 0x80, or equal to '"' or '\\' sets its high bit here
    // (the standard "has a byte less than n" and "has a zero byte" tests).
    const uint64_t special = ((x - kOnes * 0x20) & ~x) | x | ((quote - kOnes) & ~quote) |
                             ((backslash - kOnes) & ~backslash);
    if ((special & kHigh) != 0) break;
  }
  while (i < s.size() && Plain(static_cast<unsigned char>(s[i]))) ++i;
  return i;
}

}  // namespace

bool AppendJsonString(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  const size_t plain = PlainPrefix(s);
  out.push_back('"');
  out.append(s.data(), plain);
  for (size_t i = plain; i < s.size(); ++i) {
    // A run of plain characters is copied at once.
    if (const size_t run = PlainPrefix(s.substr(i)); run > 0) {
      out.append(s.data() + i, run);
      i += run;
      if (i == s.size()) break;
    }
    const auto c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      default:
        break;
    }
    if (c < 0x20) {
      out += "\\u00";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    } else {
      // A UTF-8 sequence: lead byte, then 1-3 continuation bytes (no overlongs, no surrogates).
      const size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
      if (len == 0 || c > 0xF4 || i + len > s.size()) return false;
      for (size_t k = 1; k < len; ++k) {
        if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
      }
      const auto c1 = static_cast<unsigned char>(s[i + 1]);
      if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) || (c == 0xF0 && c1 < 0x90) ||
          (c == 0xF4 && c1 > 0x8F)) {
        return false;
      }
      out.append(s.substr(i, len));
      i += len - 1;
    }
  }
  out.push_back('"');
  return true;
}

void JsonWriter::Separate() {
  if (comma_) out_.push_back(',');
  comma_ = true;
}

JsonWriter& JsonWriter::Open(char c) {
  Separate();
  out_.push_back(c);
  comma_ = false;
  return *this;
}

JsonWriter& JsonWriter::Close(char c) {
  out_.push_back(c);
  comma_ = true;
  return *this;
}

JsonWriter& JsonWriter::Key(std::string_view key) {
  Separate();
  ok_ = AppendJsonString(out_, key) && ok_;
  out_.push_back(':');
  comma_ = false;
  return *this;
}

JsonWriter& JsonWriter::String(std::string_view value) {
  Separate();
  ok_ = AppendJsonString(out_, value) && ok_;
  return *this;
}

JsonWriter& JsonWriter::Int(int64_t value) {
  Separate();
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  out_.append(buf, end);
  return *this;
}

JsonWriter& JsonWriter::Bool(bool value) {
  Separate();
  out_ += value ? "true" : "false";
  return *this;
}

JsonWriter& JsonWriter::Raw(std::string_view json) {
  Separate();
  out_.append(json);
  return *this;
}

std::string JsonWriter::Take() {
  std::string out = std::move(out_);
  out_.clear();
  comma_ = false;
  ok_ = true;
  return out;
}

}  // namespace wisp::k8s
