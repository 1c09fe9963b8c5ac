#include "wisp/config/flags.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

namespace wisp::config {
namespace {

struct Settings {
  std::string url = "nats://127.0.0.1:4222";
  int64_t workers = 2;
  bool dry = false;
  std::chrono::milliseconds period = std::chrono::hours(24);
  std::string mode = "closed";
};

void Declare(Flags& flags, Settings& s) {
  flags.String("nats-url", &s.url, "NATS URLs");
  flags.Int("workers", &s.workers, "worker threads", [](int64_t n) {
    return n > 0 ? absl::OkStatus() : absl::InvalidArgumentError("must be positive");
  });
  flags.Bool("dry-run", &s.dry, "change nothing");
  flags.Duration("key-rotation-period", &s.period, "rotation");
  flags.Enum("failure-mode", &s.mode, {"closed", "open"}, "what to answer when the bus is down");
}

absl::Status ParseArgs(Flags& flags, std::vector<const char*> args) {
  args.insert(args.begin(), "prog");
  return flags.Parse(static_cast<int>(args.size()), args.data());
}

// Tests that flags set values in both --name value and --name=value forms.
TEST(FlagsTest, ParsesFlags) {
  Settings s;
  Flags flags("prog", "test");
  Declare(flags, s);
  ASSERT_TRUE(
      ParseArgs(flags, {"--nats-url=nats://a:1", "--workers", "8", "--dry-run",
                        "--key-rotation-period", "1h30m", "--failure-mode", "open", "extra"})
          .ok());
  EXPECT_EQ(s.url, "nats://a:1");
  EXPECT_EQ(s.workers, 8);
  EXPECT_TRUE(s.dry);
  EXPECT_EQ(s.period, std::chrono::minutes(90));
  EXPECT_EQ(s.mode, "open");
  EXPECT_EQ(flags.Positional(), std::vector<std::string>{"extra"});
}

// Tests that each bad value is rejected with one message naming the setting.
TEST(FlagsTest, RejectsBadValuesNamingTheSetting) {
  struct Case {
    std::vector<const char*> args;
    std::string want;
  };
  std::vector<Case> cases = {
      {{"--workers", "abc"}, "--workers: \"abc\" is not an integer"},
      {{"--workers", "0"}, "--workers: must be positive"},
      {{"--key-rotation-period", "5x"}, "--key-rotation-period: \"5x\" has unknown unit"},
      {{"--failure-mode", "maybe"}, "--failure-mode: \"maybe\" is not one of closed, open"},
      {{"--bogus"}, "--bogus: unknown flag"},
      {{"--nats-url"}, "--nats-url: needs a value"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.want);
    Settings s;
    Flags flags("prog", "test");
    Declare(flags, s);
    auto st = ParseArgs(flags, c.args);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(st.message()).rfind(c.want, 0), 0u) << st.message();
  }
}

// Tests that flags beat the environment, which beats the YAML file, which beats the default.
TEST(FlagsTest, PrecedenceFlagEnvFileDefault) {
  const std::string file = testing::TempDir() + "/flags_test.yaml";
  std::ofstream(file) << "nats-url: nats://file:1\nworkers: 3\nfailure-mode: open\n";
  setenv("WISP_WORKERS", "5", 1);
  Settings s;
  Flags flags("prog", "test");
  Declare(flags, s);
  ASSERT_TRUE(ParseArgs(flags, {"--config", file.c_str(), "--failure-mode", "closed"}).ok());
  unsetenv("WISP_WORKERS");
  EXPECT_EQ(s.url, "nats://file:1");  // file
  EXPECT_EQ(s.workers, 5);            // env over file
  EXPECT_EQ(s.mode, "closed");        // flag over file
  EXPECT_FALSE(s.dry);                // default
}

// Tests that an unknown key or bad value in the file names the file and key.
TEST(FlagsTest, RejectsBadFile) {
  const std::string file = testing::TempDir() + "/flags_bad.yaml";
  std::ofstream(file) << "workers: many\n";
  Settings s;
  Flags flags("prog", "test");
  Declare(flags, s);
  auto st = ParseArgs(flags, {"--config", file.c_str()});
  EXPECT_NE(std::string(st.message()).find("workers: \"many\" is not an integer"),
            std::string::npos)
      << st.message();
  std::ofstream(file) << "colour: blue\n";
  Flags again("prog", "test");
  Declare(again, s);
  st = ParseArgs(again, {"--config", file.c_str()});
  EXPECT_NE(std::string(st.message()).find("unknown setting \"colour\""), std::string::npos);
}

// Tests that a list holding a mapping is refused with a message, not an exception (a fuzzer find:
// fuzz/regressions/config/list-with-mapping).
TEST(FlagsTest, RejectsNonScalarListItems) {
  const std::string file = testing::TempDir() + "/flags_list_map.yaml";
  std::ofstream(file) << "nats-url: [,ose: true\nknae21k]";
  Settings s;
  Flags flags("prog", "test");
  Declare(flags, s);
  auto st = ParseArgs(flags, {"--config", file.c_str()});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.message()).find("nats-url: list items must be scalars"),
            std::string::npos)
      << st.message();
}

