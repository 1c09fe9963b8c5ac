#pragma once
// `wispctl token issue|verify|exchange`: wisp-token's endpoints from the command line.
//
//   wispctl token issue --namespace ml --service-account loader --audience vault [--json]
//   wispctl token verify --token-file t.jwt [--audience vault]        (exit 1 when refused)
//   wispctl token verify --token-file t.jwt --jwks-file jwks.json --issuer https://...  (offline)
//   wispctl token exchange --token-file t.jwt --audience storage.wisp.dev [--scope s]
//
// Tokens are printed only to stdout and only when asked for (issue/exchange); errors never
// contain a token.
#include <string>
#include <vector>

#include "wisp/status/status.hpp"

namespace wisp::wispctl {

int RunToken(const std::vector<std::string>& args);

// Splits "a,b , c" into {"a","b","c"} (empty items dropped).
std::vector<std::string> SplitList(const std::string& text);

}  // namespace wisp::wispctl
