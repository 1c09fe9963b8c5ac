#pragma once
// A real guest for the integration tests and bench/guest: a Debian cloud kernel and a busybox
// initramfs (integration/guest/prepare-guest) booted by qemu under TCG, sharing one directory
// over virtiofs with the C virtiofsd run the way KubeVirt's `virtiofs-<volume>` container runs it:
// as uid 107, inside a user namespace, its socket passed by fd.
//
// Contract:
//   - PrepareGuest() returns the kernel and initramfs, built once and cached in GuestCacheDir()
//     (a second call downloads and builds nothing).
//   - VirtiofsdFromContainer() reads a rendered `virtiofs-<volume>` container (its args and
//     securityContext) and fails, naming the argument, on anything it cannot honour.
//   - Guest::Start() returns once qemu and virtiofsd run; a reader thread timestamps every WISP-*
//     line of the guest's console (ttyS0) the moment it appears. The destructor kills qemu and
//     virtiofsd (process groups, SIGKILL) and waits for them: nothing outlives a test.
//   - The guest's /init mounts the tag at `mount_dir` and reports each distinct content of
//     `<mount_dir>/token` (sha256, JWT claims segment; never the whole token) and each distinct
//     read error.
//
// Example:
//   auto image = PrepareGuest().value();
//   auto vfs = VirtiofsdFromContainer(container, rootfs).value();
//   auto guest = Guest::Start({.image = image, .virtiofsd = vfs, .tag = "irsa",
//                              .work_dir = dir.path()}).value();
//   auto first = guest->WaitFor(ConsoleEvent::kRead, 0, std::chrono::seconds(60));
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "wisp/integration/harness.hpp"

namespace wisp::integration {

// $WISP_GUEST_CACHE, else <source>/build/guest-cache (shared by every build dir).
std::string GuestCacheDir();

struct GuestImage {
  std::string kernel;
  std::string initrd;
  std::string kernel_version;
};
absl::StatusOr<GuestImage> PrepareGuest(const std::string& cache_dir = GuestCacheDir());

// How to run the C virtiofsd (Debian 12's /usr/lib/qemu/virtiofsd) for one rendered container.
struct VirtiofsdSpec {
  std::string shared_dir;  // host path of the container's --shared-dir
  std::string cache = "auto";
  int uid = 107;
  int gid = 107;
  // --translate-uid=host:<uid>:0:1, which the rust virtiofsd implements and the C one lacks: the
  // user namespace (unshare -r) maps the container's uid to 0, the same translation.
  bool uid_to_root = false;
};
// `container_root`: the host directory standing for the container's filesystem root (its
// volumeMounts live under it).
// The lower-case hex SHA-256 of `data`: what the guest prints for each token it reads.
std::string Sha256Hex(const std::string& data);

absl::StatusOr<VirtiofsdSpec> VirtiofsdFromContainer(const nlohmann::json& container,
                                                     const std::string& container_root);

struct ConsoleEvent {
  enum Kind { kBooted, kMounted, kMountFailed, kRead, kError, kRetried };
  Kind kind;
  std::string text;    // kRead: sha256 of the token; kError/kMountFailed: the message
  std::string claims;  // kRead: the JWT's claims segment (base64url), "" if not a JWT
  std::chrono::steady_clock::time_point at;  // when the host saw the line
};

class Guest {
 public:
  struct Options {
    GuestImage image;
    VirtiofsdSpec virtiofsd;
    std::string tag;  // the virtiofs tag: the VMI volume's name
    std::string mount_dir = "/var/run/secrets/eks.amazonaws.com/serviceaccount";
    std::string work_dir;  // socket, console and logs
    int memory_mb = 256;
  };
  static absl::StatusOr<std::unique_ptr<Guest>> Start(Options options);
  ~Guest();
  Guest(const Guest&) = delete;
  Guest& operator=(const Guest&) = delete;

  std::chrono::steady_clock::time_point started() const { return started_; }
  // Every event so far, in order.
  std::vector<ConsoleEvent> Events();
  // The first event of `kind` at index >= `from`; DeadlineExceeded with the console's tail when
  // none came within `timeout`, or when qemu or virtiofsd exited.
  absl::StatusOr<ConsoleEvent> WaitFor(ConsoleEvent::Kind kind, size_t from,
                                       std::chrono::milliseconds timeout, size_t* index = nullptr);
  std::string ConsoleTail(size_t bytes = 3000) const;
  const std::string& console_path() const { return console_; }

 private:
  Guest() = default;
  void ReadConsole();

  std::string console_;
  std::unique_ptr<Process> virtiofsd_;
  std::unique_ptr<Process> qemu_;
  std::chrono::steady_clock::time_point started_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<ConsoleEvent> events_;
  bool stop_ = false;
  std::thread reader_;
};

}  // namespace wisp::integration
