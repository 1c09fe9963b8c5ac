#include "volume.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <sstream>

#include <google/protobuf/util/json_util.h>

#include "cli.hpp"
#include "upload.hpp"
#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/fsutil/read_file.hpp"

namespace wisp::wispctl {
namespace {

namespace subjects = bus::subjects;

constexpr const char* kVolumeUsage = R"(NAME
    wispctl volume - create, get, list, watch, upload and delete populated volumes

SYNOPSIS
    wispctl volume create NAME --capacity SIZE [--url URL [--format raw|qcow2] [--sha256 HEX]
                                [--ca-file FILE] [--headers-file FILE]] [--clone VOLUME]
                                [--upload] [--namespace NS] [--node NODE] [--watch]
    wispctl volume upload NAME|ID FILE [--gateway-url URL] [--ca-file FILE] [--sha256 HEX]
    wispctl volume get NAME|ID [--json]
    wispctl volume list [--json]
    wispctl volume watch NAME|ID
    wispctl volume delete NAME|ID

    Each subcommand takes the connection options (--nats-url, --nats-user, ...); see
    `wispctl volume SUBCOMMAND --help`. For a CDI DataVolume with spec.source.upload on a
    cluster: `wispctl datavolume upload NAMESPACE/NAME FILE`.
)";

bool IsVolumeId(const std::string& s) {
  if (s.size() != 26 || s.rfind("v-", 0) != 0) return false;
  return std::all_of(s.begin() + 2, s.end(),
                     [](char c) { return std::isxdigit(c) && !std::isupper(c); });
}

}  // namespace

absl::StatusOr<v1::VolumeStatus> GetVolumeByRef(bus::Bus& bus, const std::string& ref,
                                                std::chrono::milliseconds timeout) {
  v1::GetVolumeRequest req;
  if (IsVolumeId(ref)) {
    req.set_volume_id(ref);
  } else {
    req.set_name(ref);
  }
  WISP_ASSIGN_OR_RETURN(auto resp,
                        bus::Call<v1::GetVolumeResponse>(bus, subjects::kVolumeGet, req, timeout));
  return resp.volume();
}

