#pragma once
// TokenService: wisp-token's bus endpoints over Issuer, Reviewer, Exchanger and KeyManager.
//
// Contract:
//   - Registers endpoints issue, issue_batch, exchange, keys, review, upload, key_admin
//     (wisp.v1.token.*,
//     queue group wisp-token) on a bus::Service (NATS micro discovery, per-endpoint metrics).
//     Parallel signing comes from the bus: NatsBusOptions::serve_threads worker threads per
//     endpoint, so one instance signs on several cores.
//   - Bad bodies are InvalidArgument; Issue refusals keep their codes (InvalidArgument,
//     PermissionDenied), in IssueResult.code for each entry of a batch; exchange refusals are
//     answers (ExchangeResponse.error), not bus errors.
//   - Publishes KeysResponse on wisp.v1.events.token.keys whenever the key set changes (own write
//     or a change written by another replica) and once at Start().
//   - Runs key rotation checks every `tick_interval` on its own thread until Stop().
//
// Example:
//   TokenService svc(*service, bus, keys, issuer, reviewer, exchanger, {.issuer = url});
//   WISP_RETURN_IF_ERROR(svc.Start());
//   ... svc.Stop();
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "exchanger.hpp"
#include "issuer.hpp"
#include "key_manager.hpp"
#include "reviewer.hpp"
#include "wisp/bus/bus.hpp"
#include "wisp/bus/service.hpp"
#include "wisp/v1/token.pb.h"

namespace wisp::token {

// The discovery document in the shape of Kubernetes' ServiceAccountIssuerDiscovery.
std::string OpenIdConfiguration(const std::string& issuer, const std::string& jwks_uri,
                                const KeySnapshot& keys);
v1::KeysResponse BuildKeysResponse(const std::string& issuer, const std::string& jwks_uri,
                                   const KeySnapshot& keys);
// The key set as wispctl keys shows it: active, next, then retired keys, newest first in each.
v1::KeyAdminResponse BuildKeyAdminResponse(const KeySnapshot& keys, const KeyManager& manager);

class TokenService {
 public:
  struct Options {
    std::string issuer;
    std::string jwks_uri;  // "" = issuer + "/openid/v1/jwks"
    std::chrono::milliseconds tick_interval = std::chrono::seconds(10);
  };
  TokenService(bus::Service& service, bus::Publisher& publisher, KeyManager& keys,
               const Issuer& issuer, const Reviewer& reviewer, const Exchanger& exchanger,
               Options options);
  ~TokenService();

  absl::Status Start();
  // Stops the rotation thread (the caller drains the bus::Service).
  void Stop();

  bus::Reply HandleIssue(const bus::Request& request) const;
  bus::Reply HandleIssueBatch(const bus::Request& request) const;
  bus::Reply HandleReview(const bus::Request& request) const;
  bus::Reply HandleExchange(const bus::Request& request) const;
  bus::Reply HandleKeys(const bus::Request& request) const;
  // wisp.v1.token.upload: an upload token for one volume (upload_issuer.hpp).
  bus::Reply HandleUpload(const bus::Request& request) const;
  // wisp.v1.token.key_admin: list, rotate, taint, revoke (KeyManager's operator changes).
  bus::Reply HandleKeyAdmin(const bus::Request& request) const;

 private:
  void PublishKeys(const KeySnapshot& snap);
  void RotationLoop();

  bus::Service& service_;
  bus::Publisher& publisher_;
  KeyManager& keys_;
  const Issuer& issuer_;
  const Reviewer& reviewer_;
  const Exchanger& exchanger_;
  Options options_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread rotation_;
};

}  // namespace wisp::token
