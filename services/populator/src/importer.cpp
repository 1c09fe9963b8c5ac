#include "importer.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "checksum.hpp"
#include "decompress.hpp"
#include "image_format.hpp"
#include "qcow2_stream.hpp"
#include "sparse_writer.hpp"

extern char** environ;

namespace wisp::populator {
namespace {

std::string Join(const std::string& dir, const char* name) { return dir + "/" + name; }

struct ResumePoint {
  std::string url;
  std::string validator;
  uint64_t offset = 0;
};

std::optional<ResumePoint> ReadResume(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  ResumePoint p;
  std::string offset;
  if (!std::getline(in, p.url) || !std::getline(in, p.validator) || !std::getline(in, offset)) {
    return std::nullopt;
  }
  auto [end, ec] = std::from_chars(offset.data(), offset.data() + offset.size(), p.offset);
  if (ec != std::errc() || end != offset.data() + offset.size()) return std::nullopt;
  return p;
}

absl::Status WriteResume(const std::string& path, const ResumePoint& p) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << p.url << "\n" << p.validator << "\n" << p.offset << "\n";
    out.flush();
    if (!out) return absl::InternalError("writing " + tmp);
  }
  int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError("renaming " + tmp + ": " + std::strerror(errno));
  }
  return absl::OkStatus();
}

// Sets the size of a finished temporary file, makes it durable and renames it into place.
absl::Status FinalizeFile(const std::string& temp, const std::string& dest, uint64_t size) {
  int fd = ::open(temp.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError("opening " + temp + ": " + std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  absl::Status status = absl::OkStatus();
  if (static_cast<uint64_t>(st.st_size) > size) {
    status = absl::OutOfRangeError("converted image of " + std::to_string(st.st_size) +
                                   " bytes is larger than the volume capacity of " +
                                   std::to_string(size) + " bytes");
  } else if (::ftruncate(fd, static_cast<off_t>(size)) != 0 || ::fsync(fd) != 0) {
    status = absl::InternalError("syncing " + temp + ": " + std::strerror(errno));
  }
  ::close(fd);
  WISP_RETURN_IF_ERROR(status);
  if (::rename(temp.c_str(), dest.c_str()) != 0) {
    return absl::InternalError("renaming " + temp + ": " + std::strerror(errno));
  }
  return SyncParentDir(dest);
}

// Runs qemu-img with `args`; on failure the message carries the tail of its stderr.
absl::Status RunQemuImg(const std::string& qemu_img, const std::vector<std::string>& args) {
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, pipefd[1], 2);
  std::vector<std::string> argv_s{qemu_img};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  int rc = ::posix_spawnp(&pid, qemu_img.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(pipefd[1]);
  if (rc != 0) {
    ::close(pipefd[0]);
    return absl::FailedPreconditionError("running " + qemu_img + ": " + std::strerror(rc));
  }
  std::string err;
  char buf[4096];
  for (;;) {
    ssize_t got = ::read(pipefd[0], buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    err.append(buf, static_cast<size_t>(got));
    if (err.size() > 16384) err.erase(0, err.size() - 8192);
  }
  ::close(pipefd[0]);
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) return absl::OkStatus();
  while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
  if (err.size() > 400) err = "..." + err.substr(err.size() - 400);
  return absl::InvalidArgumentError("qemu-img " + args.front() + " failed: " +
                                    (err.empty() ? "exit status " + std::to_string(wstatus) : err));
}

class Reporter {
 public:
  Reporter(const ProgressFn& fn, Clock& clock, std::chrono::milliseconds interval)
      : fn_(fn), clock_(clock), interval_(interval) {}
  absl::Status Report(const ImportProgress& p, bool force = false) {
    if (!fn_) return absl::OkStatus();
    auto now = clock_.Steady();
    if (!force && started_ && now - last_ < interval_) return absl::OkStatus();
    started_ = true;
    last_ = now;
    return fn_(p);
  }

 private:
  const ProgressFn& fn_;
  Clock& clock_;
  std::chrono::milliseconds interval_;
  std::chrono::steady_clock::time_point last_{};
  bool started_ = false;
};

// The digest is computed only when the spec asks for one (`sha` is then set): nothing to verify
// means no hashing and an empty result.
absl::Status CheckDigest(std::optional<PipelinedSha256>& sha, const std::string& want,
                         std::string* got_out) {
  if (!sha) return absl::OkStatus();
  std::string got = sha->HexDigest();
  *got_out = got;
  if (!want.empty() && got != want) {
    return absl::DataLossError("sha256 mismatch: the source's checksum is " + got + ", expected " +
                               want);
  }
  return absl::OkStatus();
}

}  // namespace

bool IsPermanent(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kUnimplemented:
    case absl::StatusCode::kAlreadyExists:
      return true;
    default:
      return false;
  }
}