namespace {

absl::StatusOr<v1::VolumeStatus> GetVolume(bus::Bus& bus, const std::string& ref,
                                           std::chrono::milliseconds timeout) {
  return GetVolumeByRef(bus, ref, timeout);
}

bool Terminal(v1::VolumePhase p) {
  return p == v1::SUCCEEDED || p == v1::FAILED || p == v1::PENDING_POPULATION ||
         p == v1::UPLOAD_READY;
}

std::optional<double> RatioOf(const std::string& progress) {
  if (progress.empty() || progress.back() != '%') return std::nullopt;
  try {
    return std::stod(progress.substr(0, progress.size() - 1)) / 100.0;
  } catch (...) {
    return std::nullopt;
  }
}

int Fail(const std::string& what, const absl::Status& status) {
  std::cerr << "wispctl volume " << what << ": " << status.message() << "\n";
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

// Follows a volume until its phase is terminal. Returns the exit code.
int Watch(bus::Bus& bus, const std::string& ref, std::chrono::milliseconds timeout) {
  auto first = GetVolume(bus, ref, timeout);
  if (!first.ok()) return Fail("watch", first.status());
  const std::string id = first->volume_id();
  std::mutex mu;
  std::condition_variable cv;
  std::optional<v1::VolumeEvent> latest;
  auto sub = bus.Subscribe(subjects::VolumeEvents(id), "", [&](const bus::Message& m) {
    v1::VolumeEvent ev;
    if (!ev.ParseFromString(m.data)) return;
    std::lock_guard lock(mu);
    latest = ev;
    cv.notify_all();
  });
  if (!sub.ok()) return Fail("watch", sub.status());
  // Read again after subscribing: an event between the first read and the subscription is not lost.
  auto current = GetVolume(bus, id, timeout);
  if (!current.ok()) return Fail("watch", current.status());
  const bool tty = ::isatty(STDOUT_FILENO) != 0;
  v1::VolumePhase phase = current->phase();
  std::string progress = current->progress(), message = current->message();
  std::string last_line;
  auto show = [&] {
    std::string line;
    if (tty) {
      line =
          ProgressBar(phase == v1::SUCCEEDED ? std::optional<double>(1.0) : RatioOf(progress), 30) +
          "  " + PhaseName(phase);
      if (!message.empty() && phase != v1::FAILED) line += "  " + message.substr(0, 60);
      std::cout << "\r\033[K" << line << std::flush;
    } else {
      line = PhaseName(phase) + " " + progress + (message.empty() ? "" : " " + message);
      if (line != last_line) std::cout << line << "\n" << std::flush;
    }
    last_line = line;
  };
  std::cout << current->spec().name() << " (" << id << ")\n";
  show();
  while (!Terminal(phase)) {
    std::unique_lock lock(mu);
    bool got = cv.wait_for(lock, std::chrono::seconds(2), [&] { return latest.has_value(); });
    if (got) {
      phase = latest->phase();
      progress = latest->progress();
      message = latest->message();
      latest.reset();
      lock.unlock();
    } else {
      lock.unlock();
      // Events are best effort; the record is the truth.
      auto again = GetVolume(bus, id, timeout);
      if (!again.ok()) return Fail("watch", again.status());
      phase = again->phase();
      progress = again->progress();
      message = again->message();
    }
    show();
  }
  if (tty) std::cout << "\n";
  if (phase == v1::FAILED) {
    std::cerr << "wispctl volume watch: " << current->spec().name() << " failed: " << message
              << "\n";
    return 1;
  }
  return 0;
}

int RunCreate(const std::vector<std::string>& args) {
  Connection connection;
  std::string capacity, url, format, sha256, ca_file, headers_file, clone, ns, node;
  bool watch = false, json = false, upload = false;
  config::Flags flags("wispctl volume create", "create a volume and start populating it");
  flags.Description(
      "Creates the volume NAME (idempotent: the same name and settings answer the existing "
      "volume) and queues its population job: an HTTP(S) image (--url; raw or qcow2, optionally "
      "gz/xz/zst, detected by content), a clone of another volume (--clone), an upload (--upload: "
      "the volume waits in UploadReady for `wispctl volume upload NAME FILE`), or blank.");
  AddConnectionFlags(flags, connection);
  flags.String("capacity", &capacity, "Volume size: bytes or a quantity such as 10Gi. Required.");
  flags.String("url", &url, "http:// or https:// image to import.");
  flags.String("format", &format, "Declared image format (raw or qcow2); checked against content.");
  flags.String("sha256", &sha256, "Expected sha256 of the image as served.");
  flags.String("ca-file", &ca_file, "PEM CA bundle trusted for an https URL.");
  flags.String("headers-file", &headers_file,
               "File of 'Name: value' request headers (kept out of argv).");
  flags.String("clone", &clone, "Name or id of a volume (same namespace) to copy.");
  flags.Bool("upload", &upload, "Filled by an upload (wispctl volume upload) instead.");
  flags.String("namespace", &ns, "Namespace the volume belongs to (clones stay inside it).");
  flags.String("node", &node, "Node that holds the bytes (default: the answering populator's).");
  flags.Bool("watch", &watch, "Follow the population until it ends.");
  flags.Bool("json", &json, "Print the status as JSON.");
  int code = 0;
  if (!ParseCommand(flags, "wispctl volume create", args, code)) return code;
  if (flags.Positional().size() != 1) {
    std::cerr << "wispctl volume create: want exactly one NAME\n";
    return 2;
  }
  if (capacity.empty()) return Fail("create", absl::InvalidArgumentError("--capacity: required"));
  auto bytes = ParseQuantity(capacity, "--capacity");
  if (!bytes.ok()) return Fail("create", bytes.status());
  v1::CreateVolumeRequest req;
  auto* spec = req.mutable_spec();
  spec->set_name(flags.Positional()[0]);
  spec->set_capacity_bytes(*bytes);
  spec->set_node(node);
  spec->set_pvc_namespace(ns);
  auto* source = spec->mutable_source();
  if (static_cast<int>(!url.empty()) + static_cast<int>(!clone.empty()) + static_cast<int>(upload) >
      1) {
    return Fail("create", absl::InvalidArgumentError("--url, --clone and --upload are exclusive"));
  }
  if (!url.empty()) {
    source->mutable_http()->set_url(url);
    if (!ca_file.empty()) {
      auto pem = fsutil::ReadFile(ca_file);
      if (!pem.ok()) {
        return Fail("create", absl::InvalidArgumentError("--ca-file: cannot read " +
                                                         std::string(pem.status().message())));
      }
      source->mutable_http()->set_ca_pem(*std::move(pem));
    }
    if (!headers_file.empty()) {
      auto text = fsutil::ReadFile(headers_file);
      if (!text.ok()) {
        return Fail("create", absl::InvalidArgumentError("--headers-file: cannot read " +
                                                         std::string(text.status().message())));
      }
      auto parsed = ParseHeaderLines(*text, "--headers-file");
      if (!parsed.ok()) return Fail("create", parsed.status());
      for (auto& [k, v] : *parsed) (*source->mutable_http()->mutable_headers())[k] = v;
    }
  } else if (!clone.empty()) {
    if (IsVolumeId(clone)) {
      source->mutable_clone()->set_volume_id(clone);
    } else {
      source->mutable_clone()->set_name(clone);
    }
    source->mutable_clone()->set_namespace_(ns);
  } else if (upload) {
    source->mutable_upload();
  } else {
    source->mutable_blank();
  }
  source->set_format(format);
  source->set_sha256(sha256);
  auto bus = Connect(connection);
  if (!bus.ok()) return Fail("create", bus.status());
  auto resp =
      bus::Call<v1::CreateVolumeResponse>(**bus, subjects::kVolumeCreate, req, connection.timeout);
  if (!resp.ok()) return Fail("create", resp.status());
  if (watch) return Watch(**bus, resp->volume().volume_id(), connection.timeout);
  std::cout << (json ? FormatVolumeJson(resp->volume()) : FormatVolume(resp->volume()));
  return 0;
}

int RunSimple(const std::string& sub, const std::vector<std::string>& args) {
  Connection connection;
  bool json = false;
  config::Flags flags("wispctl volume " + sub, sub == "list"  ? "list volumes"
                                               : sub == "get" ? "show one volume"
                                               : sub == "watch"
                                                   ? "follow a volume's population live"
                                                   : "delete a volume and its bytes");
  AddConnectionFlags(flags, connection);
  if (sub == "get" || sub == "list") flags.Bool("json", &json, "Print JSON.");
  int code = 0;
  if (!ParseCommand(flags, "wispctl volume " + sub, args, code)) return code;
  const size_t want = sub == "list" ? 0 : 1;
  if (flags.Positional().size() != want) {
    std::cerr << "wispctl volume " << sub << ": want " << (want ? "one NAME or ID" : "no arguments")
              << "\n";
    return 2;
  }
  auto bus = Connect(connection);
  if (!bus.ok()) return Fail(sub, bus.status());
  if (sub == "watch") return Watch(**bus, flags.Positional()[0], connection.timeout);
  if (sub == "get") {
    auto v = GetVolume(**bus, flags.Positional()[0], connection.timeout);
    if (!v.ok()) return Fail(sub, v.status());
    std::cout << (json ? FormatVolumeJson(*v) : FormatVolume(*v));
    return 0;
  }
  if (sub == "delete") {
    auto v = GetVolume(**bus, flags.Positional()[0], connection.timeout);
    if (!v.ok()) return Fail(sub, v.status());
    v1::DeleteVolumeRequest req;
    req.set_volume_id(v->volume_id());
    auto resp = bus::Call<v1::DeleteVolumeResponse>(**bus, subjects::kVolumeDelete, req,
                                                    connection.timeout);
    if (!resp.ok()) return Fail(sub, resp.status());
    std::cout << "deleted " << v->spec().name() << " (" << v->volume_id() << ")\n";
    return 0;
  }
  std::vector<v1::VolumeStatus> all;
  v1::ListVolumesRequest req;
  do {
    auto resp =
        bus::Call<v1::ListVolumesResponse>(**bus, subjects::kVolumeList, req, connection.timeout);
    if (!resp.ok()) return Fail(sub, resp.status());
    for (const auto& v : resp->volumes()) all.push_back(v);
    req.set_starting_token(resp->next_token());
  } while (!req.starting_token().empty());
  if (json) {
    std::cout << "[";
    for (size_t i = 0; i < all.size(); ++i) {
      std::string one = FormatVolumeJson(all[i]);
      one.pop_back();
      std::cout << (i ? ",\n" : "\n") << one;
    }
    std::cout << (all.empty() ? "]\n" : "\n]\n");
  } else {
    std::cout << FormatVolumeTable(all);
  }
  return 0;
}

}  // namespace

absl::StatusOr<int64_t> ParseQuantity(std::string_view text, std::string_view field) {
  auto bad = [&] {
    return absl::InvalidArgumentError(
        std::string(field) + ": \"" + std::string(text) +
        "\" is not a size (bytes, or a number with Ki Mi Gi Ti or K M G T)");
  };
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0 || i > 15) return bad();
  int64_t n = std::stoll(std::string(text.substr(0, i)));
  std::string_view unit = text.substr(i);
  struct U {
    std::string_view name;
    int64_t mult;
  };
  static constexpr U kUnits[] = {
      {"", 1},     {"Ki", 1ll << 10}, {"Mi", 1ll << 20}, {"Gi", 1ll << 30}, {"Ti", 1ll << 40},
      {"K", 1000}, {"k", 1000},       {"M", 1000000},    {"G", 1000000000}, {"T", 1000000000000ll}};
  for (const auto& u : kUnits) {
    if (unit == u.name) {
      if (n == 0) return absl::InvalidArgumentError(std::string(field) + ": must be > 0");
      if (n > INT64_MAX / u.mult) return bad();
      return n * u.mult;
    }
  }
  return bad();
}

