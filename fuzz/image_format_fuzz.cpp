// Fuzzes image format detection and the qcow2 header parser (the first bytes of an image that an
// importer downloads from a user-supplied URL).
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "image_format.hpp"

namespace populator = wisp::populator;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const populator::ImageFormat f = populator::DetectFormat(data, size);
  if (f.name.empty()) abort();  // every detection names its format
  (void)populator::IsCompression(f.kind);
  auto header = populator::ParseQcow2Header(data, size);
  if (header.ok() && f.kind != populator::FormatKind::kQcow2)
    abort();  // parsed what detection rejected
  return 0;
}
