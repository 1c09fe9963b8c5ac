// Fuzzes k8s::ParseJson against nlohmann's own parser: ParseJson reads with simdjson and builds
// the tree from its DOM, and must accept exactly the texts nlohmann accepts and build the same
// value from them (json.hpp's contract). Every object from outside goes through ParseJson.
//
// Input: any bytes, parsed as one JSON text.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "wisp/k8s/json.hpp"

namespace k8s = wisp::k8s;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto ours = k8s::ParseJson(text, "fuzz input");
  k8s::Json theirs;
  bool theirs_ok = true;
  try {
    theirs = k8s::Json::parse(text.begin(), text.end());
  } catch (const k8s::Json::exception&) {
    theirs_ok = false;
  }
  if (ours.ok() != theirs_ok) abort();  // one parser accepts what the other refuses
  if (theirs_ok && (*ours != theirs || ours->dump() != theirs.dump())) abort();  // different values
  return 0;
}
