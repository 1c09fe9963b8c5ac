// Round-trip latency of one request/reply through common/bus (NatsBus) against raw nats.c, in the
// same run, against a nats-server on loopback that this program starts itself.
//
// This file and common/bus/src are the only wisp sources that include nats.h: the raw
// nats.c numbers are the baseline the bus is measured against.
//
// Usage: bus_rtt_bench [--iterations N] [--rounds R] [--payload BYTES]
// Prints p50/p99/mean of each and the p50 ratio (goal: common/bus within 1.2x of raw nats.c).
#include <nats/nats.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "wisp/bus/nats_bus.hpp"
#include "wisp/integration/harness.hpp"

namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kRawSubject = "bench.raw.echo";
constexpr const char* kBusSubject = "bench.bus.echo";

struct Stats {
  double p50 = 0, p99 = 0, mean = 0;
};

Stats Summarize(std::vector<double> us) {
  Stats s;
  if (us.empty()) return s;
  std::sort(us.begin(), us.end());
  s.p50 = us[us.size() / 2];
  s.p99 = us[std::min(us.size() - 1, us.size() * 99 / 100)];
  double sum = 0;
  for (double v : us) sum += v;
  s.mean = sum / static_cast<double>(us.size());
  return s;
}

void RawEcho(natsConnection* nc, natsSubscription*, natsMsg* msg, void*) {
  natsConnection_Publish(nc, natsMsg_GetReply(msg), natsMsg_GetData(msg),
                         natsMsg_GetDataLength(msg));
  natsMsg_Destroy(msg);
}

natsConnection* RawConnect(const std::string& url) {
  natsOptions* o = nullptr;
  natsOptions_Create(&o);
  natsOptions_SetURL(o, url.c_str());
  natsOptions_SetSendAsap(o, true);
  natsConnection* nc = nullptr;
  natsStatus s = natsConnection_Connect(&nc, o);
  natsOptions_Destroy(o);
  if (s != NATS_OK) {
    std::fprintf(stderr, "raw connect: %s\n", natsStatus_GetText(s));
    std::exit(1);
  }
  return nc;
}

