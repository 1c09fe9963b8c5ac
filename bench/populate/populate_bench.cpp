// bench/populate: wisp-populator's import engine against the tools it replaces, in one run on this
// machine, printing the ratios the goals are stated in:
//   raw   over loopback HTTP          vs `curl -o`                        (goal >= 85% throughput)
//   gz/xz over loopback HTTP          vs `curl | gzip -dc` / `| xz -dc`   (goal >= 90% throughput)
//   qcow2 over loopback HTTP          vs `qemu-img convert -O raw` local  (goal <= 1.1x time)
// The image is WISP_BENCH_MIB (default 1024) MiB with a quarter random data, the rest holes.
// Each measurement is the best of WISP_BENCH_RUNS (default 2) runs. Outputs go to $TMPDIR.
// WISP_BENCH_CASES (default "raw,gz,xz,qcow2") picks the cases; the qcow2 case also times the
// previous way (scratch copy, then qemu-img) in the same run, as "qcow2 scratch+qemu-img".
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>

#include "importer.hpp"
#include "test_http_server.hpp"

namespace {

using wisp::populator::Importer;
using wisp::populator::ImportSpec;
using wisp::populator::SourceKind;
using wisp::populator::testing::Sh;

double Seconds(const std::function<bool()>& fn, int runs) {
  double best = 1e9;
  for (int i = 0; i < runs; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    if (!fn()) {
      std::fprintf(stderr, "run failed\n");
      std::exit(1);
    }
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

}  // namespace

int main() {
  const int mib = EnvInt("WISP_BENCH_MIB", 1024);
  const int runs = EnvInt("WISP_BENCH_RUNS", 2);
  const std::string dir = std::filesystem::temp_directory_path() /
                          ("wisp-bench-populate-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string m = std::to_string(mib);
  const char* cases_env = std::getenv("WISP_BENCH_CASES");
  const std::string cases = "," + std::string(cases_env ? cases_env : "raw,gz,xz,qcow2") + ",";
  auto wanted = [&](const char* name) {
    return cases.find("," + std::string(name) + ",") != std::string::npos;
  };
  std::printf("building a %d MiB image in %s ...\n", mib, dir.c_str());
  // Random 4 MiB chunks in every 16 MiB stretch: a quarter data, three quarters holes.
  std::string build = "cd " + dir + " && truncate -s " + m + "M disk.raw && for i in $(seq 0 16 " +
                      std::to_string(mib - 1) +
                      "); do dd if=/dev/urandom of=disk.raw bs=1M count=4 " +
                      "seek=$i conv=notrunc status=none; done" +
                      (wanted("gz") ? " && gzip -1 -c disk.raw > disk.raw.gz" : "") +
                      (wanted("xz") ? " && xz -0 -T2 -c disk.raw > disk.raw.xz" : "") +
                      " && qemu-img convert -f raw -O qcow2 disk.raw disk.qcow2 && sync";
  if (Sh(build) != 0) return 1;

  wisp::populator::testing::TestHttpServer server;
  for (const char* f : {"disk.raw", "disk.raw.gz", "disk.raw.xz", "disk.qcow2"}) {
    server.Serve(std::string("/") + f, dir + "/" + f);
  }
  if (!server.Start().ok()) return 1;
  // wisp-populator's defaults (--checkpoint-interval 64Mi, --checkpoint-min-interval 2s).
  Importer::Options options;
  options.checkpoint_min_interval = std::chrono::seconds(2);
  Importer importer(options);
  const uint64_t capacity = static_cast<uint64_t>(mib) << 20;
  Importer::Options scratch_options = options;
  scratch_options.stream_qcow2 = false;
  Importer scratch_importer(scratch_options);
  auto import = [&](const std::string& path, Importer* with = nullptr) {
    return [&, path, with] {
      std::filesystem::remove_all(dir + "/vol");
      ImportSpec spec;
      spec.kind = SourceKind::kHttp;
      spec.url = server.Url(path);
      spec.capacity = capacity;
      spec.dir = dir + "/vol";
      auto r = (with ? *with : importer).Run(spec, nullptr);
      if (!r.ok()) std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
      return r.ok();
    };
  };
  auto shell = [&](const std::string& cmd) {
    return [&, cmd] { return Sh("rm -f " + dir + "/out.raw && " + cmd) == 0; };
  };
  const double gib = static_cast<double>(mib) / 1024.0;
  struct Row {
    const char* name;
    double ours, theirs;
    bool time_ratio;  // qcow2: compare times, not throughput
    double goal;
    bool counts = true;  // false: shown for comparison, not a goal
  };
  std::vector<Row> rows;
  if (wanted("raw"))
    rows.push_back(
        {"raw   vs curl -o", Seconds(import("/disk.raw"), runs),
         Seconds(shell("curl -s -o " + dir + "/out.raw " + server.Url("/disk.raw")), runs), false,
         0.85});
  if (wanted("gz"))
    rows.push_back({"gz    vs curl | gzip -dc", Seconds(import("/disk.raw.gz"), runs),
                    Seconds(shell("curl -s " + server.Url("/disk.raw.gz") + " | gzip -dc > " + dir +
                                  "/out.raw"),
                            runs),
                    false, 0.90});
  if (wanted("xz"))
    rows.push_back(
        {"xz    vs curl | xz -dc", Seconds(import("/disk.raw.xz"), runs),
         Seconds(shell("curl -s " + server.Url("/disk.raw.xz") + " | xz -dc > " + dir + "/out.raw"),
                 runs),
         false, 0.90});
  if (wanted("qcow2")) {
    // Interleaved so that load from elsewhere on the machine hits all three alike.
    double ours = 1e9, theirs = 1e9, before = 1e9;
    auto qemu_img = shell("qemu-img convert -t writeback -f qcow2 -O raw " + dir + "/disk.qcow2 " +
                          dir + "/out.raw");
    // CPU seconds too: on a busy machine they vary less than wall time. Ours include the
    // loopback server's thread and the sha256.
    double ours_cpu = 1e9, theirs_cpu = 1e9;
    auto cpu = [](int who) {
      struct rusage u {};
      ::getrusage(who, &u);
      return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
             1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
    };
    for (int i = 0; i < runs; ++i) {
      double c0 = cpu(RUSAGE_SELF);
      ours = std::min(ours, Seconds(import("/disk.qcow2"), 1));
      ours_cpu = std::min(ours_cpu, cpu(RUSAGE_SELF) - c0);
      c0 = cpu(RUSAGE_CHILDREN);
      theirs = std::min(theirs, Seconds(qemu_img, 1));
      theirs_cpu = std::min(theirs_cpu, cpu(RUSAGE_CHILDREN) - c0);
      before = std::min(before, Seconds(import("/disk.qcow2", &scratch_importer), 1));
    }
    std::printf("qcow2 CPU seconds (best of %d): wisp %.3f, qemu-img %.3f\n", runs, ours_cpu,
                theirs_cpu);
    rows.push_back({"qcow2 vs qemu-img convert (local)", ours, theirs, true, 1.10});
    rows.push_back({"qcow2 scratch+qemu-img (before)", before, theirs, true, 1.10, false});
  }
  server.Stop();
  std::printf("\n%-36s %10s %10s %10s %8s %s\n", "case (image ", "wisp s", "base s", "ratio",
              "goal", "");
  bool all = true;
  for (const auto& r : rows) {
    double ratio = r.time_ratio ? r.ours / r.theirs : r.theirs / r.ours;
    bool ok = r.time_ratio ? ratio <= r.goal : ratio >= r.goal;
    all = all && (ok || !r.counts);
    std::printf("%-36s %10.3f %10.3f %9.2f%s %7s%.2f %s\n", r.name, r.ours, r.theirs,
                r.time_ratio ? ratio : ratio * 100, r.time_ratio ? "x" : "%",
                r.time_ratio ? "<=" : ">=", r.time_ratio ? r.goal : r.goal * 100,
                !r.counts ? "(not a goal)"
                : ok      ? "ok"
                          : "MISSED");
  }
  std::printf("(%.2f GiB image; throughput ratio = baseline time / wisp time; best of %d)\n", gib,
              runs);
  std::filesystem::remove_all(dir);
  return all ? 0 : 3;
}
