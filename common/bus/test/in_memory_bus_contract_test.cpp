// The bus contract (testing/bus_contract.hpp) against InMemoryBus, time from a FakeClock.
#include "wisp/bus/testing/bus_contract.hpp"
#include "wisp/bus/testing/in_memory_bus.hpp"
#include "wisp/status/fake_clock.hpp"

namespace wisp::bus::testing {
namespace {

class InMemoryEnv {
 public:
  absl::Status Start() { return absl::OkStatus(); }
  Bus& bus() { return bus_; }
  void Elapse(std::chrono::milliseconds d) { clock_.Advance(d); }

 private:
  FakeClock clock_;
  InMemoryBus bus_{clock_};
};

INSTANTIATE_TYPED_TEST_SUITE_P(InMemory, BusContractTest, ::testing::Types<InMemoryEnv>);

}  // namespace
}  // namespace wisp::bus::testing
