#include "decompress.hpp"

#include <lzma.h>
#include <zlib.h>
#include <zstd.h>

#include <vector>

namespace wisp::populator {
namespace {

constexpr size_t kInBuf = 1 << 20;

class GzipSource final : public ByteSource {
 public:
  explicit GzipSource(ByteSource& inner) : inner_(inner), in_(kInBuf) {}
  ~GzipSource() override {
    if (init_) inflateEnd(&zs_);
  }
  absl::Status Init() {
    // 15 + 32: zlib or gzip header, detected automatically.
    if (inflateInit2(&zs_, 15 + 32) != Z_OK) return absl::InternalError("gz: inflateInit2 failed");
    init_ = true;
    return absl::OkStatus();
  }

  absl::StatusOr<size_t> Read(uint8_t* buf, size_t n) override {
    if (n == 0) return 0;
    zs_.next_out = buf;
    zs_.avail_out = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    while (zs_.avail_out == static_cast<uInt>(std::min<size_t>(n, 1u << 30))) {
      if (zs_.avail_in == 0 && !eof_) {
        WISP_ASSIGN_OR_RETURN(size_t got, inner_.Read(in_.data(), in_.size()));
        if (got == 0) {
          eof_ = true;
        } else {
          zs_.next_in = in_.data();
          zs_.avail_in = static_cast<uInt>(got);
        }
      }
      if (zs_.avail_in == 0 && eof_) {
        if (member_done_) return 0;
        return absl::DataLossError("gz: compressed stream is truncated");
      }
      if (member_done_) {
        // Another gzip member follows (pigz and `cat a.gz b.gz` produce these).
        inflateReset(&zs_);
        member_done_ = false;
      }
      int rc = inflate(&zs_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        member_done_ = true;
      } else if (rc == Z_BUF_ERROR) {
        continue;  // needs more input
      } else if (rc != Z_OK) {
        return absl::DataLossError(std::string("gz: invalid compressed data (") +
                                   (zs_.msg ? zs_.msg : "zlib error " + std::to_string(rc)) + ")");
      }
    }
    return static_cast<size_t>(zs_.next_out - buf);
  }

 private:
  ByteSource& inner_;
  std::vector<uint8_t> in_;
  z_stream zs_{};
  bool init_ = false;
  bool eof_ = false;
  bool member_done_ = false;
};

class XzSource final : public ByteSource {
 public:
  explicit XzSource(ByteSource& inner) : inner_(inner), in_(kInBuf) {}
  ~XzSource() override { lzma_end(&ls_); }
  absl::Status Init() {
    if (lzma_stream_decoder(&ls_, UINT64_MAX, LZMA_CONCATENATED) != LZMA_OK) {
      return absl::InternalError("xz: lzma_stream_decoder failed");
    }
    return absl::OkStatus();
  }

  absl::StatusOr<size_t> Read(uint8_t* buf, size_t n) override {
    if (done_ || n == 0) return 0;
    ls_.next_out = buf;
    ls_.avail_out = n;
    while (ls_.avail_out == n) {
      lzma_action action = LZMA_RUN;
      if (ls_.avail_in == 0 && !eof_) {
        WISP_ASSIGN_OR_RETURN(size_t got, inner_.Read(in_.data(), in_.size()));
        if (got == 0) {
          eof_ = true;
        } else {
          ls_.next_in = in_.data();
          ls_.avail_in = got;
        }
      }
      if (eof_) action = LZMA_FINISH;
      lzma_ret rc = lzma_code(&ls_, action);
      if (rc == LZMA_STREAM_END) {
        done_ = true;
        break;
      }
      if (rc == LZMA_BUF_ERROR && eof_)
        return absl::DataLossError("xz: compressed stream is truncated");
      if (rc != LZMA_OK && rc != LZMA_BUF_ERROR) {
        return absl::DataLossError("xz: invalid compressed data (lzma error " +
                                   std::to_string(static_cast<int>(rc)) + ")");
      }
    }
    return n - ls_.avail_out;
  }

 private:
  ByteSource& inner_;
  std::vector<uint8_t> in_;
  lzma_stream ls_ = LZMA_STREAM_INIT;
  bool eof_ = false;
  bool done_ = false;
};

class ZstdSource final : public ByteSource {
 public:
  explicit ZstdSource(ByteSource& inner)
      : inner_(inner), in_(ZSTD_DStreamInSize() * 8), ds_(ZSTD_createDStream()) {}
  ~ZstdSource() override { ZSTD_freeDStream(ds_); }
  absl::Status Init() {
    if (ds_ == nullptr || ZSTD_isError(ZSTD_initDStream(ds_))) {
      return absl::InternalError("zst: ZSTD_initDStream failed");
    }
    return absl::OkStatus();
  }

  absl::StatusOr<size_t> Read(uint8_t* buf, size_t n) override {
    ZSTD_outBuffer out{buf, n, 0};
    while (out.pos == 0 && n > 0) {
      if (in_buf_.pos == in_buf_.size && !eof_) {
        WISP_ASSIGN_OR_RETURN(size_t got, inner_.Read(in_.data(), in_.size()));
        if (got == 0) eof_ = true;
        in_buf_ = ZSTD_inBuffer{in_.data(), got, 0};
      }
      // With no input left this still flushes what the decoder holds.
      size_t in_before = in_buf_.pos;
      size_t rc = ZSTD_decompressStream(ds_, &out, &in_buf_);
      if (ZSTD_isError(rc)) {
        return absl::DataLossError(std::string("zst: invalid compressed data (") +
                                   ZSTD_getErrorName(rc) + ")");
      }
      // 0 means a frame ended and was flushed; only calls that made progress update it (an idle
      // decoder between frames answers with a size hint instead).
      if (in_buf_.pos != in_before || out.pos != 0) frame_done_ = rc == 0;
      if (eof_ && in_buf_.pos == in_buf_.size && out.pos == 0) {
        if (!frame_done_) return absl::DataLossError("zst: compressed stream is truncated");
        return 0;
      }
    }
    return out.pos;
  }

 private:
  ByteSource& inner_;
  std::vector<uint8_t> in_;
  ZSTD_DStream* ds_;
  ZSTD_inBuffer in_buf_{nullptr, 0, 0};
  bool frame_done_ = false;
  bool eof_ = false;
};

template <typename T>
absl::StatusOr<ByteSourcePtr> Make(ByteSource& inner) {
  auto src = std::make_unique<T>(inner);
  WISP_RETURN_IF_ERROR(src->Init());
  return ByteSourcePtr(std::move(src));
}

}  // namespace

absl::StatusOr<ByteSourcePtr> MakeDecompressor(FormatKind kind, ByteSource& inner) {
  switch (kind) {
    case FormatKind::kGzip:
      return Make<GzipSource>(inner);
    case FormatKind::kXz:
      return Make<XzSource>(inner);
    case FormatKind::kZstd:
      return Make<ZstdSource>(inner);
    default:
      return absl::InvalidArgumentError("not a compression format");
  }
}

}  // namespace wisp::populator