Importer::Importer(Options options)
    : options_(std::move(options)),
      clock_(options_.clock ? *options_.clock : static_cast<Clock&>(SystemClock::Instance())) {}

void Importer::Cleanup(const std::string& dir) {
  for (const char* name : {kDiskPart, kResumeFile, kScratchQcow2}) {
    ::unlink(Join(dir, name).c_str());
  }
}

namespace {

constexpr size_t kPrefetchDepth = 8;  // chunks of buffer_size read ahead of the writer

// One run of an image import (HTTP or stream); holds the pipeline's state.
class ImageImport {
 public:
  ImageImport(const ImportSpec& spec, const Importer::Options& options, Clock& clock,
              const ProgressFn& progress)
      : spec_(spec),
        options_(options),
        clock_(clock),
        reporter_(progress, clock, options.progress_interval),
        buf_(options.buffer_size) {}

  absl::StatusOr<ImportResult> Run() {
    ByteSource* body = spec_.stream;
    std::optional<uint64_t> total = spec_.stream_size;
    uint64_t resume_offset = 0;
    if (spec_.kind == SourceKind::kHttp) {
      WISP_ASSIGN_OR_RETURN(resume_offset, OpenHttp());
      body = http_.get();
      total = http_->info().total_size;
    } else {
      Importer::Cleanup(spec_.dir);
    }
    if (body == nullptr) return absl::InvalidArgumentError("stream: no body to import");
    // The hasher sees the held prefix first, then every chunk the prefetcher reads, on its thread.
    if (!spec_.sha256.empty()) sha_.emplace();
    if (resume_offset > 0) WISP_RETURN_IF_ERROR(RehashPrefix(resume_offset));
    PrefetchSource ahead(*body, options_.buffer_size, kPrefetchDepth, sha_ ? &*sha_ : nullptr);
    HashingSource tap(ahead, nullptr);  // counts the bytes as served
    tap_ = &tap;
    progress_.total = total;
    progress_.stage = "download";
    if (resume_offset > 0) return ResumeRaw(resume_offset);
    WISP_RETURN_IF_ERROR(reporter_.Report(progress_, true));

    std::vector<uint8_t> head(kDetectBytes);
    WISP_ASSIGN_OR_RETURN(size_t got, ReadFull(tap, head.data(), head.size()));
    head.resize(got);
    if (got == 0) return absl::InvalidArgumentError("the source is empty (0 bytes)");
    ImageFormat outer = DetectFormat(head.data(), head.size());
    WISP_RETURN_IF_ERROR(CheckSupported(outer, ""));
    PrefixedSource replay(head, tap);
    ByteSource* image = &replay;
    ByteSourcePtr decompressor;
    std::unique_ptr<PrefixedSource> inner_replay;
    ImageFormat inner = outer;
    std::vector<uint8_t> inner_head = head;
    if (IsCompression(outer.kind)) {
      WISP_ASSIGN_OR_RETURN(decompressor, MakeDecompressor(outer.kind, replay));
      inner_head.assign(kDetectBytes, 0);
      WISP_ASSIGN_OR_RETURN(size_t n,
                            ReadFull(*decompressor, inner_head.data(), inner_head.size()));
      inner_head.resize(n);
      inner = DetectFormat(inner_head.data(), inner_head.size());
      if (IsCompression(inner.kind)) {
        return absl::InvalidArgumentError("unsupported image format: " + inner.name +
                                          " compressed again with " + outer.name);
      }
      WISP_RETURN_IF_ERROR(CheckSupported(inner, " inside " + outer.name));
      inner_replay = std::make_unique<PrefixedSource>(inner_head, *decompressor);
      image = inner_replay.get();
    }
    if (!spec_.format.empty() && spec_.format != inner.name) {
      return absl::InvalidArgumentError("source format is declared " + spec_.format +
                                        " but the content is " + inner.name);
    }
    result_.format = inner.name + (IsCompression(outer.kind) ? "." + outer.name : "");
    // Only an uncompressed raw image maps source offsets 1:1 onto the disk, so only it resumes.
    checkpointing_ = spec_.kind == SourceKind::kHttp && !IsCompression(outer.kind) &&
                     inner.kind == FormatKind::kRaw && !validator_.empty();
    if (inner.kind == FormatKind::kQcow2) return ImportQcow2(*image, inner_head, replay);
    if (!IsCompression(outer.kind) && total && *total > spec_.capacity) {
      return absl::OutOfRangeError("image is " + std::to_string(*total) +
                                   " bytes, larger than the volume capacity of " +
                                   std::to_string(spec_.capacity) + " bytes");
    }
    WISP_ASSIGN_OR_RETURN(auto writer,
                          SparseWriter::Create(Join(spec_.dir, kDiskPart), 0, spec_.capacity));
    return StreamRaw(*image, replay, *writer, 0);
  }

