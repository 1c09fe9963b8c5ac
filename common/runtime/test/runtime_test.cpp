#include "wisp/runtime/runtime.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>

#include "wisp/bus/replicas.hpp"

namespace wisp::runtime {
namespace {

// Tests that comma-separated NATS URLs split, trim, and are rejected naming the setting.
TEST(RuntimeTest, ParsesNatsUrls) {
  auto urls = ParseNatsUrls("nats://a:4222, tls://b:4222,");
  ASSERT_TRUE(urls.ok());
  EXPECT_EQ(*urls, (std::vector<std::string>{"nats://a:4222", "tls://b:4222"}));
  auto bad = ParseNatsUrls("localhost:4222");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(bad.status().message()).find("nats-url"), std::string::npos);
  EXPECT_FALSE(ParseNatsUrls(" , ").ok());
}

// Tests that NatsOptions maps every --nats-* flag (the mapping services and wispctl share), reads
// the secrets from their files, and refuses a client certificate without its key, naming both
// flags.
TEST(RuntimeTest, NatsOptionsMapsEveryNatsFlag) {
  const std::string password_file = testing::TempDir() + "/nats.password";
  const std::string token_file = testing::TempDir() + "/nats.token";
  std::ofstream(password_file) << "p\n";
  std::ofstream(token_file) << "t";
  CommonSettings s;
  config::Flags flags("wispctl", "test");
  AddNatsFlags(flags, s);
  const char* argv[] = {"wispctl",
                        "--nats-url",
                        "tls://a:4222,tls://b:4222",
                        "--nats-user",
                        "u",
                        "--nats-password-file",
                        password_file.c_str(),
                        "--nats-creds",
                        "/c.creds",
                        "--nats-token-file",
                        token_file.c_str(),
                        "--nats-ca",
                        "/ca.pem",
                        "--nats-cert",
                        "/cert.pem",
                        "--nats-key",
                        "/key.pem",
                        "--nats-inbox-prefix",
                        "_INBOX.me"};
  ASSERT_TRUE(flags.Parse(static_cast<int>(std::size(argv)), argv).ok());
  auto o = NatsOptions(s, "wispctl");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->servers, (std::vector<std::string>{"tls://a:4222", "tls://b:4222"}));
  EXPECT_EQ(o->name, "wispctl");
  EXPECT_EQ(o->user, "u");
  EXPECT_EQ(o->password, "p");
  EXPECT_EQ(o->creds_file, "/c.creds");
  EXPECT_EQ(o->token, "t");
  EXPECT_EQ(o->tls_ca_file, "/ca.pem");
  EXPECT_EQ(o->tls_cert_file, "/cert.pem");
  EXPECT_EQ(o->tls_key_file, "/key.pem");
  EXPECT_EQ(o->inbox_prefix, "_INBOX.me");

  s.nats_inbox_prefix.clear();
  EXPECT_EQ(NatsOptions(s, "wisp-token")->inbox_prefix, "_INBOX.wisp-token");
  s.nats_key.clear();
  auto half = NatsOptions(s, "wispctl");
  EXPECT_EQ(half.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(half.status().message(), "nats-cert and nats-key go together");
}

// Tests that the NATS password and token are refused on the command line and taken from the
// environment, and that a secret given twice or an unreadable or empty file is a clear error.
TEST(RuntimeTest, NatsSecretsNeverFromTheCommandLine) {
  for (const char* flag : {"--nats-password", "--nats-token"}) {
    SCOPED_TRACE(flag);
    CommonSettings s;
    config::Flags flags("wisp-x", "test");
    AddCommonFlags(flags, s);
    const char* argv[] = {"wisp-x", flag, "hunter2"};
    auto st = flags.Parse(3, argv);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(st.message()).find("not taken on the command line"), std::string::npos)
        << st.message();
    EXPECT_NE(std::string(st.message()).find(std::string(flag) + "-file FILE"), std::string::npos)
        << st.message();
    EXPECT_EQ(std::string(st.message()).find("hunter2"), std::string::npos);
  }

  setenv("WISP_NATS_PASSWORD", "from-env", 1);
  CommonSettings s;
  config::Flags flags("wisp-x", "test");
  AddCommonFlags(flags, s);
  const char* argv[] = {"wisp-x"};
  ASSERT_TRUE(flags.Parse(1, argv).ok());
  unsetenv("WISP_NATS_PASSWORD");
  EXPECT_EQ(NatsOptions(s, "wisp-x")->password, "from-env");

  const std::string file = testing::TempDir() + "/twice.password";
  std::ofstream(file) << "from-file\n";
  s.nats_password_file = file;
  EXPECT_EQ(NatsOptions(s, "wisp-x").status().message(),
            "nats-password and nats-password-file are both set; give the secret once");
  s.nats_password.clear();
  EXPECT_EQ(NatsOptions(s, "wisp-x")->password, "from-file");
  s.nats_password_file = testing::TempDir() + "/missing.password";
  auto missing = NatsOptions(s, "wisp-x");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(missing.status().message()).rfind("nats-password-file: cannot read ", 0),
            0u)
      << missing.status();
  std::ofstream(file) << "\n";
  s.nats_password_file = file;
  EXPECT_EQ(NatsOptions(s, "wisp-x").status().message(),
            "nats-password-file: " + file + " is empty");
}

