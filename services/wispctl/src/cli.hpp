#pragma once
// Shared pieces of wispctl's commands: NATS connection settings and a Flags parser per command.
//
// Every command is `int Run<Command>(const std::vector<std::string>& args)`, args after the command
// word, returning the process exit code (0 ok, 1 failure, 2 bad usage). Connection settings come
// from flags or from the WISP_NATS_* variables that scripts/local-up writes to endpoints.env.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "wisp/bus/bus.hpp"
#include "wisp/config/flags.hpp"
#include "wisp/runtime/runtime.hpp"

namespace wisp::wispctl {

struct Connection {
  runtime::CommonSettings nats;  // only its NATS settings are used (runtime::AddNatsFlags)
  std::chrono::milliseconds timeout = std::chrono::seconds(2);
};

void AddConnectionFlags(config::Flags& flags, Connection& connection);
absl::StatusOr<std::unique_ptr<bus::Bus>> Connect(const Connection& connection);

// Parses `args` with `flags` (argv[0] is the command name); on --help prints and returns 0 through
// `exit_code`, on a bad flag prints one line and returns 2. Returns true when the command should
// run.
bool ParseCommand(config::Flags& flags, const std::string& command,
                  const std::vector<std::string>& args, int& exit_code);

// The bytes of `file` (fsutil::ReadFile), or of stdin when it is "-" or "".
absl::StatusOr<std::string> ReadInput(const std::string& file);

}  // namespace wisp::wispctl
