#include "cli.hpp"

#include <iostream>

#include "wisp/bus/nats_bus.hpp"
#include "wisp/runtime/runtime.hpp"

namespace wisp::wispctl {

void AddConnectionFlags(config::Flags& flags, Connection& c) {
  flags.String("nats-url", &c.nats_url, "NATS server URLs, comma separated.");
  flags.String("nats-user", &c.nats_user, "NATS user (local stack: wispctl).");
  flags.String("nats-password", &c.nats_password, "NATS password (local stack: in endpoints.env).");
  flags.String("nats-creds", &c.nats_creds, "NATS credentials file.");
  flags.String("nats-ca", &c.nats_ca, "CA bundle for NATS TLS.");
  flags.String("nats-cert", &c.nats_cert,
               "Client certificate for NATS TLS (with --nats-key), for a NATS that verifies "
               "clients (the chart's nats.tls, scripts/local-up).");
  flags.String("nats-key", &c.nats_key, "Client key for NATS TLS.");
  flags.Duration("timeout", &c.timeout, "How long to wait for answers.");
}

absl::StatusOr<std::unique_ptr<bus::Bus>> Connect(const Connection& c) {
  if (c.nats_cert.empty() != c.nats_key.empty()) {
    return absl::InvalidArgumentError("--nats-cert and --nats-key go together");
  }
  bus::NatsBusOptions options;
  WISP_ASSIGN_OR_RETURN(options.servers, runtime::ParseNatsUrls(c.nats_url));
  options.name = "wispctl";
  options.inbox_prefix = "_INBOX.wispctl";
  options.user = c.nats_user;
  options.password = c.nats_password;
  options.creds_file = c.nats_creds;
  options.tls_ca_file = c.nats_ca;
  options.tls_cert_file = c.nats_cert;
  options.tls_key_file = c.nats_key;
  options.connect_timeout = c.timeout;
  WISP_ASSIGN_OR_RETURN(auto bus, bus::NatsBus::Connect(options));
  return std::unique_ptr<bus::Bus>(std::move(bus));
}

bool ParseCommand(config::Flags& flags, const std::string& command,
                  const std::vector<std::string>& args, int& exit_code) {
  std::vector<const char*> argv{command.c_str()};
  for (const auto& a : args) argv.push_back(a.c_str());
  auto status = flags.Parse(static_cast<int>(argv.size()), argv.data());
  if (flags.HelpRequested()) {
    std::cout << flags.Help();
    exit_code = 0;
    return false;
  }
  if (!status.ok()) {
    std::cerr << command << ": " << status.message() << "\n";
    exit_code = 2;
    return false;
  }
  return true;
}

}  // namespace wisp::wispctl
