// wisp-gateway: parses settings, starts the process skeleton and the Gateway, waits for SIGTERM.
#include "gateway.hpp"

int main(int argc, char** argv) {
  using namespace wisp;
  runtime::CommonSettings common{.metrics_address = "0.0.0.0:9090"};
  gateway::GatewaySettings settings;
  config::Flags flags("wisp-gateway",
                      "the door between Kubernetes and wisp: admission webhooks, OIDC, STS, CSI");
  flags.Description(
      "Serves kube-apiserver's AdmissionReview calls on /mutate and /validate, OIDC discovery and "
      "JWKS for token verifiers, RFC 8693 token exchange on /v1/token, image uploads on "
      "/v1/upload/<volume> (streamed to the volume's populator), and the CSI Identity, "
      "Controller and Node services on a unix socket. Each request becomes a NATS request to "
      "wisp-policy, wisp-token or wisp-populator; the gateway itself keeps only node-local state "
      "(token files it rotates, bind mounts).");
  flags.Examples(
      "wisp-gateway --nats-url nats://127.0.0.1:4222 --tls-cert gw.pem --tls-key gw-key.pem "
      "--csi-endpoint unix:///run/wisp/csi.sock --csi-role both");
  runtime::AddCommonFlags(flags, common);
  gateway::AddGatewayFlags(flags, settings);
  flags.ParseOrExit(argc, argv);
  if (auto s = gateway::ValidateGatewaySettings(settings); !s.ok()) {
    return runtime::Fail("wisp-gateway", s);
  }

  auto process = runtime::Process::Start("wisp-gateway", common);
  if (!process.ok()) return runtime::Fail("wisp-gateway", process.status());
  auto gw = gateway::Gateway::Start(settings, **process);
  if (!gw.ok()) return runtime::Fail("wisp-gateway", gw.status());
  (*process)->WaitForSignal();
  (*gw)->Stop();
  return (*process)->Shutdown();
}
