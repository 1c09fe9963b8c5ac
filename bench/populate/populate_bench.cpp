// bench/populate: wisp-populator's import engine against the tools it replaces, in one run on this
// machine, printing the ratios the goals are stated in:
//   raw   over loopback HTTP          vs `curl -o`                        (goal >= 85% throughput)
//   gz/xz over loopback HTTP          vs `curl | gzip -dc` / `| xz -dc`   (goal >= 90% throughput)
//   qcow2 over loopback HTTP          vs `qemu-img convert -O raw` local  (goal <= 1.1x time)
// The image is WISP_BENCH_MIB (default 1024) MiB with a quarter random data, the rest holes.
//   raw+sha256: the raw import verifying a sha256, against the same `curl -o` goal.
// Each measurement is the best of WISP_BENCH_RUNS (default 2) runs, ours and theirs alternately.
// WISP_BENCH_CASES (default "raw,raw-sha256,gz,xz,qcow2") picks the cases, e.g.
// WISP_BENCH_CASES=raw. The qcow2 case also times the previous way (a scratch copy, then
// qemu-img) against the same baseline, shown for comparison only. Outputs go to $TMPDIR.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "importer.hpp"
#include "wisp/populator/testing/test_http_server.hpp"

namespace {

using wisp::populator::Importer;
using wisp::populator::ImportSpec;
using wisp::populator::SourceKind;
using wisp::populator::testing::Sh;

// User + system CPU seconds of this process (the import and the test server's threads) and of
// its waited-for children (curl, gzip, ...).
double CpuSeconds() {
  double total = 0;
  for (int who : {RUSAGE_SELF, RUSAGE_CHILDREN}) {
    struct rusage ru {};
    ::getrusage(who, &ru);
    for (const timeval& tv : {ru.ru_utime, ru.ru_stime}) {
      total += static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6;
    }
  }
  return total;
}

struct Timing {
  double wall = 1e9;  // best wall-clock seconds
  double cpu = 1e9;   // best CPU seconds (server included on both sides): steadier under load
};

// Runs ours and theirs alternately `runs` times each, so a burst of load hits both alike.
std::pair<Timing, Timing> Compare(const std::function<bool()>& ours,
                                  const std::function<bool()>& theirs, int runs) {
  std::pair<Timing, Timing> best;
  for (int i = 0; i < runs; ++i) {
    for (auto [fn, t] : {std::pair{&ours, &best.first}, std::pair{&theirs, &best.second}}) {
      double cpu0 = CpuSeconds();
      auto t0 = std::chrono::steady_clock::now();
      if (!(*fn)()) {
        std::fprintf(stderr, "run failed\n");
        std::exit(1);
      }
      t->wall = std::min(
          t->wall, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      t->cpu = std::min(t->cpu, CpuSeconds() - cpu0);
    }
  }
  return best;
}

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

// The comma-separated case names of WISP_BENCH_CASES; all four when unset or empty.
std::set<std::string> Cases() {
  static constexpr const char* kAll[] = {"raw", "raw-sha256", "gz", "xz", "qcow2"};
  std::set<std::string> out;
  const char* v = std::getenv("WISP_BENCH_CASES");
  std::string list = v ? v : "";
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = std::min(list.find(',', start), list.size());
    std::string name = list.substr(start, comma - start);
    if (!name.empty()) {
      if (std::find(std::begin(kAll), std::end(kAll), name) == std::end(kAll)) {
        std::fprintf(stderr,
                     "WISP_BENCH_CASES: unknown case \"%s\" (raw, raw-sha256, gz, xz, qcow2)\n",
                     name.c_str());
        std::exit(2);
      }
      out.insert(name);
    }
    start = comma + 1;
  }
  if (out.empty()) out.insert(std::begin(kAll), std::end(kAll));
  return out;
}

}  // namespace

