#pragma once
// `wispctl keys list|rotate|taint|revoke`: wisp-token's signing keys, over the bus
// (wisp.v1.token.key_admin; only wispctl's NATS user may ask).
//
// Contract:
//   - list: every published key (active, next, retired), its state, whether an operator tainted
//     it, and when it was made, began signing, and leaves the JWKS; plus the schedule.
//   - rotate [--algorithm A]: the next key signs now (wisp-token makes one first when none is
//     published, and says that relying parties may refuse its tokens until they refetch the JWKS).
//   - taint KID: the key stops signing now; it stays in the JWKS until every token it signed has
//     expired, so those tokens still verify (the answer says until when).
//   - revoke KID: the key leaves the JWKS now; the tokens it signed stop verifying.
//   - Each change prints wisp-token's sentence, then the key set after it (--json: both as JSON).
//     A kid not in the set is refused by wisp-token with a message naming it (exit 1); a missing
//     or extra KID is bad usage (exit 2).
//
// Example:
//   wispctl keys list
//   wispctl keys taint Zk9...Q   # "key Zk9...Q (RS256, active) tainted: no new token carries
//   it..."
#include <cstdint>
#include <string>
#include <vector>

#include "wisp/status/status.hpp"
#include "wisp/v1/token.pb.h"

namespace wisp::wispctl {

int RunKeys(const std::vector<std::string>& args);

// The request for `verb` with its positional words (pure, for tests).
absl::StatusOr<v1::KeyAdminRequest> KeyAdminRequestFor(const std::string& verb,
                                                       const std::vector<std::string>& positional,
                                                       const std::string& algorithm);
// The human table of a key set, and the JSON form (pure, for tests).
std::string FormatKeys(const v1::KeyAdminResponse& response);
std::string FormatKeysJson(const v1::KeyAdminResponse& response);

}  // namespace wisp::wispctl
