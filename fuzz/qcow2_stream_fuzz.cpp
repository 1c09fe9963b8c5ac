// Fuzzes the streaming qcow2-to-raw converter (a qcow2 image from a user-supplied URL, converted as
// it arrives) over hostile images, fed in odd chunk sizes. Checks that every write stays inside the
// virtual size, and that the result does not depend on how the stream was cut: the same image fed
// whole and in chunks must convert to the same disk or fail both times.
//
// Input: first byte picks the chunk size; the rest is the image. Seeds are qemu-img's
// (fuzz/corpus/qcow2_stream).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "qcow2_stream.hpp"

namespace populator = wisp::populator;

namespace {

// Disks above this are converted with their writes checked but not kept.
constexpr uint64_t kMaxKept = uint64_t{4} << 20;

struct Outcome {
  bool ok = false;
  std::string disk;
};

Outcome Run(const uint8_t* data, size_t size, size_t chunk) {
  Outcome out;
  uint64_t virtual_size = 0;
  auto write = [&](uint64_t at, const uint8_t* p, size_t n) {
    if (n == 0 || at >= virtual_size || n > virtual_size - at) abort();  // outside the disk
    if (virtual_size <= kMaxKept) std::copy(p, p + n, out.disk.begin() + static_cast<long>(at));
    return absl::OkStatus();
  };
  auto conv = populator::Qcow2StreamConverter::Create(data, std::min<size_t>(size, 512), write,
                                                      populator::Qcow2StreamOptions{});
  if (!conv.ok()) return out;
  virtual_size = (*conv)->virtual_size();
  if (virtual_size <= kMaxKept) out.disk.assign(virtual_size, '\0');
  for (size_t at = 0; at < size; at += chunk) {
    if (!(*conv)->Feed(data + at, std::min(chunk, size - at)).ok()) return out;
  }
  out.ok = (*conv)->Finish().ok();
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t chunk = 1 + static_cast<size_t>(data[0]) * 97;
  const Outcome whole = Run(data + 1, size - 1, size);
  const Outcome cut = Run(data + 1, size - 1, chunk);
  if (whole.ok != cut.ok || whole.disk != cut.disk) abort();  // depends on the chunking
  return 0;
}
