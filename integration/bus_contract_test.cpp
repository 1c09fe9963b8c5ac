// The bus contract (common/bus/testing/wisp/bus/testing/bus_contract.hpp) against NatsBus over a
// real nats-server, started per test on a free port by the harness; time is real.
#include <thread>

#include "wisp/bus/nats_bus.hpp"
#include "wisp/bus/testing/bus_contract.hpp"
#include "wisp/integration/harness.hpp"
#include "wisp/integration/nats_test.hpp"

namespace wisp::bus::testing {
namespace {

class NatsEnv {
 public:
  absl::Status Start() {
    WISP_ASSIGN_OR_RETURN(nats_, integration::NatsServer::Start());
    WISP_ASSIGN_OR_RETURN(
        bus_, NatsBus::Connect(integration::TestBusOptions({nats_->url()}, "contract")));
    return absl::OkStatus();
  }
  Bus& bus() { return *bus_; }
  void Elapse(std::chrono::milliseconds d) { std::this_thread::sleep_for(d); }

 private:
  std::unique_ptr<integration::NatsServer> nats_;
  std::unique_ptr<NatsBus> bus_;  // declared last: closed before the server goes
};

INSTANTIATE_TYPED_TEST_SUITE_P(Nats, BusContractTest, ::testing::Types<NatsEnv>);

}  // namespace
}  // namespace wisp::bus::testing