int ArgInt(int argc, char** argv, const char* name, int def) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
  }
  return def;
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = ArgInt(argc, argv, "--iterations", 5000);
  const int rounds = ArgInt(argc, argv, "--rounds", 4);
  const int payload_size = ArgInt(argc, argv, "--payload", 128);
  const std::string payload(static_cast<size_t>(payload_size), 'x');

  wisp::integration::NatsServer::Options so;
  so.jetstream = false;
  auto server = wisp::integration::NatsServer::Start(so);
  if (!server.ok()) {
    std::fprintf(stderr, "starting nats-server: %s\n",
                 std::string(server.status().message()).c_str());
    return 1;
  }
  const std::string url = (*server)->url();

  // Raw nats.c: one connection serves, another requests (the same shape as the bus pair).
  natsConnection* raw_server = RawConnect(url);
  natsConnection* raw_client = RawConnect(url);
  natsSubscription* raw_sub = nullptr;
  natsConnection_Subscribe(&raw_sub, raw_server, kRawSubject, RawEcho, nullptr);
  natsConnection_Flush(raw_server);

  wisp::bus::NatsBusOptions bo;
  bo.servers = {url};
  auto bus_server = wisp::bus::NatsBus::Connect(bo);
  auto bus_client = wisp::bus::NatsBus::Connect(bo);
  if (!bus_server.ok() || !bus_client.ok()) {
    std::fprintf(stderr, "bus connect failed\n");
    return 1;
  }
  auto bus_sub = (*bus_server)->Serve(kBusSubject, "", [](const wisp::bus::Request& r) {
    return wisp::bus::Reply::Ok(r.msg.data);
  });
  if (!bus_sub.ok()) return 1;

  auto raw_once = [&]() -> double {
    natsMsg* reply = nullptr;
    const auto t0 = Clock::now();
    natsStatus s = natsConnection_Request(&reply, raw_client, kRawSubject, payload.data(),
                                          static_cast<int>(payload.size()), 1000);
    const auto t1 = Clock::now();
    if (s != NATS_OK) {
      std::fprintf(stderr, "raw request: %s\n", natsStatus_GetText(s));
      std::exit(1);
    }
    natsMsg_Destroy(reply);
    return std::chrono::duration<double, std::micro>(t1 - t0).count();
  };
  auto bus_once = [&]() -> double {
    const auto t0 = Clock::now();
    auto reply = (*bus_client)->Request(kBusSubject, payload, std::chrono::milliseconds(1000));
    const auto t1 = Clock::now();
    if (!reply.ok() || reply->data.size() != payload.size()) {
      std::fprintf(stderr, "bus request: %s\n", std::string(reply.status().message()).c_str());
      std::exit(1);
    }
    return std::chrono::duration<double, std::micro>(t1 - t0).count();
  };

  // Where the difference comes from: the bus client against the raw server, and the raw client
  // against the bus server (--split).
  auto bus_client_raw_server = [&]() -> double {
    const auto t0 = Clock::now();
    auto reply = (*bus_client)->Request(kRawSubject, payload, std::chrono::milliseconds(1000));
    const auto t1 = Clock::now();
    if (!reply.ok()) std::exit(1);
    return std::chrono::duration<double, std::micro>(t1 - t0).count();
  };
  auto raw_client_bus_server = [&]() -> double {
    natsMsg* reply = nullptr;
    const auto t0 = Clock::now();
    natsStatus s = natsConnection_Request(&reply, raw_client, kBusSubject, payload.data(),
                                          static_cast<int>(payload.size()), 1000);
    const auto t1 = Clock::now();
    if (s != NATS_OK) std::exit(1);
    natsMsg_Destroy(reply);
    return std::chrono::duration<double, std::micro>(t1 - t0).count();
  };
  bool split = false;
  for (int i = 1; i < argc; ++i) split |= std::strcmp(argv[i], "--split") == 0;

  for (int i = 0; i < 500; ++i) {  // warm-up: connections, inbox muxes, caches
    raw_once();
    bus_once();
  }
  std::vector<double> raw_us, bus_us;
  raw_us.reserve(static_cast<size_t>(iterations) * rounds);
  bus_us.reserve(static_cast<size_t>(iterations) * rounds);
  // Alternate in small blocks so machine noise (CI runners, shared cores) hits both sides alike.
  // The paired ratio (median over blocks of bus p50 / raw p50 within the block) is the figure
  // least disturbed by load that comes and goes during the run.
  constexpr int kBlock = 50;
  std::vector<double> block_ratios;
  for (int r = 0; r < rounds; ++r) {
    for (int done = 0; done < iterations; done += kBlock) {
      const int n = std::min(kBlock, iterations - done);
      std::vector<double> raw_block, bus_block;
      const bool raw_first = (done / kBlock) % 2 == 0;  // alternate who goes first
      if (raw_first)
        for (int i = 0; i < n; ++i) raw_block.push_back(raw_once());
      for (int i = 0; i < n; ++i) bus_block.push_back(bus_once());
      if (!raw_first)
        for (int i = 0; i < n; ++i) raw_block.push_back(raw_once());
      block_ratios.push_back(Summarize(bus_block).p50 / Summarize(raw_block).p50);
      raw_us.insert(raw_us.end(), raw_block.begin(), raw_block.end());
      bus_us.insert(bus_us.end(), bus_block.begin(), bus_block.end());
    }
  }
  std::sort(block_ratios.begin(), block_ratios.end());
  const double paired = block_ratios[block_ratios.size() / 2];
  const Stats raw = Summarize(raw_us);
  const Stats bus = Summarize(bus_us);
  std::printf("request/reply round trip, %d-byte payload, %d samples each, loopback nats-server\n",
              payload_size, iterations * rounds);
  std::printf("  raw nats.c (SendAsap)   p50 %8.1f us   p99 %8.1f us   mean %8.1f us\n", raw.p50,
              raw.p99, raw.mean);
  std::printf("  common/bus (NatsBus)    p50 %8.1f us   p99 %8.1f us   mean %8.1f us\n", bus.p50,
              bus.p99, bus.mean);
  std::printf("  ratio bus/raw           p50 %8.2fx       p99 %8.2fx   (goal: p50 <= 1.20x)\n",
              bus.p50 / raw.p50, bus.p99 / raw.p99);
  std::printf("  paired ratio (median of %zu blocks of %d)   %5.2fx\n", block_ratios.size(), kBlock,
              paired);
  if (split) {
    std::vector<double> a, b, r;
    for (int done = 0; done < iterations; done += kBlock) {
      for (int i = 0; i < kBlock; ++i) r.push_back(raw_once());
      for (int i = 0; i < kBlock; ++i) a.push_back(bus_client_raw_server());
      for (int i = 0; i < kBlock; ++i) b.push_back(raw_client_bus_server());
    }
    std::printf(
        "  split: raw/raw p50 %.1f us, bus client/raw server p50 %.1f us, "
        "raw client/bus server p50 %.1f us\n",
        Summarize(r).p50, Summarize(a).p50, Summarize(b).p50);
  }
  std::fflush(stdout);

  bus_sub->reset();
  natsSubscription_Unsubscribe(raw_sub);
  natsSubscription_Destroy(raw_sub);
  natsConnection_Destroy(raw_server);
  natsConnection_Destroy(raw_client);
  return 0;
}
