// datavolume_bench (issue 22, "Speed and limits"): what wisp's controllers add to an import when a
// DataVolume goes through a real kube-apiserver, external-provisioner and the PV binder, next to
// the import alone, in one run; and (--cycles N) whether the controllers' gateway keeps its memory
// over N DataVolume create/delete cycles (bench/soak/README.md).
//
// Set-up, as the e2e suite's (integration/e2e, WISP_E2E_KUBE_BIN_DIR or WISP_E2E_KUBECONFIG):
// the cluster with its kube-controller-manager, the real CRDs, wisp's local stack with the
// gateway running --controllers populator,datavolumes (leader election on), the chart's webhooks,
// external-provisioner v5.2.0 on the gateway's CSI socket, node-a registered, and a StorageClass
// wisp-immediate (csi.wisp.dev, Immediate binding: no scheduler runs to choose a node).
//
// The image: --mib MiB (default 1024) of raw disk with one random MiB in every --every (default
// 1: every MiB holds data, as the allocated part of an OS image does; zeros are skipped by the
// sparse writer and make the import shorter), converted to qcow2 and compressed with xz, served
// by a local HTTP server. Each round (--rounds, default 3)
// times, alternately:
//   import    wisp.v1.volume.create of that URL on node-a over the bus, until wisp-populator
//             reports SUCCEEDED (the import alone: download, xz, qcow2, sparse write);
//   dv        a DataVolume with that URL in wisp-immediate, from the create request until its
//             status.phase is Succeeded (the PVC bound to the populated volume);
// and prints each, their medians and the ratio dv / import (goal <= 1.2).
//
// --cycles N: N DataVolumes with source.blank (1 MiB), --parallel at a time (default 4), each
// created, waited for Succeeded and deleted (and its PersistentVolume gone); the gateway's VmRSS
// after the first 10% of the cycles and at the end (goal: growth < 10%).
//
// Exit: 0 when the goal is met, 1 when not (or a DataVolume failed), 2 bad usage, 3 set-up
// failed, 77 after one SKIP line when no apiserver is given.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "wisp/bus/nats_bus.hpp"
#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/integration/kube.hpp"
#include "wisp/integration/stack.hpp"
#include "wisp/kube/client.hpp"
#include "wisp/kube/config.hpp"
#include "wisp/populator/testing/test_http_server.hpp"
#include "wisp/v1/volume.pb.h"

namespace {

using Json = nlohmann::json;
using Steady = std::chrono::steady_clock;
using namespace std::chrono_literals;
using wisp::integration::KubeCluster;
using wisp::integration::Stack;

constexpr char kNamespace[] = "vms";

struct Options {
  int mib = 1024;
  int every = 1;  // one random MiB in every `every` (1: every MiB holds data)
  int rounds = 3;
  int cycles = 0;
  int parallel = 4;
};

int Usage(const std::string& why) {
  std::fprintf(stderr,
               "datavolume_bench: %s\n"
               "usage: datavolume_bench [--mib N] [--rounds N] [--cycles N [--parallel N]]\n"
               "  --mib N       size of the image's disk (default 1024)\n"
               "  --every N     one random MiB in every N, the rest zeros (default 1: all data)\n"
               "  --rounds N    import-alone and DataVolume timings, alternated (default 3)\n"
               "  --cycles N    instead: N blank DataVolume create/delete cycles and the\n"
               "                controllers' gateway RSS (bench/soak/README.md)\n"
               "  --parallel N  DataVolumes in flight during --cycles (default 4)\n"
               "Needs WISP_E2E_KUBE_BIN_DIR (kube-apiserver, kube-controller-manager and\n"
               "csi-provisioner) or WISP_E2E_KUBECONFIG with WISP_E2E_CSI_PROVISIONER, and\n"
               "WISP_BIN_DIR. See bench/populate/README.md.\n",
               why.c_str());
  return 2;
}

int SetupFailed(const std::string& what, const absl::Status& s) {
  std::fprintf(stderr, "datavolume_bench: set-up failed: %s: %s\n", what.c_str(),
               std::string(s.message()).c_str());
  return 3;
}

double Ms(Steady::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

long RssKib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  }
  return -1;
}

