// wispctl: the operator CLI. Each command lives in src/<command>.cpp; this file only dispatches.
#include <iostream>
#include <string>
#include <vector>

#include "admit.hpp"
#include "datavolume.hpp"
#include "keys.hpp"
#include "status.hpp"
#include "token.hpp"
#include "volume.hpp"

namespace {

constexpr const char* kUsage = R"(NAME
    wispctl - operate a wisp installation from the command line

SYNOPSIS
    wispctl COMMAND [OPTIONS]

COMMANDS
    status     every service instance that answers on the bus, versions and request stats
    admit      run a manifest through the admission policy and print the verdict and patch
    token      issue, verify or exchange a token (issue | verify | exchange)
    keys       list, rotate, taint or revoke wisp-token's signing keys
    volume     create, get, list, watch or upload a populated volume
    datavolume upload an image into a CDI DataVolume with spec.source.upload (on a cluster)
    version    print the version

    `wispctl COMMAND --help` documents each command's options.

ENVIRONMENT
    WISP_NATS_URL, WISP_NATS_USER, WISP_NATS_PASSWORD_FILE, WISP_NATS_CA, WISP_NATS_CERT,
    WISP_NATS_KEY, WISP_GATEWAY_URL, WISP_CA_FILE: as written by scripts/local-up to
    var/local/endpoints.env (`set -a; . var/local/endpoints.env; set +a`).
    KUBECONFIG: the cluster `wispctl datavolume` reads DataVolumes from (else in-cluster, else
    ~/.kube/config).
    Secrets (--nats-password, --nats-token, --token) are refused on the command line, where
    `ps` shows them to every user: use their -file forms or their WISP_* variables.

EXIT STATUS
    0 success; 1 the operation failed; 2 bad usage.
)";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h" ||
      std::string(argv[1]) == "help") {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "status") return wisp::wispctl::RunStatus(args);
  if (command == "version" || command == "--version") {
    std::cout << "wispctl " << WISP_VERSION << "\n";
    return 0;
  }
  if (command == "admit") return wisp::wispctl::RunAdmit(args);
  if (command == "token") return wisp::wispctl::RunToken(args);
  if (command == "keys") return wisp::wispctl::RunKeys(args);
  if (command == "volume") return wisp::wispctl::RunVolume(args);
  if (command == "datavolume") return wisp::wispctl::RunDataVolume(args);
  std::cerr << "wispctl: unknown command \"" << command << "\" (see wispctl --help)\n";
  return 2;
}
