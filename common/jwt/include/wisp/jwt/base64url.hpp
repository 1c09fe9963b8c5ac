#pragma once
// base64url without padding (RFC 4648 section 5, as JWS uses it, RFC 7515 section 2).
//
// Decode is strict: it refuses '=' padding, characters outside the URL-safe alphabet and lengths
// that cannot come from an encoding (n % 4 == 1), so a token cannot carry two spellings of one
// value.
//
//   std::string s = jwt::Base64UrlEncode("hi");          // "aGk"
//   WISP_ASSIGN_OR_RETURN(std::string raw, jwt::Base64UrlDecode(s));
#include <string>
#include <string_view>

#include "wisp/status/status.hpp"

namespace wisp::jwt {

std::string Base64UrlEncode(std::string_view data);
// InvalidArgument on anything that is not unpadded base64url.
absl::StatusOr<std::string> Base64UrlDecode(std::string_view text);

// Standard base64 with padding (RFC 4648 section 4), for values stored outside tokens.
std::string Base64Encode(std::string_view data);
absl::StatusOr<std::string> Base64Decode(std::string_view text);

}  // namespace wisp::jwt