std::string ProgressBar(std::optional<double> ratio, int width) {
  std::string bar = "[";
  if (!ratio) {
    std::string na = " N/A ";
    int left = (width - static_cast<int>(na.size())) / 2;
    bar += std::string(std::max(left, 0), '.') + na +
           std::string(std::max(width - left - static_cast<int>(na.size()), 0), '.') + "]     N/A";
    return bar;
  }
  double r = std::clamp(*ratio, 0.0, 1.0);
  int filled = static_cast<int>(std::floor(r * width));
  bar += std::string(filled, '#') + std::string(width - filled, '.') + "]";
  char pct[16];
  std::snprintf(pct, sizeof pct, " %6.2f%%", r * 100.0);
  return bar + pct;
}

std::string PhaseName(v1::VolumePhase phase) {
  switch (phase) {
    case v1::PENDING:
      return "Pending";
    case v1::IMPORT_SCHEDULED:
      return "ImportScheduled";
    case v1::IMPORT_IN_PROGRESS:
      return "ImportInProgress";
    case v1::SUCCEEDED:
      return "Succeeded";
    case v1::FAILED:
      return "Failed";
    case v1::PENDING_POPULATION:
      return "PendingPopulation";
    case v1::DELETING:
      return "Deleting";
    case v1::UPLOAD_READY:
      return "UploadReady";
    case v1::UPLOAD_IN_PROGRESS:
      return "UploadInProgress";
    default:
      return "Unknown";
  }
}

