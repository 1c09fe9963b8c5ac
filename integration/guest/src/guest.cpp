#include "wisp/integration/guest.hpp"

#include <openssl/sha.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "wisp/integration/stack.hpp"

namespace wisp::integration {
namespace {

using Json = nlohmann::json;
using Steady = std::chrono::steady_clock;

constexpr char kVirtiofsd[] = "/usr/lib/qemu/virtiofsd";
constexpr char kQemu[] = "/usr/bin/qemu-system-x86_64";

// Binds the vhost-user socket, hands it to the command as fd 3 (virtiofsd --fd=3) and execs it:
// the C virtiofsd as uid 107 cannot create its socket (nor its pid file) itself.
constexpr char kFdPasser[] =
    "import os, socket, sys\n"
    "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
    "s.bind(sys.argv[1]); s.listen(1)\n"
    "os.dup2(s.fileno(), 3); os.set_inheritable(3, True)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n";

bool StartsWith(const std::string& s, std::string_view prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

std::string GuestCacheDir() {
  if (const char* env = std::getenv("WISP_GUEST_CACHE"); env != nullptr && *env != '\0') {
    return env;
  }
  return SourceDir() + "/build/guest-cache";
}

absl::StatusOr<GuestImage> PrepareGuest(const std::string& cache_dir) {
  auto r = RunCommand(SourceDir() + "/integration/guest/prepare-guest " + cache_dir + " 2>" +
                      cache_dir + ".log");
  const std::string messages = fsutil::ReadFile(cache_dir + ".log").value_or("");
  if (r.exit_code != 0) {
    return absl::FailedPreconditionError("integration/guest/prepare-guest failed: " + messages +
                                         r.output);
  }
  std::string version = r.output;
  while (!version.empty() && (version.back() == '\n' || version.back() == ' ')) version.pop_back();
  return GuestImage{cache_dir + "/vmlinuz", cache_dir + "/initramfs.cpio.gz", version};
}

std::string Sha256Hex(const std::string& data) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), md);
  char hex[2 * SHA256_DIGEST_LENGTH + 1];
  for (int i = 0; i < SHA256_DIGEST_LENGTH; ++i) std::snprintf(hex + 2 * i, 3, "%02x", md[i]);
  return hex;
}

absl::StatusOr<VirtiofsdSpec> VirtiofsdFromContainer(const Json& container,
                                                     const std::string& container_root) {
  VirtiofsdSpec spec;
  const std::string name = container.value("name", "");
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError("container " + name + ": " + why);
  };
  if (container.value("command", Json::array()) != Json::array({"/usr/libexec/virtiofsd"})) {
    return bad("command is not [/usr/libexec/virtiofsd]");
  }
  const Json sc = container.value("securityContext", Json::object());
  if (!sc.contains("runAsUser") || !sc["runAsUser"].is_number_integer()) {
    return bad("securityContext.runAsUser is not set: virtiofsd would run as the image's user");
  }
  spec.uid = sc["runAsUser"].get<int>();
  spec.gid = sc.value("runAsGroup", spec.uid);
  if (spec.uid == 0) return bad("securityContext.runAsUser is 0: KubeVirt runs virtiofsd as 107");
  std::string translate;
  for (const auto& a : container.value("args", Json::array())) {
    const std::string arg = a.get<std::string>();
    const auto eq = arg.find('=');
    const std::string key = arg.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : arg.substr(eq + 1);
    if (key == "--shared-dir") {
      spec.shared_dir = container_root + value;
    } else if (key == "--cache") {
      if (value != "auto" && value != "none" && value != "always") {
        return bad("args: unknown " + arg);
      }
      spec.cache = value;
    } else if (key == "--translate-uid") {
      translate = value;
    } else if (key == "--socket-path" || key == "--migration-on-error" ||
               key == "--migration-mode" || arg == "--sandbox=none") {
      // The socket is ours (passed by fd); migration is not exercised; the C virtiofsd has no
      // sandbox "none" and keeps its namespace sandbox, inside the user namespace.
    } else {
      return bad("args: the test cannot honour " + arg);
    }
  }
  if (spec.shared_dir.empty()) return bad("args: no --shared-dir");
  if (!translate.empty()) {
    if (translate != "host:" + std::to_string(spec.uid) + ":0:1") {
      return bad("args: --translate-uid=" + translate + " is not host:<runAsUser>:0:1");
    }
    spec.uid_to_root = true;
  } else {
    return absl::UnimplementedError(
        "container " + name +
        ": without --translate-uid the C virtiofsd cannot run as a non-root user here");
  }
  return spec;
}

