#include "wisp/k8s/json_writer.hpp"

#include <charconv>

namespace wisp::k8s {

namespace {

// Printable ASCII other than '"' and '\\' is written as it is.
constexpr bool Plain(unsigned char c) { return c >= 0x20 && c < 0x80 && c != '"' && c != '\\'; }

}  // namespace

bool AppendJsonString(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  for (size_t i = 0; i < s.size(); ++i) {
    // A run of plain characters (most strings are one) is copied at once.
    size_t run = i;
    while (run < s.size() && Plain(static_cast<unsigned char>(s[run]))) ++run;
    if (run > i) {
      out.append(s.data() + i, run - i);
      if (run == s.size()) break;
      i = run;
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
    } else if (c < 0x80) {
      out.push_back(static_cast<char>(c));
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
