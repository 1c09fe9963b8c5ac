// Fuzzes wisp::config: the YAML settings file (--config) and the command line, with every kind of
// setting declared (string, int, bool, duration with a validator, enum, a secret), plus
// ParseDuration. Aborts if a validator is bypassed or a secret is accepted from the command line.
//
// Input: <YAML file> NUL <argv words, one per line>.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "wisp/config/flags.hpp"

namespace config = wisp::config;

namespace {
const std::string& ConfigPath() {
  static const std::string path = [] {
    char tmpl[] = "/tmp/wisp-fuzz-config-XXXXXX";
    const int fd = mkstemp(tmpl);
    if (fd < 0) abort();
    close(fd);
    return std::string(tmpl);
  }();
  return path;
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // The environment is one of the sources; keep it out of the way.
  unsetenv("WISP_CONFIG");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string_view yaml = in.substr(0, nul);
  std::vector<std::string> words = {"wisp-fuzz", "--config", ConfigPath()};
  if (nul != std::string_view::npos) {
    std::string_view rest = in.substr(nul + 1);
    while (!rest.empty() && words.size() < 64) {
      const size_t nl = rest.find('\n');
      words.emplace_back(rest.substr(0, nl));
      if (nl == std::string_view::npos) break;
      rest.remove_prefix(nl + 1);
    }
  }
  FILE* f = fopen(ConfigPath().c_str(), "wb");
  if (f == nullptr) abort();
  fwrite(yaml.data(), 1, yaml.size(), f);
  fclose(f);

  (void)config::ParseDuration(yaml);
  config::Flags flags("wisp-fuzz", "fuzzing the settings parser");
  std::string url = "nats://127.0.0.1:4222";
  int64_t port = 8443;
  bool verbose = false;
  std::chrono::milliseconds period = std::chrono::hours(24);
  std::string mode = "closed";
  flags.String("nats-url", &url, "NATS URLs");
  flags.Int("port", &port, "port", [](const int64_t& p) {
    return p > 0 && p < 65536 ? absl::OkStatus() : absl::InvalidArgumentError("must be 1..65535");
  });
  flags.Bool("verbose", &verbose, "chatty");
  flags.Duration(
      "key-rotation-period", &period, "rotation period", [](const std::chrono::milliseconds& d) {
        return d >= std::chrono::seconds(1) ? absl::OkStatus()
                                            : absl::InvalidArgumentError("must be at least 1s");
      });
  flags.Enum("failure-mode", &mode, {"open", "closed"}, "what to answer when the bus is down");
  std::string password;
  flags.String("password", &password, "a secret");
  flags.Secret("WISP_PASSWORD or the --config file");
  std::vector<const char*> argv;
  for (const auto& w : words) argv.push_back(w.c_str());
  const absl::Status st = flags.Parse(static_cast<int>(argv.size()), argv.data());
  if (st.ok() && !flags.HelpRequested()) {
    // Validators hold for whatever was accepted, from any source.
    if (port <= 0 || port >= 65536 || period < std::chrono::seconds(1)) abort();
    if (mode != "open" && mode != "closed") abort();
    // A secret is never taken from the command line. Words after "--" are not flags, and the word
    // after a flag that takes a value (without "=") is that value, whatever it looks like.
    static const std::set<std::string> kTakesValue = {"--config", "--nats-url", "--port",
                                                      "--key-rotation-period", "--failure-mode"};
    for (size_t i = 1; i < words.size() && words[i] != "--"; ++i) {
      if (words[i] == "--password" || words[i].rfind("--password=", 0) == 0) abort();
      if (kTakesValue.count(words[i]) != 0) ++i;
    }
  }
  if (flags.HelpRequested()) (void)flags.Help();
  return 0;
}