 private:
  // Opens the HTTP body, resuming from a checkpoint when one matches. Returns the resume offset.
  absl::StatusOr<uint64_t> OpenHttp() {
    std::string part = Join(spec_.dir, kDiskPart);
    auto point = ReadResume(Join(spec_.dir, kResumeFile));
    struct stat st {};
    if (point && point->url == spec_.url && point->offset > 0 && !point->validator.empty() &&
        ::stat(part.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_size) >= point->offset) {
      HttpOptions o = spec_.http;
      o.range_start = point->offset;
      o.if_range = point->validator;
      WISP_ASSIGN_OR_RETURN(http_, HttpSource::Open(spec_.url, o));
      SetValidator();
      if (http_->info().partial && validator_ == point->validator) return point->offset;
      // The server sent the whole (maybe changed) resource: start over with this body.
      ::unlink(Join(spec_.dir, kResumeFile).c_str());
      return 0;
    }
    Importer::Cleanup(spec_.dir);
    HttpOptions o = spec_.http;
    o.range_start = 0;
    WISP_ASSIGN_OR_RETURN(http_, HttpSource::Open(spec_.url, o));
    SetValidator();
    return 0;
  }

  void SetValidator() {
    const auto& info = http_->info();
    // Weak ETags are not valid for If-Range; fall back to Last-Modified.
    validator_ =
        !info.etag.empty() && info.etag.rfind("W/", 0) != 0 ? info.etag : info.last_modified;
  }

  absl::Status CheckSupported(const ImageFormat& f, const std::string& where) {
    if (f.kind != FormatKind::kUnsupported) return absl::OkStatus();
    return absl::InvalidArgumentError("unsupported image format: " + f.name + where +
                                      " (wisp imports raw and qcow2, optionally gz, xz or zst "
                                      "compressed)");
  }