// Tests that jetstream-replicas is 1 by default, takes 1..5 and names itself otherwise.
TEST(RuntimeTest, JetstreamReplicasSetting) {
  CommonSettings s;
  EXPECT_EQ(s.jetstream_replicas, 1);
  for (const char* bad : {"0", "6"}) {
    config::Flags flags("wisp-x", "test");
    AddCommonFlags(flags, s);
    const char* argv[] = {"wisp-x", "--jetstream-replicas", bad};
    auto st = flags.Parse(3, argv);
    EXPECT_EQ(st.message(), "--jetstream-replicas: must be between 1 and 5 (JetStream's limit)");
  }
  config::Flags flags("wisp-x", "test");
  AddCommonFlags(flags, s);
  const char* argv[] = {"wisp-x", "--jetstream-replicas", "3"};
  ASSERT_TRUE(flags.Parse(3, argv).ok());
  EXPECT_EQ(s.jetstream_replicas, 3);
}

// Tests that a placement refusal of more than one copy becomes one line naming
// jetstream-replicas, and that any other error passes through unchanged.
TEST(RuntimeTest, ExplainsReplicaPlacementErrors) {
  const absl::Status refused = bus::ReplicaPlacementError(
      "ensuring stream WISP_POPULATE: replicas > 1 not supported in non-clustered mode");
  const absl::Status explained = ExplainReplicaError(refused, 3);
  EXPECT_EQ(explained.code(), absl::StatusCode::kInvalidArgument);
  const std::string text(explained.message());
  EXPECT_EQ(text.rfind("jetstream-replicas: NATS cannot keep 3 copies (ensuring stream "
                       "WISP_POPULATE: replicas > 1 not supported in non-clustered mode)",
                       0),
            0u)
      << text;
  EXPECT_NE(text.find("at most the number of JetStream servers"), std::string::npos) << text;
  EXPECT_EQ(text.find('\n'), std::string::npos);
  EXPECT_EQ(Fail("wisp-x", explained), 2);

  const absl::Status other = absl::UnavailableError("no nats");
  EXPECT_EQ(ExplainReplicaError(other, 3), other);
  // With one copy the setting is not what to change (a full store says the same).
  EXPECT_EQ(ExplainReplicaError(refused, 1), refused);
  EXPECT_TRUE(ExplainReplicaError(absl::OkStatus(), 3).ok());
}

// Tests that start-up calls wait out transport trouble (a first read timing out while a new
// cluster's stream elects its leader) but not a final error, and give up after the wait naming it.
TEST(RuntimeTest, RetriesWhileUnreachableOnly) {
  int calls = 0;
  absl::Status st =
      RetryWhileUnreachable("loading the signing keys", std::chrono::seconds(10), [&] {
        return ++calls < 3 ? absl::DeadlineExceededError("kv get wisp_keys/keyset: Timeout")
                           : absl::OkStatus();
      });
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(calls, 3);

  calls = 0;
  st = RetryWhileUnreachable("loading the signing keys", std::chrono::seconds(10), [&] {
    ++calls;
    return absl::PermissionDeniedError("not permitted");
  });
  EXPECT_EQ(st, absl::PermissionDeniedError("not permitted"));
  EXPECT_EQ(calls, 1);

  calls = 0;
  st = RetryWhileUnreachable("loading the signing keys", std::chrono::milliseconds(250), [&] {
    ++calls;
    return absl::UnavailableError("no nats");
  });
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(std::string(st.message()).find("loading the signing keys (gave up after bus-wait"),
            std::string::npos)
      << st;
  EXPECT_GE(calls, 2);
}

// Tests that the common flags are declared with their environment names in --help.
TEST(RuntimeTest, CommonFlagsAppearInHelp) {
  CommonSettings s;
  config::Flags flags("wisp-x", "test");
  AddCommonFlags(flags, s);
  const std::string help = flags.Help();
  for (const char* want : {"--nats-url", "WISP_NATS_PASSWORD", "--nats-password-file",
                           "--metrics-address", "--drain-timeout", "--jetstream-replicas"}) {
    EXPECT_NE(help.find(want), std::string::npos) << want;
  }
}

// Tests that Fail maps a bad setting to exit code 2 and anything else to 1.
TEST(RuntimeTest, FailExitCodes) {
  EXPECT_EQ(Fail("wisp-x", absl::InvalidArgumentError("--port: bad")), 2);
  EXPECT_EQ(Fail("wisp-x", absl::UnavailableError("no nats")), 1);
  EXPECT_EQ(Fail("wisp-x", absl::CancelledError("stopped")), 0);
}

}  // namespace
}  // namespace wisp::runtime