std::string FormatVolume(const v1::VolumeStatus& s) {
  std::ostringstream o;
  const auto& src = s.spec().source();
  std::string source = src.has_http()     ? src.http().url()
                       : src.has_clone()  ? "clone of " + src.clone().volume_id()
                       : src.has_upload() ? "upload"
                                          : "blank";
  o << "Name:      " << s.spec().name() << "\n"
    << "ID:        " << s.volume_id() << "\n"
    << "Phase:     " << PhaseName(s.phase()) << "\n"
    << "Progress:  " << s.progress() << "\n"
    << "Capacity:  " << s.spec().capacity_bytes() << "\n"
    << "Node:      " << s.spec().node() << "\n"
    << "Source:    " << source << "\n";
  if (!s.spec().pvc_namespace().empty()) o << "Namespace: " << s.spec().pvc_namespace() << "\n";
  if (!s.format().empty()) o << "Format:    " << s.format() << "\n";
  if (!s.sha256().empty()) o << "SHA256:    " << s.sha256() << "\n";
  o << "Read:      " << s.bytes_read() << " bytes\n"
    << "Written:   " << s.bytes_written() << " bytes\n"
    << "Path:      " << s.path() << "\n";
  if (!s.message().empty()) o << "Message:   " << s.message() << "\n";
  return o.str();
}

std::string FormatVolumeTable(const std::vector<v1::VolumeStatus>& volumes) {
  std::ostringstream o;
  char line[512];
  std::snprintf(line, sizeof line, "%-28s %-26s %-18s %-8s %14s %-12s\n", "NAME", "ID", "PHASE",
                "PROGRESS", "CAPACITY", "NODE");
  o << line;
  for (const auto& v : volumes) {
    std::snprintf(line, sizeof line, "%-28s %-26s %-18s %-8s %14lld %-12s\n",
                  v.spec().name().c_str(), v.volume_id().c_str(), PhaseName(v.phase()).c_str(),
                  v.progress().c_str(), static_cast<long long>(v.spec().capacity_bytes()),
                  v.spec().node().c_str());
    o << line;
  }
  return o.str();
}

std::string FormatVolumeJson(const v1::VolumeStatus& status) {
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = true;
  opts.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(status, &out, opts);
  if (out.empty() || out.back() != '\n') out += "\n";
  return out;
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseHeaderLines(
    std::string_view text, std::string_view field) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in{std::string(text)};
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    size_t colon = line.find(':');
    if (colon == std::string::npos || colon == 0) {
      return absl::InvalidArgumentError(std::string(field) + ": line " + std::to_string(n) +
                                        " is not 'Name: value'");
    }
    std::string name = line.substr(0, colon), value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(' '));
    out.emplace_back(name, value);
  }
  return out;
}

int RunVolume(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::cout << kVolumeUsage;
    return args.empty() ? 2 : 0;
  }
  const std::string sub = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (sub == "create") return RunCreate(rest);
  if (sub == "upload") return RunUpload(rest);
  if (sub == "get" || sub == "list" || sub == "watch" || sub == "delete")
    return RunSimple(sub, rest);
  std::cerr << "wispctl volume: unknown subcommand \"" << sub
            << "\" (create, get, list, watch, upload, delete)\n";
  return 2;
}

}  // namespace wisp::wispctl