std::string Phase(const Json& o) { return o.value("/status/phase"_json_pointer, std::string()); }

Json DataVolume(const std::string& name, const Json& source, const std::string& size) {
  return {{"apiVersion", "cdi.kubevirt.io/v1beta1"},
          {"kind", "DataVolume"},
          {"metadata", {{"name", name}, {"namespace", kNamespace}}},
          {"spec",
           {{"source", source},
            {"storage",
             {{"storageClassName", "wisp-immediate"},
              {"resources", {{"requests", {{"storage", size}}}}}}}}}};
}

class Bench {
 public:
  Bench(wisp::kube::Client& kube, wisp::bus::Bus& bus) : kube_(kube), bus_(bus) {}

  // The import alone: volume.create over the bus, polled until SUCCEEDED.
  absl::StatusOr<double> Import(const std::string& name, const std::string& url, int64_t bytes) {
    wisp::v1::CreateVolumeRequest create;
    create.set_wait(false);
    auto* spec = create.mutable_spec();
    spec->set_name(name);
    spec->set_capacity_bytes(bytes);
    spec->set_node("node-a");
    spec->mutable_source()->mutable_http()->set_url(url);
    const auto t0 = Steady::now();
    WISP_ASSIGN_OR_RETURN(auto created, wisp::bus::Call<wisp::v1::CreateVolumeResponse>(
                                            bus_, wisp::bus::subjects::kVolumeCreate, create, 10s));
    const std::string id = created.volume().volume_id();
    for (;;) {
      wisp::v1::GetVolumeRequest get;
      get.set_volume_id(id);
      WISP_ASSIGN_OR_RETURN(auto got, wisp::bus::Call<wisp::v1::GetVolumeResponse>(
                                          bus_, wisp::bus::subjects::kVolumeGet, get, 10s));
      if (got.volume().phase() == wisp::v1::SUCCEEDED) break;
      if (got.volume().phase() == wisp::v1::FAILED) {
        return absl::InternalError("import failed: " + got.volume().message());
      }
      if (Steady::now() - t0 > 600s) return absl::DeadlineExceededError("import not done");
      std::this_thread::sleep_for(10ms);
    }
    const double ms = Ms(Steady::now() - t0);
    wisp::v1::DeleteVolumeRequest del;
    del.set_volume_id(id);
    (void)wisp::bus::Call<wisp::v1::DeleteVolumeResponse>(bus_, wisp::bus::subjects::kVolumeDelete,
                                                          del, 30s);
    return ms;
  }

  // Waits for DataVolume `name` to reach Succeeded by watching it from `created`, as `kubectl
  // wait` does. (Polling it with GETs every 10 ms, as this bench first did, made 60-80 requests a
  // second that cost the apiserver about a quarter of a core, taken from the import it timed.)
  absl::Status WaitSucceeded(const std::string& name, const Json& created,
                             Steady::time_point until) {
    Json dv = created;
    std::string rv = dv.value("/metadata/resourceVersion"_json_pointer, std::string());
    for (;;) {
      if (Phase(dv) == "Succeeded") return absl::OkStatus();
      if (Phase(dv) == "Failed") return absl::InternalError("DataVolume failed: " + dv.dump());
      if (Steady::now() > until) return absl::DeadlineExceededError("not Succeeded");
      auto watch = kube_.Watch(wisp::kube::kDataVolumes, kNamespace,
                               {.resource_version = rv,
                                .field_selector = "metadata.name=" + name,
                                .timeout_seconds = 60});
      if (!watch.ok()) return watch.status();
      for (;;) {
        auto event = (*watch)->Next();
        if (absl::IsOutOfRange(event.status())) {  // 410 Gone: read it again, watch from there
          WISP_ASSIGN_OR_RETURN(dv, kube_.Get(wisp::kube::kDataVolumes, kNamespace, name));
          rv = dv.value("/metadata/resourceVersion"_json_pointer, std::string());
          break;
        }
        if (!event.ok()) return event.status();
        if (!event->has_value()) break;  // the server ended the watch: watch again from rv
        const wisp::kube::WatchEvent& e = **event;
        rv = e.object.value("/metadata/resourceVersion"_json_pointer, rv);
        if (e.type == wisp::kube::EventType::kDeleted) {
          return absl::InternalError("DataVolume " + name + " was deleted while awaited");
        }
        if (e.type == wisp::kube::EventType::kBookmark) continue;
        dv = e.object;
        if (Phase(dv) == "Succeeded" || Phase(dv) == "Failed") break;
      }
    }
  }

