#include "qcow2_stream.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <unordered_set>
#include <vector>

#include "sparse_writer.hpp"

namespace wisp::populator {
namespace {

// Field layouts from qemu's docs/interop/qcow2.txt.
constexpr uint64_t kL1OffsetMask = 0x00fffffffffffe00ULL;
constexpr uint64_t kL2OffsetMask = 0x00fffffffffffe00ULL;
constexpr uint64_t kOflagCompressed = 1ULL << 62;
constexpr uint64_t kOflagZero = 1ULL;
constexpr uint64_t kCompressedSector = 512;
constexpr uint64_t kMaxL1Bytes = 32 << 20;  // qemu's QCOW_MAX_L1_SIZE
constexpr uint64_t kIncompatCompressionType = 1u << 3;
// Requests for host ranges still ahead of the stream; about 100 bytes each. A qemu-written image
// has at most one L2 table's worth ahead; this bound only stops a hostile table from costing
// gigabytes of memory.
constexpr size_t kMaxPending = 4u << 20;
constexpr size_t kZeroBlock = 4096;

uint64_t Be64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

bool AllZero(const uint8_t* p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    if (v != 0) return false;
  }
  for (; i < n; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

enum class Kind : uint8_t { kL1, kL2, kData, kCompressed };

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kL1:
      return "L1 table";
    case Kind::kL2:
      return "L2 table";
    case Kind::kData:
      return "data cluster";
    case Kind::kCompressed:
      return "compressed cluster";
  }
  return "?";
}

struct Request {
  Kind kind;
  uint64_t host;    // first byte in the image
  uint64_t length;  // bytes
  uint64_t guest;   // first guest byte it maps (the L1 table: 0)
  uint64_t filled = 0;
  std::unique_ptr<uint8_t[]> buf;  // everything but kData (written as it passes)
};

// Bytes no request had claimed when the stream passed them, by host offset.
struct Piece {
  uint64_t length = 0;
  std::vector<uint8_t> mem;  // empty when spilled to the file at the same offset
};

}  // namespace

bool Qcow2Streamable(const Qcow2Header& h) {
  return (h.incompatible_features & (kQcow2IncompatExtendedL2 | kIncompatCompressionType)) == 0;
}

struct Qcow2StreamConverter::Impl {
  Qcow2Header h;
  uint64_t cluster = 0;
  uint64_t l2_entries = 0;
  uint64_t l1_bytes = 0;  // the part of the L1 table the virtual size needs
  RawWriteFn write;
  Qcow2StreamOptions options;

  uint64_t pos = 0;
  std::multimap<uint64_t, Request> pending;  // host >= pos
  std::vector<Request> active;               // host < pos < host + length
  std::vector<Request> done;                 // filled, waiting to be processed
  bool l1_done = false;
  size_t l2_outstanding = 0;
  std::unordered_set<uint64_t> l2_clusters;  // host cluster numbers of the L2 tables

  bool stash_on = true;
  bool stash_dropped = false;
  std::map<uint64_t, Piece> stash;
  uint64_t stash_mem = 0, stash_total = 0, peak = 0;
  int spill_fd = -1;

  z_stream zs{};
  bool zs_ready = false;
  std::vector<uint8_t> cluster_buf;
  std::vector<uint8_t> behind_buf;
  uint64_t written = 0;

  ~Impl() {
    DropStash();
    if (zs_ready) inflateEnd(&zs);
  }

  void DropStash() {
    stash.clear();
    stash_mem = stash_total = 0;
    if (spill_fd >= 0) {
      ::close(spill_fd);
      ::unlink(options.spill_path.c_str());
      spill_fd = -1;
    }
  }

  // Writes guest bytes, skipping all-zero 4 KiB blocks (the output starts as one hole).
  absl::Status WriteGuest(uint64_t guest, const uint8_t* p, size_t n) {
    if (guest >= h.virtual_size) return absl::OkStatus();
    n = static_cast<size_t>(std::min<uint64_t>(n, h.virtual_size - guest));
    size_t i = 0;
    while (i < n) {
      size_t run = i;
      bool zero = true;
      while (i < n) {
        size_t len = std::min<size_t>(kZeroBlock - (guest + i) % kZeroBlock, n - i);
        bool z = AllZero(p + i, len);
        if (i > run && z != zero) break;
        zero = z;
        i += len;
      }
      if (!zero) {
        WISP_RETURN_IF_ERROR(write(guest + run, p + run, i - run));
        written += i - run;
      }
    }
    return absl::OkStatus();
  }

