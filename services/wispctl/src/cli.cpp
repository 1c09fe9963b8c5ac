#include "cli.hpp"

#include <iostream>
#include <iterator>

#include "wisp/bus/nats_bus.hpp"
#include "wisp/fsutil/read_file.hpp"
#include "wisp/runtime/runtime.hpp"

namespace wisp::wispctl {

void AddConnectionFlags(config::Flags& flags, Connection& c) {
  runtime::AddNatsFlags(flags, c.nats);
  flags.Duration("timeout", &c.timeout, "How long to wait for answers.");
}

absl::StatusOr<std::unique_ptr<bus::Bus>> Connect(const Connection& c) {
  WISP_ASSIGN_OR_RETURN(bus::NatsBusOptions options, runtime::NatsOptions(c.nats, "wispctl"));
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

absl::StatusOr<std::string> ReadInput(const std::string& file) {
  if (!file.empty() && file != "-") return fsutil::ReadFile(file);
  std::string text{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
  if (std::cin.bad()) return absl::FailedPreconditionError("stdin: read error");
  return text;
}

}  // namespace wisp::wispctl
