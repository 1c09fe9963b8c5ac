#include "wisp/jwt/base64url.hpp"

#include <array>
#include <cstdint>

namespace wisp::jwt {
namespace {

constexpr char kUrlAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
constexpr char kStdAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string Encode(std::string_view data, const char* alphabet, bool pad) {
  std::string out;
  out.reserve((data.size() + 2) / 3 * 4);
  size_t i = 0;
  const auto* p = reinterpret_cast<const uint8_t*>(data.data());
  for (; i + 3 <= data.size(); i += 3) {
    const uint32_t v = (uint32_t{p[i]} << 16) | (uint32_t{p[i + 1]} << 8) | p[i + 2];
    out.push_back(alphabet[(v >> 18) & 63]);
    out.push_back(alphabet[(v >> 12) & 63]);
    out.push_back(alphabet[(v >> 6) & 63]);
    out.push_back(alphabet[v & 63]);
  }
  const size_t rest = data.size() - i;
  if (rest == 1) {
    const uint32_t v = uint32_t{p[i]} << 16;
    out.push_back(alphabet[(v >> 18) & 63]);
    out.push_back(alphabet[(v >> 12) & 63]);
    if (pad) out.append("==");
  } else if (rest == 2) {
    const uint32_t v = (uint32_t{p[i]} << 16) | (uint32_t{p[i + 1]} << 8);
    out.push_back(alphabet[(v >> 18) & 63]);
    out.push_back(alphabet[(v >> 12) & 63]);
    out.push_back(alphabet[(v >> 6) & 63]);
    if (pad) out.push_back('=');
  }
  return out;
}

std::array<int8_t, 256> Table(const char* alphabet) {
  std::array<int8_t, 256> t{};
  t.fill(-1);
  for (int i = 0; i < 64; ++i) t[static_cast<uint8_t>(alphabet[i])] = static_cast<int8_t>(i);
  return t;
}

absl::StatusOr<std::string> Decode(std::string_view text, const std::array<int8_t, 256>& table,
                                   std::string_view what) {
  if (text.size() % 4 == 1) {
    return absl::InvalidArgumentError(std::string(what) + ": impossible length");
  }
  std::string out;
  out.reserve(text.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    const int8_t v = table[static_cast<uint8_t>(c)];
    if (v < 0) return absl::InvalidArgumentError(std::string(what) + ": invalid character");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  // Leftover bits must be zero, or two texts would decode to the same bytes.
  if (bits > 0 && (acc & ((1u << bits) - 1)) != 0) {
    return absl::InvalidArgumentError(std::string(what) + ": non-zero trailing bits");
  }
  return out;
}

}  // namespace

std::string Base64UrlEncode(std::string_view data) { return Encode(data, kUrlAlphabet, false); }

absl::StatusOr<std::string> Base64UrlDecode(std::string_view text) {
  static const auto table = Table(kUrlAlphabet);
  return Decode(text, table, "base64url");
}

std::string Base64Encode(std::string_view data) { return Encode(data, kStdAlphabet, true); }

absl::StatusOr<std::string> Base64Decode(std::string_view text) {
  static const auto table = Table(kStdAlphabet);
  if (text.size() % 4 != 0)
    return absl::InvalidArgumentError("base64: length is not a multiple of 4");
  size_t pad = 0;
  while (pad < 2 && pad < text.size() && text[text.size() - 1 - pad] == '=') ++pad;
  return Decode(text.substr(0, text.size() - pad), table, "base64");
}

}  // namespace wisp::jwt