  // A DataVolume from the create request until Succeeded; then deleted, and its PV gone.
  absl::StatusOr<double> DataVolumeToSucceeded(const Json& dv) {
    const std::string name = dv["metadata"]["name"];
    const auto t0 = Steady::now();
    WISP_ASSIGN_OR_RETURN(Json created, kube_.Create(wisp::kube::kDataVolumes, kNamespace, dv));
    WISP_RETURN_IF_ERROR(WaitSucceeded(name, created, t0 + 600s));
    const double ms = Ms(Steady::now() - t0);
    WISP_ASSIGN_OR_RETURN(Json pvc,
                          kube_.Get(wisp::kube::kPersistentVolumeClaims, kNamespace, name));
    const std::string pv = pvc.value("/spec/volumeName"_json_pointer, std::string());
    WISP_RETURN_IF_ERROR(kube_.Delete(wisp::kube::kDataVolumes, kNamespace, name,
                                      {.propagation_policy = "Foreground"}));
    // The garbage collector deletes the PVC, the PV controller releases the PV and
    // external-provisioner deletes it (reclaim policy Delete): wait for that, so that rounds and
    // cycles do not pile up.
    // A watch, not GETs every 50 ms (20 a second per DataVolume in flight, load on the
    // apiserver that the other DataVolumes' timings would pay for).
    const auto until = Steady::now() + 120s;
    while (Steady::now() < until) {
      auto got = kube_.Get(wisp::kube::kPersistentVolumes, "", pv);
      if (absl::IsNotFound(got.status())) return ms;
      if (!got.ok()) return got.status();
      auto watch = kube_.Watch(
          wisp::kube::kPersistentVolumes, "",
          {.resource_version = got->value("/metadata/resourceVersion"_json_pointer, std::string()),
           .field_selector = "metadata.name=" + pv,
           .timeout_seconds = 30});
      if (!watch.ok()) return watch.status();
      for (;;) {
        auto event = (*watch)->Next();
        if (!event.ok() || !event->has_value()) break;  // 410 or the watch ended: GET again
        if ((*event)->type == wisp::kube::EventType::kDeleted) return ms;
      }
    }
    return absl::DeadlineExceededError("PersistentVolume " + pv + " still there 120 s after " +
                                       "DataVolume " + name + " was deleted");
  }