absl::StatusOr<std::unique_ptr<Guest>> Guest::Start(Options o) {
  auto guest = std::unique_ptr<Guest>(new Guest());
  const std::string socket = o.work_dir + "/virtiofsd.sock";
  guest->console_ = o.work_dir + "/console.log";
  std::ofstream(guest->console_).flush();  // qemu appends; the reader may open it at once
  const VirtiofsdSpec& v = o.virtiofsd;
  // As the container runs it: uid/gid 107, no supplementary groups, in a user namespace that maps
  // 107 to root (--translate-uid=host:107:0:1).
  WISP_ASSIGN_OR_RETURN(
      guest->virtiofsd_,
      Process::Start(
          {.path = "/usr/bin/python3",
           .args = {"-c", kFdPasser, socket, "setpriv", "--reuid=" + std::to_string(v.uid),
                    "--regid=" + std::to_string(v.gid), "--clear-groups", "--", "unshare", "-r",
                    "--", kVirtiofsd, "--fd=3", "-o", "source=" + v.shared_dir, "-o",
                    "cache=" + v.cache},
           .log_path = o.work_dir + "/virtiofsd.log"}));
  WISP_RETURN_IF_ERROR(guest->virtiofsd_->WaitForLog("Waiting for vhost-user socket connection",
                                                     std::chrono::seconds(10)));
  const std::string mem = std::to_string(o.memory_mb) + "M";
  guest->started_ = Steady::now();
  WISP_ASSIGN_OR_RETURN(
      guest->qemu_,
      Process::Start(
          {.path = kQemu,
           .args = {"-machine",
                    "q35",
                    "-accel",
                    "tcg",
                    "-m",
                    mem,
                    "-smp",
                    "1",
                    "-object",
                    "memory-backend-memfd,id=mem,size=" + mem + ",share=on",
                    "-numa",
                    "node,memdev=mem",
                    "-chardev",
                    "socket,id=vfs,path=" + socket,
                    "-device",
                    "vhost-user-fs-pci,chardev=vfs,tag=" + o.tag + ",queue-size=1024",
                    "-kernel",
                    o.image.kernel,
                    "-initrd",
                    o.image.initrd,
                    "-append",
                    "console=ttyS0 quiet panic=-1 wisp.tag=" + o.tag + " wisp.dir=" + o.mount_dir,
                    "-serial",
                    "file:" + guest->console_,
                    "-monitor",
                    "none",
                    "-nographic",
                    "-no-reboot"},
           .log_path = o.work_dir + "/qemu.log"}));
  guest->reader_ = std::thread([g = guest.get()] { g->ReadConsole(); });
  return guest;
}

Guest::~Guest() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  if (reader_.joinable()) reader_.join();
  qemu_.reset();  // SIGKILL to its process group, reaped
  virtiofsd_.reset();
}

void Guest::ReadConsole() {
  std::ifstream in;
  std::string partial;
  std::optional<ConsoleEvent> pending_read;
  char buf[4096];
  while (true) {
    {
      std::lock_guard lock(mu_);
      if (stop_) return;
    }
    if (!in.is_open()) in.open(console_, std::ios::binary);
    bool got = false;
    while (in.is_open()) {
      in.read(buf, sizeof(buf));
      const std::streamsize n = in.gcount();
      if (n <= 0) break;
      got = true;
      partial.append(buf, static_cast<size_t>(n));
    }
    in.clear();  // past EOF: keep reading as qemu appends
    const auto now = Steady::now();
    size_t nl;
    while ((nl = partial.find('\n')) != std::string::npos) {
      std::string line = partial.substr(0, nl);
      partial.erase(0, nl + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      const auto w = line.find("WISP-");
      if (w == std::string::npos) continue;
      line.erase(0, w);
      auto rest = [&](std::string_view tag) {
        return line.substr(std::min(line.size(), tag.size()));
      };
      std::optional<ConsoleEvent> event;
      if (StartsWith(line, "WISP-READ ")) {
        std::string r = rest("WISP-READ ");
        pending_read = ConsoleEvent{ConsoleEvent::kRead, r.substr(0, r.find(' ')), "", now};
      } else if (StartsWith(line, "WISP-CLAIMS") && pending_read) {
        pending_read->claims = rest("WISP-CLAIMS ");
        event = std::move(pending_read);
        pending_read.reset();
      } else if (StartsWith(line, "WISP-RETRIED")) {
        event = ConsoleEvent{ConsoleEvent::kRetried, rest("WISP-RETRIED "), "", now};
      } else if (StartsWith(line, "WISP-ERR ")) {
        event = ConsoleEvent{ConsoleEvent::kError, rest("WISP-ERR "), "", now};
      } else if (StartsWith(line, "WISP-MOUNT-FAILED")) {
        event = ConsoleEvent{ConsoleEvent::kMountFailed, rest("WISP-MOUNT-FAILED "), "", now};
      } else if (StartsWith(line, "WISP-MOUNTED")) {
        event = ConsoleEvent{ConsoleEvent::kMounted, rest("WISP-MOUNTED "), "", now};
      } else if (StartsWith(line, "WISP-BOOTED")) {
        event = ConsoleEvent{ConsoleEvent::kBooted, rest("WISP-BOOTED "), "", now};
      }
      if (event) {
        std::lock_guard lock(mu_);
        events_.push_back(std::move(*event));
        cv_.notify_all();
      }
    }
    if (!got) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::vector<ConsoleEvent> Guest::Events() {
  std::lock_guard lock(mu_);
  return events_;
}

absl::StatusOr<ConsoleEvent> Guest::WaitFor(ConsoleEvent::Kind kind, size_t from,
                                            std::chrono::milliseconds timeout, size_t* index) {
  const auto deadline = Steady::now() + timeout;
  std::unique_lock lock(mu_);
  while (true) {
    for (size_t i = from; i < events_.size(); ++i) {
      if (events_[i].kind == kind) {
        if (index != nullptr) *index = i;
        return events_[i];
      }
    }
    if (Steady::now() >= deadline) break;
    cv_.wait_for(lock, std::chrono::milliseconds(100));
    lock.unlock();
    const bool alive = qemu_->Running() && virtiofsd_->Running();
    lock.lock();
    if (!alive) {
      lock.unlock();
      return absl::DeadlineExceededError("qemu or virtiofsd exited; console:\n" + ConsoleTail() +
                                         "\nvirtiofsd: " + virtiofsd_->Log() +
                                         "\nqemu: " + qemu_->Log());
    }
  }
  lock.unlock();
  return absl::DeadlineExceededError("no such console event within " +
                                     std::to_string(timeout.count()) + " ms; console:\n" +
                                     ConsoleTail());
}

std::string Guest::ConsoleTail(size_t bytes) const {
  const std::string all = fsutil::ReadFile(console_, size_t{1} << 30).value_or("");
  return all.size() > bytes ? all.substr(all.size() - bytes) : all;
}

}  // namespace wisp::integration
