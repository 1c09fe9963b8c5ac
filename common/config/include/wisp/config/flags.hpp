#pragma once
// Command-line settings for every wisp binary: flags over environment over a YAML file.
//
// Contract:
//   - Each setting has a flag name ("nats-url"), an environment variable (WISP_NATS_URL, derived
//     unless given) and a YAML key equal to the flag name, read from the file named by --config
//     (or WISP_CONFIG). Precedence: flag > environment > file > default.
//   - Parse() returns InvalidArgument with one line naming the setting and the source of the bad
//     value ("--port: \"abc\" is not an integer"). main() prints it and exits 2 (see ParseOrExit).
//   - --help prints a man-page style description of every setting (name, env, default, help) and
//     exits 0; --version prints the version.
//   - Durations accept Go-style values: "90s", "5m", "24h", "1h30m", "250ms".
//   - A setting marked Secret() (a password, a token) is refused on the command line, where `ps`
//     and /proc/<pid>/cmdline show it to every user of the machine: Parse() fails naming the
//     setting and what to use instead, before reading its value. Its environment variable and its
//     YAML key still set it (/proc/<pid>/environ and a mode-0600 file are the owner's alone).
//
// Example:
//   Flags flags("wisp-token", "token issuance: signing keys, JWKS, bound tokens, STS exchange");
//   std::string nats_url = "nats://127.0.0.1:4222";
//   flags.String("nats-url", &nats_url, "NATS server URLs, comma separated");
//   std::chrono::milliseconds rotation = std::chrono::hours(24);
//   flags.Duration("key-rotation-period", &rotation, "how often a new signing key is made",
//                  [](auto d) { return d >= std::chrono::hours(1) ? absl::OkStatus()
//                               : absl::InvalidArgumentError("must be at least 1h"); });
//   flags.ParseOrExit(argc, argv);
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "wisp/status/status.hpp"

namespace wisp::config {

absl::StatusOr<std::chrono::milliseconds> ParseDuration(std::string_view text);
std::string FormatDuration(std::chrono::milliseconds d);

class Flags {
 public:
  Flags(std::string program, std::string summary);
  ~Flags();

  // Free text shown under DESCRIPTION, EXAMPLES, FILES in --help.
  void Description(std::string text);
  void Examples(std::string text);

  template <typename T>
  using Validator = std::function<absl::Status(const T&)>;
  // An Int validator: lo <= n <= hi, else "must be between <lo> and <hi>".
  static Validator<int64_t> Between(int64_t lo, int64_t hi);

  void String(std::string name, std::string* dest, std::string help, Validator<std::string> v = {});
  void Int(std::string name, int64_t* dest, std::string help, Validator<int64_t> v = {});
  void Bool(std::string name, bool* dest, std::string help);
  void Duration(std::string name, std::chrono::milliseconds* dest, std::string help,
                Validator<std::chrono::milliseconds> v = {});
  // One of a fixed set of values.
  void Enum(std::string name, std::string* dest, std::vector<std::string> choices,
            std::string help);
  // Override the derived environment variable name for the last setting added.
  void Env(std::string env_name);
  // Marks the last setting added as a secret that may not be given on the command line (see the
  // contract); `instead` names what to use, e.g. "--nats-password-file FILE or WISP_NATS_PASSWORD".
  void Secret(std::string instead);

  // Parses argv (after argv[0]); non-flag words are collected into Positional().
  // Returns NotFound-free OK, or InvalidArgument naming the setting. Handles --help and --version
  // by setting HelpRequested()/VersionRequested() (ParseOrExit acts on them).
  absl::Status Parse(int argc, const char* const* argv);
  // Parse(), then: --help -> print Help(), exit 0; --version -> print, exit 0; error -> one line
  // "<program>: <error>" on stderr, exit 2.
  void ParseOrExit(int argc, const char* const* argv);

  const std::vector<std::string>& Positional() const;
  bool HelpRequested() const;
  bool VersionRequested() const;
  std::string Help() const;
  // Every flag name accepted (for the compose/flags consistency test).
  std::vector<std::string> Names() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace wisp::config