  // Re-hashes the prefix we already hold (holes read back as the zeros the source had); only when
  // a checksum is to be verified.
  absl::Status RehashPrefix(uint64_t offset) {
    if (!sha_) return absl::OkStatus();
    WISP_ASSIGN_OR_RETURN(auto part, FileSource::Open(Join(spec_.dir, kDiskPart)));
    uint64_t left = offset;
    while (left > 0) {
      WISP_ASSIGN_OR_RETURN(size_t got,
                            part->Read(buf_.data(), std::min<uint64_t>(left, buf_.size())));
      if (got == 0)
        return absl::InternalError("resume checkpoint is past the end of disk.img.part");
      sha_->Update(buf_.data(), got);
      left -= got;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<ImportResult> ResumeRaw(uint64_t offset) {
    if (progress_.total && *progress_.total > spec_.capacity) {
      return absl::OutOfRangeError("image is " + std::to_string(*progress_.total) +
                                   " bytes, larger than the volume capacity of " +
                                   std::to_string(spec_.capacity) + " bytes");
    }
    base_read_ = offset;
    result_.format = "raw";
    result_.resumed_from = offset;
    checkpointing_ = true;
    WISP_ASSIGN_OR_RETURN(auto writer,
                          SparseWriter::Create(Join(spec_.dir, kDiskPart), offset, spec_.capacity));
    WISP_RETURN_IF_ERROR(reporter_.Report(Progress(*writer), true));
    return StreamRaw(*tap_, *tap_, *writer, offset);
  }

  ImportProgress& Progress(const SparseWriter& writer) {
    progress_.bytes_read = base_read_ + tap_->bytes();
    progress_.bytes_written = writer.bytes_written();
    return progress_;
  }

  // Reads to the end of the served bytes so the checksum covers all of them.
  absl::Status Drain(ByteSource& served) {
    for (;;) {
      WISP_ASSIGN_OR_RETURN(size_t got, served.Read(buf_.data(), buf_.size()));
      if (got == 0) return absl::OkStatus();
    }
  }

  absl::Status CheckComplete() {
    uint64_t read = base_read_ + tap_->bytes();
    if (progress_.total && read != *progress_.total) {
      return absl::UnavailableError("source truncated: received " + std::to_string(read) + " of " +
                                    std::to_string(*progress_.total) + " bytes");
    }
    return absl::OkStatus();
  }

  absl::StatusOr<ImportResult> StreamRaw(ByteSource& image, ByteSource& served,
                                         SparseWriter& writer, uint64_t resume_offset) {
    base_read_ = resume_offset;
    const std::string resume_path = Join(spec_.dir, kResumeFile);
    if (checkpointing_) writer.Keep();  // a transient failure leaves it for the next attempt
    uint64_t last_checkpoint = writer.offset();
    auto last_checkpoint_time = clock_.Steady();
    for (;;) {
      // A view into the prefetcher's chunk when nothing transforms the bytes (no copy).
      WISP_ASSIGN_OR_RETURN(auto chunk, image.ReadView(buf_.data(), buf_.size()));
      if (chunk.empty()) break;
      WISP_RETURN_IF_ERROR(writer.Write(chunk.data(), chunk.size()));
      if (checkpointing_ && writer.offset() - last_checkpoint >= options_.checkpoint_bytes &&
          clock_.Steady() - last_checkpoint_time >= options_.checkpoint_min_interval) {
        last_checkpoint_time = clock_.Steady();
        WISP_RETURN_IF_ERROR(writer.Sync());
        WISP_RETURN_IF_ERROR(WriteResume(resume_path, {spec_.url, validator_, writer.offset()}));
        last_checkpoint = writer.offset();
      }
      WISP_RETURN_IF_ERROR(reporter_.Report(Progress(writer)));
    }
    WISP_RETURN_IF_ERROR(Drain(served));
    WISP_RETURN_IF_ERROR(CheckComplete());
    progress_.stage = "verify";
    WISP_RETURN_IF_ERROR(CheckDigest(sha_, spec_.sha256, &result_.sha256));
    WISP_RETURN_IF_ERROR(reporter_.Report(Progress(writer), true));
    result_.virtual_size = writer.offset();
    WISP_RETURN_IF_ERROR(writer.Commit(Join(spec_.dir, kDiskImage), spec_.capacity));
    ::unlink(resume_path.c_str());
    result_.bytes_read = tap_->bytes();
    result_.bytes_written = writer.bytes_written();
    return result_;
  }

  absl::StatusOr<ImportResult> ImportQcow2(ByteSource& image, const std::vector<uint8_t>& header,
                                           ByteSource& served) {
    auto parsed = ParseQcow2Header(header.data(), header.size());
    if (!parsed.ok()) {
      return absl::InvalidArgumentError("not a valid qcow2 image: " +
                                        std::string(parsed.status().message()));
    }
    if (parsed->has_backing_file) {
      return absl::InvalidArgumentError(
          "qcow2 image has a backing file; only standalone images can be imported");
    }
    if (parsed->virtual_size > spec_.capacity) {
      return absl::OutOfRangeError("image virtual size is " + std::to_string(parsed->virtual_size) +
                                   " bytes, larger than the volume capacity of " +
                                   std::to_string(spec_.capacity) + " bytes");
    }
    if (options_.stream_qcow2 && Qcow2Streamable(*parsed)) {
      return StreamQcow2(image, header, served);
    }
    const std::string scratch = Join(spec_.dir, kScratchQcow2);
    const std::string part = Join(spec_.dir, kDiskPart);
    {
      // The scratch copy is removed by the writer unless the conversion gets to use it.
      WISP_ASSIGN_OR_RETURN(auto writer, SparseWriter::Create(scratch, 0, UINT64_MAX));
      for (;;) {
        WISP_ASSIGN_OR_RETURN(size_t got, image.Read(buf_.data(), buf_.size()));
        if (got == 0) break;
        WISP_RETURN_IF_ERROR(writer->Write(buf_.data(), got));
        progress_.bytes_read = tap_->bytes();
        WISP_RETURN_IF_ERROR(reporter_.Report(progress_));
      }
      WISP_RETURN_IF_ERROR(Drain(served));
      WISP_RETURN_IF_ERROR(CheckComplete());
      WISP_RETURN_IF_ERROR(CheckDigest(sha_, spec_.sha256, &result_.sha256));
      // No fsync: the scratch copy is only an input of this run; a crash starts over.
      writer->Keep();
    }
    progress_.stage = "convert";
    WISP_RETURN_IF_ERROR(reporter_.Report(progress_, true));
    ::unlink(part.c_str());
    absl::Status converted = RunQemuImg(options_.qemu_img, {"convert", "-t", "writeback", "-f",
                                                            "qcow2", "-O", "raw", scratch, part});
    ::unlink(scratch.c_str());
    if (!converted.ok()) {
      ::unlink(part.c_str());
      return converted;
    }
    struct stat st {};
    if (::stat(part.c_str(), &st) != 0 ||
        static_cast<uint64_t>(st.st_size) != parsed->virtual_size) {
      ::unlink(part.c_str());
      return absl::InternalError("qemu-img produced " + std::to_string(st.st_size) +
                                 " bytes, the header says " + std::to_string(parsed->virtual_size));
    }
    progress_.stage = "verify";
    progress_.bytes_written = static_cast<uint64_t>(st.st_blocks) * 512;
    WISP_RETURN_IF_ERROR(reporter_.Report(progress_, true));
    absl::Status fin = FinalizeFile(part, Join(spec_.dir, kDiskImage), spec_.capacity);
    if (!fin.ok()) {
      ::unlink(part.c_str());
      return fin;
    }
    result_.virtual_size = parsed->virtual_size;
    result_.bytes_read = tap_->bytes();
    result_.bytes_written = progress_.bytes_written;
    return result_;
  }

  // Converts while downloading (qcow2_stream.hpp); the scratch file only takes what must be
  // stashed. Like the qemu-img path it does not resume: a new attempt starts over.
  absl::StatusOr<ImportResult> StreamQcow2(ByteSource& image, const std::vector<uint8_t>& header,
                                           ByteSource& served) {
    const std::string part = Join(spec_.dir, kDiskPart);
    WISP_ASSIGN_OR_RETURN(Qcow2StreamResult converted,
                          ConvertQcow2Stream(image, header, part, Join(spec_.dir, kScratchQcow2),
                                             buf_, [&](uint64_t written) {
                                               progress_.bytes_read = tap_->bytes();
                                               progress_.bytes_written = written;
                                               return reporter_.Report(progress_);
                                             }));
    absl::Status status = Drain(served);
    if (status.ok()) status = CheckComplete();
    if (status.ok()) status = CheckDigest(sha_, spec_.sha256, &result_.sha256);
    if (status.ok()) {
      progress_.stage = "verify";
      progress_.bytes_read = tap_->bytes();
      status = reporter_.Report(progress_, true);
    }
    if (status.ok()) status = FinalizeFile(part, Join(spec_.dir, kDiskImage), spec_.capacity);
    if (!status.ok()) {
      ::unlink(part.c_str());
      return status;
    }
    result_.virtual_size = converted.virtual_size;
    result_.bytes_read = tap_->bytes();
    result_.bytes_written = converted.bytes_written;
    return result_;
  }

  const ImportSpec& spec_;
  const Importer::Options& options_;
  Clock& clock_;
  Reporter reporter_;
  std::vector<uint8_t> buf_;
  std::unique_ptr<HttpSource> http_;
  std::string validator_;
  std::optional<PipelinedSha256> sha_;  // only when spec_.sha256 asks for a check
  HashingSource* tap_ = nullptr;
  ImportProgress progress_;
  ImportResult result_;
  uint64_t base_read_ = 0;
  bool checkpointing_ = false;
};

}  // namespace

absl::StatusOr<ImportResult> Importer::Run(const ImportSpec& spec, const ProgressFn& progress) {
  if (spec.capacity == 0) return absl::InvalidArgumentError("capacity_bytes: must be > 0");
  if (spec.dir.empty()) return absl::InvalidArgumentError("volume directory is empty");
  std::error_code ec;
  std::filesystem::create_directories(spec.dir, ec);
  if (ec) return absl::InternalError("creating " + spec.dir + ": " + ec.message());
  Reporter reporter(progress, clock_, options_.progress_interval);

  absl::StatusOr<ImportResult> result;
  switch (spec.kind) {
    case SourceKind::kBlank: {
      Cleanup(spec.dir);
      WISP_ASSIGN_OR_RETURN(auto writer,
                            SparseWriter::Create(Join(spec.dir, kDiskPart), 0, spec.capacity));
      WISP_RETURN_IF_ERROR(writer->Commit(Join(spec.dir, kDiskImage), spec.capacity));
      ImportResult r;
      r.format = "blank";
      result = r;
      break;
    }
    case SourceKind::kClone: {
      Cleanup(spec.dir);
      struct stat st {};
      if (::stat(spec.clone_from.c_str(), &st) != 0) {
        return absl::NotFoundError("clone source " + spec.clone_from + " does not exist");
      }
      if (static_cast<uint64_t>(st.st_size) > spec.capacity) {
        return absl::OutOfRangeError("clone source is " + std::to_string(st.st_size) +
                                     " bytes, larger than the volume capacity of " +
                                     std::to_string(spec.capacity) + " bytes");
      }
      WISP_ASSIGN_OR_RETURN(auto writer,
                            SparseWriter::Create(Join(spec.dir, kDiskPart), 0, spec.capacity));
      ImportProgress p{"clone", 0, static_cast<uint64_t>(st.st_size), 0};
      WISP_RETURN_IF_ERROR(reporter.Report(p, true));
      WISP_RETURN_IF_ERROR(CopySparse(spec.clone_from, *writer));
      p.bytes_read = p.bytes_written = writer->bytes_written();
      ImportResult r;
      r.format = "clone";
      r.virtual_size = static_cast<uint64_t>(st.st_size);
      r.bytes_read = static_cast<uint64_t>(st.st_size);
      r.bytes_written = writer->bytes_written();
      WISP_RETURN_IF_ERROR(writer->Commit(Join(spec.dir, kDiskImage), spec.capacity));
      result = r;
      break;
    }
    case SourceKind::kHttp:
    case SourceKind::kStream: {
      ImageImport run(spec, options_, clock_, progress);
      result = run.Run();
      if (!result.ok() && IsPermanent(result.status())) Cleanup(spec.dir);
      break;
    }
  }
  return result;
}

}  // namespace wisp::populator