// Tests that --help documents every setting with its environment variable and default.
TEST(FlagsTest, HelpDocumentsEverySetting) {
  Settings s;
  Flags flags("prog", "test");
  Declare(flags, s);
  ASSERT_TRUE(ParseArgs(flags, {"--help"}).ok());
  EXPECT_TRUE(flags.HelpRequested());
  const std::string help = flags.Help();
  for (const char* want : {"--nats-url VALUE", "WISP_NATS_URL", "--key-rotation-period DURATION",
                           "default \"24h\"", "--failure-mode closed|open", "EXIT STATUS"}) {
    EXPECT_NE(help.find(want), std::string::npos) << want;
  }
}

// Tests that a secret is refused on the command line, naming what to use instead and never its
// value, while its environment variable and YAML key still set it.
TEST(FlagsTest, SecretOnlyFromEnvironmentOrFile) {
  std::string password;
  auto declare = [&password](Flags& flags) {
    flags.String("nats-password", &password, "NATS password");
    flags.Secret("--nats-password-file FILE or WISP_NATS_PASSWORD");
  };
  for (const std::vector<const char*>& args :
       {std::vector<const char*>{"--nats-password", "hunter2"},
        std::vector<const char*>{"--nats-password=hunter2"}}) {
    Flags flags("prog", "test");
    declare(flags);
    auto st = ParseArgs(flags, args);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(st.message())
                  .rfind("--nats-password: a secret is not taken on the "
                         "command line",
                         0),
              0u)
        << st.message();
    EXPECT_NE(std::string(st.message()).find("--nats-password-file FILE or WISP_NATS_PASSWORD"),
              std::string::npos)
        << st.message();
    EXPECT_EQ(std::string(st.message()).find("hunter2"), std::string::npos) << st.message();
    EXPECT_TRUE(password.empty());
  }

  setenv("WISP_NATS_PASSWORD", "from-env", 1);
  Flags env("prog", "test");
  declare(env);
  ASSERT_TRUE(ParseArgs(env, {}).ok());
  unsetenv("WISP_NATS_PASSWORD");
  EXPECT_EQ(password, "from-env");

  const std::string file = testing::TempDir() + "/flags_secret.yaml";
  std::ofstream(file) << "nats-password: from-file\n";
  Flags yaml("prog", "test");
  declare(yaml);
  ASSERT_TRUE(ParseArgs(yaml, {"--config", file.c_str()}).ok());
  EXPECT_EQ(password, "from-file");
  EXPECT_NE(yaml.Help().find("Not taken on the command line"), std::string::npos);
}

// Tests the Go-style duration grammar.
TEST(FlagsTest, Durations) {
  EXPECT_EQ(*ParseDuration("250ms"), std::chrono::milliseconds(250));
  EXPECT_EQ(*ParseDuration("30"), std::chrono::seconds(30));
  EXPECT_EQ(*ParseDuration("1h30m"), std::chrono::minutes(90));
  EXPECT_FALSE(ParseDuration("").ok());
  EXPECT_FALSE(ParseDuration("h").ok());
  // Bare seconds past the range are refused, not multiplied into an overflow.
  EXPECT_EQ(ParseDuration("66666666666666666").status().message(),
            "\"66666666666666666\" is out of range");
  EXPECT_EQ(*ParseDuration("1000000000000"), std::chrono::seconds(1'000'000'000'000));
  EXPECT_EQ(FormatDuration(std::chrono::minutes(90)), "1h30m");
  EXPECT_EQ(FormatDuration(std::chrono::milliseconds(1500)), "1500ms");
}

// Tests Between, the range check the services' Int flags share: both ends included, and the
// message names the range.
TEST(FlagsTest, BetweenIncludesBothEnds) {
  const auto check = Flags::Between(1, 256);
  EXPECT_TRUE(check(1).ok());
  EXPECT_TRUE(check(256).ok());
  EXPECT_EQ(check(0).message(), "must be between 1 and 256");
  EXPECT_EQ(check(257).message(), "must be between 1 and 256");
  Flags flags("prog", "test");
  int64_t threads = 4;
  flags.Int("threads", &threads, "threads", Flags::Between(1, 256));
  const char* args[] = {"prog", "--threads", "300"};
  EXPECT_EQ(flags.Parse(3, args).message(), "--threads: must be between 1 and 256");
}

}  // namespace
}  // namespace wisp::config