 private:
  wisp::kube::Client& kube_;
  wisp::bus::Bus& bus_;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> int {
      if (i + 1 >= argc) return -1;
      return std::atoi(argv[++i]);
    };
    if (a == "--mib") {
      o.mib = next();
    } else if (a == "--every") {
      o.every = next();
    } else if (a == "--rounds") {
      o.rounds = next();
    } else if (a == "--cycles") {
      o.cycles = next();
    } else if (a == "--parallel") {
      o.parallel = next();
    } else if (a == "-h" || a == "--help") {
      Usage("help");
      return 0;
    } else {
      return Usage("unknown argument " + a);
    }
  }
  if (o.mib < 16) return Usage("--mib must be at least 16");
  if (o.every < 1) return Usage("--every must be at least 1");
  if (o.rounds < 1) return Usage("--rounds must be at least 1");
  if (o.cycles < 0 || o.parallel < 1) return Usage("--cycles >= 0 and --parallel >= 1");

  auto kube = KubeCluster::FromEnvironment();
  if (!kube.ok()) {
    if (absl::IsNotFound(kube.status())) {
      std::printf(
          "SKIP datavolume_bench: no Kubernetes API given; set WISP_E2E_KUBE_BIN_DIR=DIR (a "
          "directory with kube-apiserver, kube-controller-manager and csi-provisioner) "
          "(bench/populate/README.md)\n");
      return 77;
    }
    return SetupFailed("no cluster", kube.status());
  }
  KubeCluster& k = **kube;
  // ml and its data-loader: RegisterWebhooks checks that the webhooks are in effect with a pod
  // there.
  for (const char* ns : {kNamespace, "wisp-system", "ml"}) {
    if (absl::Status s = k.CreateNamespace(ns); !s.ok()) return SetupFailed("namespace", s);
  }
  if (absl::Status s =
          k.MustKubectl({"-n", "ml", "create", "serviceaccount", "data-loader"}).status();
      !s.ok()) {
    return SetupFailed("service account", s);
  }
  if (absl::Status s = wisp::integration::InstallCrds(k); !s.ok()) return SetupFailed("CRDs", s);
  auto chart = wisp::integration::RenderChart(k);
  if (!chart.ok()) return SetupFailed("helm template", chart.status());
  wisp::integration::StackOptions stack_options;
  stack_options.extra_args["wisp-gateway"] = wisp::integration::ControllerGatewayArgs(k, "bench");
  auto stack = Stack::Start(stack_options);
  if (!stack.ok()) return SetupFailed("the wisp stack", stack.status());
  if (absl::Status s =
          wisp::integration::RegisterWebhooks(k, *chart, **stack, wisp::integration::WebhookHost());
      !s.ok()) {
    return SetupFailed("webhooks", s);
  }
  auto provisioner = wisp::integration::StartExternalProvisioner(k, **stack);
  if (!provisioner.ok()) return SetupFailed("external-provisioner", provisioner.status());
  if (absl::Status s = wisp::integration::RegisterCsiNode(k, "node-a"); !s.ok()) {
    return SetupFailed("node", s);
  }
  if (absl::Status s = k.MustKubectl({"apply", "--server-side", "-f", "-"},
                                     "apiVersion: storage.k8s.io/v1\nkind: StorageClass\n"
                                     "metadata: {name: wisp-immediate}\n"
                                     "provisioner: csi.wisp.dev\nreclaimPolicy: Delete\n"
                                     "volumeBindingMode: Immediate\n")
                           .status();
      !s.ok()) {
    return SetupFailed("StorageClass", s);
  }
  auto config = wisp::kube::LoadKubeconfig(k.kubeconfig());
  if (!config.ok()) return SetupFailed("kubeconfig", config.status());
  auto client = wisp::kube::NewClient(*config, {.qps = 0, .user_agent = "wisp-datavolume-bench"});
  if (!client.ok()) return SetupFailed("the API client", client.status());
  wisp::bus::NatsBusOptions bo;
  bo.servers = {(*stack)->nats().url()};
  bo.name = "datavolume-bench";
  auto bus = wisp::bus::NatsBus::Connect(bo);
  if (!bus.ok()) return SetupFailed("bus", bus.status());
  Bench bench(**client, **bus);

  if (o.cycles > 0) {
    const pid_t gateway = (*stack)->process("wisp-gateway").pid();
    const int warm = std::max(1, o.cycles / 10);
    std::atomic<int> next{0}, failed{0};
    long rss_warm = 0;
    std::mutex mu;
    std::vector<double> times;
    const auto t0 = Steady::now();
    auto worker = [&] {
      for (int i; (i = next++) < o.cycles;) {
        auto ms = bench.DataVolumeToSucceeded(
            DataVolume("blank-" + std::to_string(i), {{"blank", Json::object()}}, "1Mi"));
        std::lock_guard lock(mu);
        if (!ms.ok()) {
          ++failed;
          std::fprintf(stderr, "cycle %d: %s\n", i, std::string(ms.status().message()).c_str());
          continue;
        }
        times.push_back(*ms);
        if (static_cast<int>(times.size()) == warm) rss_warm = RssKib(gateway);
      }
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < o.parallel; ++t) threads.emplace_back(worker);
    for (auto& t : threads) t.join();
    const long rss_end = RssKib(gateway);
    const double growth = rss_warm > 0 ? 100.0 * (rss_end - rss_warm) / rss_warm : 0;
    std::printf(
        "datavolume_bench: %d blank DataVolume cycles (%d in flight) in %.0f s, %d failed; "
        "create to Succeeded p50 %.0f ms\n",
        o.cycles, o.parallel, Ms(Steady::now() - t0) / 1000, failed.load(), Median(times));
    std::printf(
        "gateway (controllers) VmRSS after %d cycles %ld KiB, at the end %ld KiB: %+.1f%% "
        "(goal < 10%%: %s)\n",
        warm, rss_warm, rss_end, growth, growth < 10 ? "met" : "NOT met");
    return failed == 0 && growth < 10 ? 0 : 1;
  }

  // The image.
  wisp::integration::TempDir dir("wisp-dvbench");
  const std::string mib = std::to_string(o.mib);
  wisp::integration::CommandResult made = wisp::integration::RunArgv(
      {"sh", "-c",
       "cd " + dir.path() + " && truncate -s " + mib + "M disk.raw && for m in $(seq 0 " +
           std::to_string(o.every) + " " + std::to_string(o.mib - 1) +
           "); do dd if=/dev/urandom of=disk.raw bs=1M count=1 seek=$m conv=notrunc "
           "status=none; done && qemu-img convert -f raw -O qcow2 disk.raw disk.qcow2 && "
           "xz -0 -T0 -c disk.qcow2 > disk.qcow2.xz && rm disk.raw disk.qcow2"});
  if (made.exit_code != 0) return SetupFailed("image", absl::InternalError(made.output));
  wisp::populator::testing::TestHttpServer http;
  http.Serve("/disk.qcow2.xz", dir.path() + "/disk.qcow2.xz");
  if (absl::Status s = http.Start(); !s.ok()) return SetupFailed("HTTP server", s);
  const std::string url = http.Url("/disk.qcow2.xz");
  const int64_t bytes = int64_t{o.mib} << 20;

  std::printf(
      "datavolume_bench: kube-apiserver %s, %d MiB qcow2.xz image (data in 1 MiB of every %d), "
      "%d rounds\n",
      k.started() ? "started here" : "given", o.mib, o.every, o.rounds);
  std::printf("%-6s %-7s %10s\n", "round", "row", "ms");
  std::vector<double> imports, dvs;
  for (int r = 1; r <= o.rounds; ++r) {
    auto import = bench.Import("bench-import-" + std::to_string(r), url, bytes);
    if (!import.ok()) return SetupFailed("import", import.status());
    imports.push_back(*import);
    std::printf("%-6d %-7s %10.0f\n", r, "import", *import);
    auto dv = bench.DataVolumeToSucceeded(
        DataVolume("bench-dv-" + std::to_string(r), {{"http", {{"url", url}}}}, mib + "Mi"));
    if (!dv.ok()) {
      std::fprintf(stderr, "datavolume_bench: %s\n", std::string(dv.status().message()).c_str());
      return 1;
    }
    dvs.push_back(*dv);
    std::printf("%-6d %-7s %10.0f\n", r, "dv", *dv);
    std::fflush(stdout);
  }
  const double ratio = Median(dvs) / Median(imports);
  std::printf("import alone (wisp.v1.volume.create to SUCCEEDED)          p50 %8.0f ms\n",
              Median(imports));
  std::printf("DataVolume to Succeeded through the apiserver               p50 %8.0f ms\n",
              Median(dvs));
  std::printf("goal: DataVolume / import p50 %.2f (<= 1.2: %s)\n", ratio,
              ratio <= 1.2 ? "met" : "NOT met");
  return ratio <= 1.2 ? 0 : 1;
}
