// Fuzzes the STS endpoint's application/x-www-form-urlencoded parser (RFC 8693 token-exchange
// bodies from the token sidecar, or from anyone who reaches the gateway's HTTPS port).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "oidc/oidc_routes.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view body(reinterpret_cast<const char*>(data), size);
  auto form = wisp::gateway::oidc::ParseForm(body);
  if (!form.ok()) return 0;
  size_t total = 0;
  for (const auto& [name, value] : *form) total += name.size() + value.size();
  if (total > size) abort();  // decoding never makes the form bigger than its encoding
  return 0;
}
