// Fuzzes RFC 6902 patches: ApplyPatch of a hostile patch to a hostile document (the patch a policy
// answers is applied by kube-apiserver, and ApplyPatch checks it in tests and wispctl), and the
// round trip property of Diff: ApplyPatch(a, Diff(a, b)) == b for any two documents.
//
// Input: <document JSON> NUL <patch-or-second-document JSON>.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "wisp/k8s/json.hpp"
#include "wisp/k8s/json_patch.hpp"

namespace k8s = wisp::k8s;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  if (nul == std::string_view::npos) return 0;
  auto doc = k8s::ParseJson(in.substr(0, nul), "document");
  if (!doc.ok()) return 0;
  const std::string_view second = in.substr(nul + 1);
  (void)k8s::ApplyPatch(*doc, second);  // errors are fine; crashes and hangs are not

  auto other = k8s::ParseJson(second, "second document");
  if (!other.ok()) return 0;
  const k8s::Json patch = k8s::Diff(*doc, *other);
  auto applied = k8s::ApplyPatch(*doc, patch);
  if (!applied.ok() || *applied != *other)
    abort();  // Diff produced a patch that does not round-trip
  return 0;
}
