// Token-volume publish/unpublish throughput and latency through the real wisp-gateway CSI socket.
// Starts the local stack (nats-server, wisp-token, wisp-populator, wisp-policy, wisp-gateway),
// then runs `iterations` NodePublishVolume + NodeUnpublishVolume cycles on `concurrency` threads,
// each with its own target path and volume id, as the kubelet would for new pods.
//
// Output: one line per operation with ops/s, p50, p99 and max in milliseconds.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "csi_client.hpp"
#include "wisp/integration/stack.hpp"

namespace {
using Clock = std::chrono::steady_clock;

struct Summary {
  double p50_ms, p99_ms, max_ms;
};

Summary Summarise(std::vector<double>& ms) {
  std::sort(ms.begin(), ms.end());
  auto at = [&](double q) {
    return ms[std::min(ms.size() - 1, static_cast<size_t>(q * ms.size()))];
  };
  return {at(0.50), at(0.99), ms.back()};
}

}  // namespace

int main(int argc, char** argv) {
  int iterations = 300;
  int concurrency = 1;
  int warmup = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--iterations") == 0) iterations = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--concurrency") == 0) concurrency = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--warmup") == 0) warmup = std::atoi(argv[i + 1]);
  }
  if (iterations < 1 || concurrency < 1 || warmup < 0) {
    std::fprintf(stderr,
                 "usage: csi_publish_bench [--iterations N] [--concurrency C] [--warmup W]\n");
    return 2;
  }
  auto stack = wisp::integration::Stack::Start({});
  if (!stack.ok()) {
    std::fprintf(stderr, "starting the stack: %s\n", std::string(stack.status().message()).c_str());
    return 1;
  }
  const std::string socket = (*stack)->csi_socket();
  const std::string root = (*stack)->target_root() + "/bench";
  wisp::integration::CsiClient client(socket);

  auto cycle = [&](int n, double* publish_ms, double* unpublish_ms) -> bool {
    const std::string dir = root + "/" + std::to_string(n);
    std::filesystem::create_directories(dir);
    const std::string target = dir + "/mount";
    const std::string id = "csi-bench-" + std::to_string(n);
    auto req = wisp::integration::TokenVolumeRequest(id, target, "vault", "900",
                                                     "uid-" + std::to_string(n));
    auto t0 = Clock::now();
    grpc::Status st = client.Publish(req);
    auto t1 = Clock::now();
    if (!st.ok()) {
      std::fprintf(stderr, "publish %d: %s\n", n, st.error_message().c_str());
      return false;
    }
    st = client.Unpublish(id, target);
    auto t2 = Clock::now();
    if (!st.ok()) {
      std::fprintf(stderr, "unpublish %d: %s\n", n, st.error_message().c_str());
      return false;
    }
    *publish_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    *unpublish_ms = std::chrono::duration<double, std::milli>(t2 - t1).count();
    return true;
  };

  for (int i = 0; i < warmup; ++i) {
    double a, b;
    if (!cycle(-1 - i, &a, &b)) return 1;
  }

  std::vector<double> publish(iterations), unpublish(iterations);
  std::atomic<int> next{0};
  std::atomic<bool> failed{false};
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < concurrency; ++t) {
    threads.emplace_back([&] {
      for (int n; (n = next++) < iterations && !failed;) {
        if (!cycle(n, &publish[n], &unpublish[n])) failed = true;
      }
    });
  }
  for (auto& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (failed) return 1;

  const Summary p = Summarise(publish);
  const Summary u = Summarise(unpublish);
  double publish_total = 0;
  for (double v : publish) publish_total += v;
  std::printf("csi token volumes: %d cycles, concurrency %d, %.2f s\n", iterations, concurrency,
              seconds);
  // Throughput of whole pod-volume lifecycles, and of publishes alone: each client thread spends
  // publish_total/concurrency ms publishing.
  std::printf("publish+unpublish cycles/s %.1f\n", iterations / seconds);
  std::printf("NodePublishVolume   %.1f publishes/s  p50 %.2f ms  p99 %.2f ms  max %.2f ms\n",
              1000.0 * iterations * concurrency / publish_total, p.p50_ms, p.p99_ms, p.max_ms);
  std::printf("NodeUnpublishVolume p50 %.2f ms  p99 %.2f ms  max %.2f ms\n", u.p50_ms, u.p99_ms,
              u.max_ms);
  return 0;
}
