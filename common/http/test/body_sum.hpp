#pragma once
// What the server tests' streaming handlers do with an upload: read it to its end, counting its
// bytes and summing them, so the answer proves every byte arrived.
#include <cstdint>
#include <string_view>
#include <vector>

#include "wisp/http/server.hpp"

namespace wisp::http::test_support {

inline uint64_t Sum(std::string_view s) {
  uint64_t sum = 0;
  for (unsigned char c : s) sum += c;
  return sum;
}

struct BodySum {
  uint64_t len = 0;
  uint64_t sum = 0;
};

// The whole body's length and byte sum, or the first failed read's status.
inline absl::StatusOr<BodySum> SumBody(BodyReader& body) {
  BodySum out;
  std::vector<char> buf(64 * 1024);
  for (;;) {
    auto got = body.Read(buf.data(), buf.size());
    if (!got.ok()) return got.status();
    if (*got == 0) return out;
    out.sum += Sum(std::string_view(buf.data(), *got));
    out.len += *got;
  }
}

}  // namespace wisp::http::test_support
