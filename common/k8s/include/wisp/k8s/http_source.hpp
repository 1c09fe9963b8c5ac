#pragma once
// CDI's http import source as wisp applies it: a DataVolume's spec.source.http, CDI's
// cdi.kubevirt.io VolumeImportSource's spec.source.http and wisp.dev's VolumeImportSource's
// spec.source.http. One reading for wisp-policy (admission) and the gateway's DataVolume
// controller (objects that got in without admission), so both refuse the same fields in the same
// words and never accept a field that the import then ignores.
//
// Contract (CDI v1.66's fields, pkg/importer/http-datasource.go):
//   - url, checksum/sha256 are the callers' business.
//   - secretRef and secretExtraHeaders (credentials from Secrets) are refused: an import's source
//     is stored in JetStream (the wisp_sources bucket and the populate job stream), and a
//     Secret's values must not be stored outside the apiserver. An empty secretRef ("") and an
//     empty list are CDI's "none" and pass.
//   - insecureSkipVerify: true is refused (wisp always verifies the server); false passes.
//   - certConfigMap (a ConfigMap name) is applied: its values are CA certificates trusted besides
//     the system roots, as CDI's importer does.
//   - extraHeaders are applied: each "Name: value" (split at the first colon, the value trimmed
//     of spaces and tabs, as Go sends CDI's). Refused: a name that is not an HTTP token, a value
//     with control characters, a header the importer writes itself (Host, Content-Length,
//     Transfer-Encoding, Connection, Upgrade, TE, Trailer, Keep-Alive, Range, If-Range, Expect,
//     Proxy-Connection), and a name given twice (CDI would send both; wisp sends a header once).
//   - Anything else in `http` is left to the caller (the CRD schemas prune unknown fields).
//
// Example:
//   std::vector<std::string> causes;
//   HttpSourceExtras extras = ReadHttpSource(http, "spec.source.http", causes);
//   if (!causes.empty()) return Deny(causes);
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "wisp/k8s/json.hpp"

namespace wisp::k8s {

// What of an http source, beyond its URL and checksum, wisp applies.
struct HttpSourceExtras {
  std::string cert_config_map;  // certConfigMap: a ConfigMap of the source's namespace
  // extraHeaders, parsed: (name, value) in order.
  std::vector<std::pair<std::string, std::string>> headers;
};

// Reads `http` (the object at `prefix`, e.g. "spec.source.http"); appends one cause per field
// wisp refuses, each "<prefix>.<field>: <reason>".
HttpSourceExtras ReadHttpSource(const Json& http, std::string_view prefix,
                                std::vector<std::string>& causes);

}  // namespace wisp::k8s