  void Stash(uint64_t at, const uint8_t* p, uint64_t n) {
    if (at < cluster) {  // the header cluster never holds anything else
      uint64_t skip = std::min(n, cluster - at);
      at += skip;
      p += skip;
      n -= skip;
    }
    if (n == 0) return;
    auto last = stash.empty() ? stash.end() : std::prev(stash.end());
    bool contiguous = last != stash.end() && last->first + last->second.length == at;
    if (stash_mem + n <= options.stash_memory) {
      if (contiguous && !last->second.mem.empty()) {
        last->second.mem.insert(last->second.mem.end(), p, p + n);
        last->second.length += n;
      } else {
        Piece piece;
        piece.length = n;
        piece.mem.assign(p, p + n);
        stash.emplace(at, std::move(piece));
      }
      stash_mem += n;
    } else {
      if (spill_fd < 0 && !options.spill_path.empty()) {
        spill_fd = ::open(options.spill_path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      }
      uint64_t done_bytes = 0;
      while (spill_fd >= 0 && done_bytes < n) {
        ssize_t w =
            ::pwrite(spill_fd, p + done_bytes, n - done_bytes, static_cast<off_t>(at + done_bytes));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        done_bytes += static_cast<uint64_t>(w);
      }
      if (done_bytes < n) {  // a later request for these bytes fails, naming the cause
        stash_dropped = true;
        return;
      }
      if (contiguous && last->second.mem.empty()) {
        last->second.length += n;
      } else {
        stash.emplace(at, Piece{n, {}});
      }
    }
    stash_total += n;
    peak = std::max(peak, stash_total);
  }

  // Copies [at, at + n) from the stash; false when any of it is not there.
  bool Unstash(uint64_t at, uint8_t* out, uint64_t n) {
    while (n > 0) {
      auto it = stash.upper_bound(at);
      if (it == stash.begin()) return false;
      --it;
      const uint64_t end = it->first + it->second.length;
      if (end <= at) return false;
      const uint64_t take = std::min(n, end - at);
      if (!it->second.mem.empty()) {
        std::memcpy(out, it->second.mem.data() + (at - it->first), take);
      } else {
        uint64_t got = 0;
        while (got < take) {
          ssize_t r = ::pread(spill_fd, out + got, take - got, static_cast<off_t>(at + got));
          if (r < 0 && errno == EINTR) continue;
          if (r <= 0) return false;
          got += static_cast<uint64_t>(r);
        }
      }
      at += take;
      out += take;
      n -= take;
    }
    return true;
  }

  absl::Status Corrupt(const std::string& what) {
    return absl::InvalidArgumentError("qcow2 image is corrupt: " + what);
  }

  // Checks that a mapped host range keeps out of the header cluster and the tables.
  absl::Status CheckHostRange(Kind kind, uint64_t host, uint64_t length, uint64_t guest) {
    const std::string who = std::string(KindName(kind)) + " for guest offset " + Hex(guest) +
                            " at host offset " + Hex(host);
    if (host < cluster) return Corrupt(who + " lies in the header cluster");
    const uint64_t l1_start = h.l1_table_offset, l1_end = l1_start + l1_bytes;
    if (kind != Kind::kL1 && host < l1_end && l1_start < host + length) {
      return Corrupt(who + " overlaps the L1 table");
    }
    if (kind == Kind::kL2) {
      if (l2_clusters.count(host / cluster)) return Corrupt(who + " is used twice");
    } else if (kind != Kind::kL1) {
      for (uint64_t c = host / cluster; c <= (host + length - 1) / cluster; ++c) {
        if (l2_clusters.count(c)) return Corrupt(who + " overlaps an L2 table");
      }
    }
    return absl::OkStatus();
  }

  absl::Status Add(Kind kind, uint64_t host, uint64_t length, uint64_t guest) {
    WISP_RETURN_IF_ERROR(CheckHostRange(kind, host, length, guest));
    if (kind == Kind::kL2) {
      l2_clusters.insert(host / cluster);
      ++l2_outstanding;
    }
    Request r{kind, host, length, guest, 0, nullptr};
    if (host >= pos) {
      if (pending.size() >= kMaxPending) {
        return absl::InvalidArgumentError(
            "qcow2 image maps more than " + std::to_string(kMaxPending) +
            " clusters ahead of where the stream is; such a layout cannot be imported as a stream");
      }
      pending.emplace(host, std::move(r));
      return absl::OkStatus();
    }
    // The range starts behind the stream: the part already passed must be in the stash.
    const uint64_t behind = std::min(length, pos - host);
    uint8_t* dst;
    if (kind == Kind::kData) {
      behind_buf.resize(behind);
      dst = behind_buf.data();
    } else {
      r.buf.reset(new uint8_t[length]);
      dst = r.buf.get();
    }
    if (!stash_on || !Unstash(host, dst, behind)) {
      return absl::InvalidArgumentError(
          "qcow2 image cannot be imported as a stream: its " + std::string(KindName(kind)) +
          " for guest offset " + Hex(guest) + " at host offset " + Hex(host) +
          " comes before the table that maps it, and those bytes were " +
          (stash_dropped ? "more than the converter keeps (" +
                               std::to_string(options.stash_memory >> 20) + " MiB in memory" +
                               (options.spill_path.empty() ? "" : " plus a failed spill file") + ")"
                         : "already used for another part of the image (clusters mapped twice?)"));
    }
    if (kind == Kind::kData) WISP_RETURN_IF_ERROR(WriteGuest(guest, dst, behind));
    r.filled = behind;
    if (behind == length) {
      done.push_back(std::move(r));
    } else {
      active.push_back(std::move(r));
    }
    return absl::OkStatus();
  }

  absl::Status ProcessL1(const Request& r) {
    const uint64_t coverage = l2_entries * cluster;
    for (uint64_t i = 0; i < l1_bytes / 8; ++i) {
      const uint64_t e = Be64(r.buf.get() + i * 8);
      const uint64_t off = e & kL1OffsetMask;
      if (off == 0) continue;  // no L2 table: that stretch reads as zeros
      if (off % cluster != 0) {
        return Corrupt("L1 entry " + std::to_string(i) + " points to unaligned L2 table offset " +
                       Hex(off));
      }
      WISP_RETURN_IF_ERROR(Add(Kind::kL2, off, cluster, i * coverage));
    }
    l1_done = true;
    return absl::OkStatus();
  }

  absl::Status ProcessL2(const Request& r) {
    --l2_outstanding;
    const uint32_t csize_shift = 62 - (h.cluster_bits - 8);
    const uint64_t csize_mask = (1ULL << (h.cluster_bits - 8)) - 1;
    const uint64_t coffset_mask = (1ULL << csize_shift) - 1;
    for (uint64_t j = 0; j < l2_entries; ++j) {
      const uint64_t guest = r.guest + j * cluster;
      if (guest >= h.virtual_size) break;
      const uint64_t e = Be64(r.buf.get() + j * 8);
      if (e & kOflagCompressed) {
        const uint64_t coffset = e & coffset_mask;
        const uint64_t sectors = ((e >> csize_shift) & csize_mask) + 1;
        const uint64_t csize = sectors * kCompressedSector - (coffset & (kCompressedSector - 1));
        WISP_RETURN_IF_ERROR(Add(Kind::kCompressed, coffset, csize, guest));
        continue;
      }
      if (e & kOflagZero) continue;  // reads as zeros (with or without a preallocated cluster)
      const uint64_t off = e & kL2OffsetMask;
      if (off == 0) continue;  // unallocated
      if (off % cluster != 0) {
        return Corrupt("L2 entry for guest offset " + Hex(guest) + " points to unaligned offset " +
                       Hex(off));
      }
      WISP_RETURN_IF_ERROR(Add(Kind::kData, off, cluster, guest));
    }
    return absl::OkStatus();
  }

  absl::Status Inflate(const Request& r) {
    if (!zs_ready) {
      if (inflateInit2(&zs, -12) != Z_OK) return absl::InternalError("zlib inflateInit2 failed");
      zs_ready = true;
    } else {
      inflateReset(&zs);
    }
    cluster_buf.resize(cluster);
    zs.next_in = r.buf.get();
    zs.avail_in = static_cast<uInt>(r.length);
    zs.next_out = cluster_buf.data();
    zs.avail_out = static_cast<uInt>(cluster);
    const int ret = inflate(&zs, Z_FINISH);
    // As qemu: the cluster must come out whole; the input is only known to the sector.
    if (!((ret == Z_STREAM_END || ret == Z_BUF_ERROR) && zs.avail_out == 0)) {
      return absl::InvalidArgumentError("qcow2 compressed cluster for guest offset " +
                                        Hex(r.guest) + " at host offset " + Hex(r.host) +
                                        " does not decompress to a whole cluster");
    }
    return WriteGuest(r.guest, cluster_buf.data(), cluster);
  }

  absl::Status ProcessDone() {
    while (!done.empty()) {
      Request r = std::move(done.back());
      done.pop_back();
      switch (r.kind) {
        case Kind::kL1:
          WISP_RETURN_IF_ERROR(ProcessL1(r));
          break;
        case Kind::kL2:
          WISP_RETURN_IF_ERROR(ProcessL2(r));
          break;
        case Kind::kData:
          break;  // written as it went past
        case Kind::kCompressed:
          WISP_RETURN_IF_ERROR(Inflate(r));
          break;
      }
    }
    if (stash_on && l1_done && l2_outstanding == 0) {
      // Every mapping is known: nothing behind the stream can be asked for again.
      stash_on = false;
      DropStash();
    }
    return absl::OkStatus();
  }

  absl::Status Feed(const uint8_t* data, size_t n) {
    const uint64_t start = pos, end = pos + n;
    while (pos < end) {
      while (!pending.empty() && pending.begin()->first <= pos) {
        auto node = pending.extract(pending.begin());
        Request& r = node.mapped();
        if (r.kind != Kind::kData) r.buf.reset(new uint8_t[r.length]);
        active.push_back(std::move(r));
      }
      uint64_t seg_end = end;
      if (!pending.empty()) seg_end = std::min(seg_end, pending.begin()->first);
      uint64_t keep_from = active.empty() ? pos : UINT64_MAX;
      for (const Request& r : active) {
        seg_end = std::min(seg_end, r.host + r.length);
        // A compressed range is only known to the sector: its last sector may hold the start of
        // the next compressed cluster, mapped by a table still to come.
        if (r.kind == Kind::kCompressed) {
          keep_from = std::min(keep_from, (r.host + r.length - 1) & ~(kCompressedSector - 1));
        }
      }
      const uint8_t* seg = data + (pos - start);
      const uint64_t len = seg_end - pos;
      if (stash_on && keep_from < seg_end) {
        const uint64_t from = std::max(keep_from, pos);
        Stash(from, seg + (from - pos), seg_end - from);
      }
      for (Request& r : active) {
        const uint64_t off = pos - r.host;
        if (r.kind == Kind::kData) {
          WISP_RETURN_IF_ERROR(WriteGuest(r.guest + off, seg, len));
        } else {
          std::memcpy(r.buf.get() + off, seg, len);
        }
        r.filled += len;
      }
      pos = seg_end;
      for (size_t i = 0; i < active.size();) {
        if (active[i].filled == active[i].length) {
          done.push_back(std::move(active[i]));
          active[i] = std::move(active.back());
          active.pop_back();
        } else {
          ++i;
        }
      }
      WISP_RETURN_IF_ERROR(ProcessDone());
    }
    return absl::OkStatus();
  }

  absl::Status Finish() {
    const Request* missing = nullptr;
    for (const Request& r : active) {
      if (r.kind != Kind::kCompressed) missing = &r;
    }
    if (missing == nullptr && !pending.empty()) missing = &pending.begin()->second;
    if (missing != nullptr) {
      return absl::InvalidArgumentError(
          "qcow2 image is truncated or corrupt: its " + std::string(KindName(missing->kind)) +
          (missing->kind == Kind::kL1 ? "" : " for guest offset " + Hex(missing->guest)) +
          " at host offset " + Hex(missing->host) + " ends past the end of the image (" +
          std::to_string(pos) + " bytes)");
    }
    // The last compressed cluster's sector count may reach past the end of the file; qemu reads
    // zeros there, and the inflater decides whether the data was complete.
    for (Request& r : active) {
      std::memset(r.buf.get() + r.filled, 0, r.length - r.filled);
      r.filled = r.length;
      done.push_back(std::move(r));
    }
    active.clear();
    WISP_RETURN_IF_ERROR(ProcessDone());
    DropStash();
    return absl::OkStatus();
  }
};

Qcow2StreamConverter::Qcow2StreamConverter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Qcow2StreamConverter::~Qcow2StreamConverter() = default;

absl::StatusOr<std::unique_ptr<Qcow2StreamConverter>> Qcow2StreamConverter::Create(
    const uint8_t* head, size_t n, RawWriteFn write, Qcow2StreamOptions options) {
  WISP_ASSIGN_OR_RETURN(Qcow2Header h, ParseQcow2Header(head, n));
  if (h.has_backing_file) {
    return absl::InvalidArgumentError(
        "qcow2 image has a backing file; only standalone images can be imported");
  }
  if (h.crypt_method != 0) {
    return absl::InvalidArgumentError(
        "qcow2 image is encrypted; only unencrypted images can be imported");
  }
  if (!Qcow2Streamable(h)) {
    return absl::UnimplementedError(
        "qcow2 image uses extended L2 entries or a compression type other than zlib");
  }
  auto impl = std::make_unique<Impl>();
  impl->h = h;
  impl->cluster = 1ULL << h.cluster_bits;
  impl->l2_entries = impl->cluster / 8;
  impl->write = std::move(write);
  impl->options = std::move(options);
  const uint64_t coverage = impl->l2_entries * impl->cluster;
  const uint64_t l1_needed = h.virtual_size / coverage + (h.virtual_size % coverage != 0);
  if (l1_needed > h.l1_size) {
    return absl::InvalidArgumentError("qcow2 image is corrupt: its L1 table has " +
                                      std::to_string(h.l1_size) + " entries, the virtual size " +
                                      std::to_string(h.virtual_size) + " needs " +
                                      std::to_string(l1_needed));
  }
  if (l1_needed * 8 > kMaxL1Bytes) {
    return absl::InvalidArgumentError("qcow2 virtual size " + std::to_string(h.virtual_size) +
                                      " is too large for its cluster size");
  }
  impl->l1_bytes = l1_needed * 8;
  if (l1_needed == 0) {
    impl->l1_done = true;
    impl->stash_on = false;
    return std::unique_ptr<Qcow2StreamConverter>(new Qcow2StreamConverter(std::move(impl)));
  }
  if (h.l1_table_offset % impl->cluster != 0 || h.l1_table_offset > kL1OffsetMask) {
    return absl::InvalidArgumentError("qcow2 image is corrupt: L1 table offset " +
                                      Hex(h.l1_table_offset) + " is not cluster aligned");
  }
  WISP_RETURN_IF_ERROR(impl->Add(Kind::kL1, h.l1_table_offset, impl->l1_bytes, 0));
  return std::unique_ptr<Qcow2StreamConverter>(new Qcow2StreamConverter(std::move(impl)));
}

absl::Status Qcow2StreamConverter::Feed(const uint8_t* data, size_t n) {
  return impl_->Feed(data, n);
}
absl::Status Qcow2StreamConverter::Finish() { return impl_->Finish(); }
uint64_t Qcow2StreamConverter::virtual_size() const { return impl_->h.virtual_size; }
uint64_t Qcow2StreamConverter::bytes_written() const { return impl_->written; }
uint64_t Qcow2StreamConverter::stash_peak() const { return impl_->peak; }

namespace {

absl::Status Errno(const std::string& what, const std::string& path) {
  const int err = errno;
  std::string msg = what + " " + path + ": " + std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}

absl::StatusOr<Qcow2StreamResult> ConvertInto(
    int fd, ByteSource& image, const std::vector<uint8_t>& head, const std::string& part_path,
    const std::string& spill_path, std::vector<uint8_t>& buffer,
    const std::function<absl::Status(uint64_t)>& on_chunk) {
  WritebackWriter out(fd, part_path);
  auto write = [&out](uint64_t at, const uint8_t* p, size_t n) { return out.PWrite(p, n, at); };
  WISP_ASSIGN_OR_RETURN(auto conv,
                        Qcow2StreamConverter::Create(head.data(), head.size(), write,
                                                     Qcow2StreamOptions{.spill_path = spill_path}));
  for (;;) {
    WISP_ASSIGN_OR_RETURN(size_t got, image.Read(buffer.data(), buffer.size()));
    if (got == 0) break;
    WISP_RETURN_IF_ERROR(conv->Feed(buffer.data(), got));
    if (on_chunk) WISP_RETURN_IF_ERROR(on_chunk(conv->bytes_written()));
  }
  WISP_RETURN_IF_ERROR(conv->Finish());
  if (::ftruncate(fd, static_cast<off_t>(conv->virtual_size())) != 0) {
    return Errno("sizing", part_path);
  }
  return Qcow2StreamResult{conv->virtual_size(), conv->bytes_written()};
}

}  // namespace

absl::StatusOr<Qcow2StreamResult> ConvertQcow2Stream(
    ByteSource& image, const std::vector<uint8_t>& head, const std::string& part_path,
    const std::string& spill_path, std::vector<uint8_t>& buffer,
    const std::function<absl::Status(uint64_t bytes_written)>& on_chunk) {
  int fd = ::open(part_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
  if (fd < 0) return Errno("creating", part_path);
  auto result = ConvertInto(fd, image, head, part_path, spill_path, buffer, on_chunk);
  if (::close(fd) != 0 && result.ok()) result = Errno("closing", part_path);
  ::unlink(spill_path.c_str());
  if (!result.ok()) ::unlink(part_path.c_str());
  return result;
}

}  // namespace wisp::populator