int main() {
  const int mib = EnvInt("WISP_BENCH_MIB", 1024);
  const int runs = EnvInt("WISP_BENCH_RUNS", 2);
  const std::set<std::string> cases = Cases();
  const std::string dir = std::filesystem::temp_directory_path() /
                          ("wisp-bench-populate-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string m = std::to_string(mib);
  std::printf("building a %d MiB image in %s ...\n", mib, dir.c_str());
  // Random 4 MiB chunks in every 16 MiB stretch: a quarter data, three quarters holes.
  std::string build =
      "cd " + dir + " && truncate -s " + m + "M disk.raw && for i in $(seq 0 16 " +
      std::to_string(mib - 1) + "); do dd if=/dev/urandom of=disk.raw bs=1M count=4 " +
      "seek=$i conv=notrunc status=none; done" +
      (cases.count("gz") ? " && gzip -1 -c disk.raw > disk.raw.gz" : "") +
      (cases.count("xz") ? " && xz -0 -T2 -c disk.raw > disk.raw.xz" : "") +
      (cases.count("qcow2") ? " && qemu-img convert -f raw -O qcow2 disk.raw disk.qcow2" : "") +
      (cases.count("raw-sha256") ? " && sha256sum disk.raw | cut -c1-64 > disk.raw.sha256" : "") +
      " && sync";
  if (Sh(build) != 0) return 1;
  std::string raw_sha256;
  if (cases.count("raw-sha256")) {
    std::ifstream in(dir + "/disk.raw.sha256");
    std::getline(in, raw_sha256);
  }

  wisp::populator::testing::TestHttpServer server;
  server.Serve("/disk.raw", dir + "/disk.raw");
  for (const char* c : {"gz", "xz"}) {
    if (cases.count(c)) server.Serve(std::string("/disk.raw.") + c, dir + "/disk.raw." + c);
  }
  if (cases.count("qcow2")) server.Serve("/disk.qcow2", dir + "/disk.qcow2");
  if (!server.Start().ok()) return 1;
  // wisp-populator's defaults (--checkpoint-interval 64Mi, --checkpoint-min-interval 2s).
  Importer::Options options;
  options.checkpoint_min_interval = std::chrono::seconds(2);
  Importer importer(options);
  Importer::Options scratch_options = options;
  scratch_options.stream_qcow2 = false;
  Importer scratch_importer(scratch_options);
  const uint64_t capacity = static_cast<uint64_t>(mib) << 20;
  auto import = [&](const std::string& path, const std::string& sha256 = "",
                    Importer* with = nullptr) {
    return [&, path, sha256, with] {
      std::filesystem::remove_all(dir + "/vol");
      ImportSpec spec;
      spec.kind = SourceKind::kHttp;
      spec.url = server.Url(path);
      spec.capacity = capacity;
      spec.dir = dir + "/vol";
      spec.sha256 = sha256;
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
    std::pair<Timing, Timing> t;  // wisp, baseline
    bool time_ratio;              // qcow2: compare times, not throughput
    double goal;
    bool counts = true;  // false: shown for comparison, not a goal
  };
  std::vector<Row> rows;
  if (cases.count("raw")) {
    rows.push_back(
        {"raw   vs curl -o",
         Compare(import("/disk.raw"),
                 shell("curl -s -o " + dir + "/out.raw " + server.Url("/disk.raw")), runs),
         false, 0.85});
  }
  if (cases.count("raw-sha256")) {
    // The same import asked to verify the image's sha256 (hashed on its own thread).
    rows.push_back(
        {"raw+sha256 vs curl -o",
         Compare(import("/disk.raw", raw_sha256),
                 shell("curl -s -o " + dir + "/out.raw " + server.Url("/disk.raw")), runs),
         false, 0.85});
  }
  if (cases.count("gz")) {
    rows.push_back({"gz    vs curl | gzip -dc",
                    Compare(import("/disk.raw.gz"),
                            shell("curl -s " + server.Url("/disk.raw.gz") + " | gzip -dc > " + dir +
                                  "/out.raw"),
                            runs),
                    false, 0.90});
  }
  if (cases.count("xz")) {
    rows.push_back(
        {"xz    vs curl | xz -dc",
         Compare(import("/disk.raw.xz"),
                 shell("curl -s " + server.Url("/disk.raw.xz") + " | xz -dc > " + dir + "/out.raw"),
                 runs),
         false, 0.90});
  }
  if (cases.count("qcow2")) {
    rows.push_back({"qcow2 vs qemu-img convert (local)",
                    Compare(import("/disk.qcow2"),
                            shell("qemu-img convert -t writeback -f qcow2 -O raw " + dir +
                                  "/disk.qcow2 " + dir + "/out.raw"),
                            runs),
                    true, 1.10});
    rows.push_back({"qcow2 scratch+qemu-img (before)",
                    Compare(import("/disk.qcow2", "", &scratch_importer),
                            shell("qemu-img convert -t writeback -f qcow2 -O raw " + dir +
                                  "/disk.qcow2 " + dir + "/out.raw"),
                            runs),
                    true, 1.10, false});
  }
  server.Stop();
  std::printf("\n%-36s %10s %10s %10s %8s %-6s %9s %9s\n", "case (image ", "wisp s", "base s",
              "ratio", "goal", "", "wisp cpu", "base cpu");
  bool all = true;
  for (const auto& r : rows) {
    const double ours = r.t.first.wall, theirs = r.t.second.wall;
    double ratio = r.time_ratio ? ours / theirs : theirs / ours;
    bool ok = r.time_ratio ? ratio <= r.goal : ratio >= r.goal;
    if (r.counts) all = all && ok;
    std::printf("%-36s %10.3f %10.3f %9.2f%s %7s%.2f %-6s %9.3f %9.3f\n", r.name, ours, theirs,
                r.time_ratio ? ratio : ratio * 100, r.time_ratio ? "x" : "%",
                r.time_ratio ? "<=" : ">=", r.time_ratio ? r.goal : r.goal * 100,
                !r.counts ? "(info)"
                : ok      ? "ok"
                          : "MISSED",
                r.t.first.cpu, r.t.second.cpu);
  }
  std::printf(
      "(%.2f GiB image; throughput ratio = baseline time / wisp time; best of %d, run "
      "alternately;\n"
      " cpu = user+sys seconds including the in-process test server on both sides)\n",
      gib, runs);
  std::filesystem::remove_all(dir);
  return all ? 0 : 3;
}
