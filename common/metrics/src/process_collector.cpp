// process_* metrics from /proc/self, in the names the Prometheus client libraries use, so the
// standard dashboards and the soak benchmark's RSS check work unchanged.
#include "process_collector.hpp"

#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "wisp/fsutil/read_file.hpp"

namespace wisp::metrics {
namespace {

prometheus::MetricFamily Gauge(std::string name, std::string help, double value) {
  prometheus::MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = prometheus::MetricType::Gauge;
  prometheus::ClientMetric m;
  m.gauge.value = value;
  f.metric.push_back(m);
  return f;
}

double BootTimeSeconds() {
  std::ifstream stat("/proc/stat");
  std::string key;
  double value = 0;
  while (stat >> key) {
    if (key == "btime") {
      stat >> value;
      return value;
    }
    stat.ignore(1 << 20, '\n');
  }
  return 0;
}

}  // namespace

std::vector<prometheus::MetricFamily> ProcessCollector::Collect() const {
  std::vector<prometheus::MetricFamily> out;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  const std::string stat = fsutil::ReadFile("/proc/self/stat").value_or("");
  // Fields after the parenthesised command name; comm may contain spaces.
  auto close = stat.rfind(')');
  if (close != std::string::npos) {
    std::istringstream rest(stat.substr(close + 2));
    std::vector<std::string> f;
    std::string x;
    while (rest >> x) f.push_back(x);
    // f[0] is field 3 (state): utime=14, stime=15, starttime=22, vsize=23, rss=24.
    if (f.size() > 21) {
      const double utime = std::stod(f[11]), stime = std::stod(f[12]);
      out.push_back(Gauge("process_cpu_seconds_total", "Total user and system CPU time in seconds.",
                          (utime + stime) / ticks));
      out.back().type = prometheus::MetricType::Counter;
      out.back().metric[0].counter.value = (utime + stime) / ticks;
      out.push_back(Gauge("process_start_time_seconds",
                          "Start time of the process since unix epoch in seconds.",
                          BootTimeSeconds() + std::stod(f[19]) / ticks));
      out.push_back(
          Gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", std::stod(f[20])));
      out.push_back(Gauge("process_resident_memory_bytes", "Resident memory size in bytes.",
                          std::stod(f[21]) * page));
    }
  }
  int fds = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d) != nullptr) ++fds;
    closedir(d);
    fds -= 3;  // ".", ".." and the directory's own descriptor
  }
  out.push_back(Gauge("process_open_fds", "Number of open file descriptors.", fds));
  return out;
}

}  // namespace wisp::metrics
