#include "upload/upload_handler.hpp"

#include <cctype>

#include <nlohmann/json.hpp>

#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/jwt/jws.hpp"
#include "wisp/log/log.hpp"
#include "wisp/v1/volume.pb.h"

namespace wisp::gateway::upload {
namespace {

namespace subjects = bus::subjects;

int HttpStatusFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kDataLoss:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kOutOfRange:
      return 413;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kResourceExhausted:
      return 503;
    default:
      return 500;
  }
}

std::string OutcomeFor(int status) {
  switch (status) {
    case 400:
      return "bad_request";
    case 401:
      return "unauthenticated";
    case 403:
      return "forbidden";
    case 404:
      return "not_found";
    case 408:
      return "aborted";
    case 409:
      return "conflict";
    case 413:
      return "too_large";
    case 429:
      return "rate_limited";
    default:
      return status >= 500 ? "unavailable" : "error";
  }
}

bool ValidRef(std::string_view ref) {
  if (ref.empty() || ref.size() > 253) return false;
  for (char c : ref) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) {
      return false;
    }
  }
  return true;
}

bool IsVolumeId(std::string_view s) {
  if (s.size() != 26 || s.substr(0, 2) != "v-") return false;
  for (char c : s.substr(2)) {
    if (!std::isxdigit(static_cast<unsigned char>(c)) ||
        std::isupper(static_cast<unsigned char>(c)))
      return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<jwt::UploadGrant> KeyCacheVerifier::Verify(std::string_view token) {
  auto keys = cache_.Current();
  if (!keys) return absl::UnavailableError("signing keys not loaded yet; retry");
  auto set = jwt::KeySet::FromJwks(keys->jwks_json());
  if (!set.ok()) return absl::UnavailableError("the cached JWKS does not parse");
  jwt::VerifyOptions options;
  options.issuer = keys->issuer();
  options.audiences = {jwt::kUploadAudience};
  options.now_unix = clock_.NowUnixSeconds();
  options.leeway = leeway_;
  WISP_ASSIGN_OR_RETURN(jwt::Verified verified, jwt::Verify(token, *set, options));
  return jwt::UploadGrantFromClaims(verified.claims);
}

UploadMetrics::UploadMetrics(prometheus::Registry& r)
    : uploads_total(prometheus::BuildCounter()
                        .Name("wisp_gateway_uploads_total")
                        .Help("PUT /v1/upload requests, by outcome")
                        .Register(r)),
      bytes_total(prometheus::BuildCounter()
                      .Name("wisp_gateway_upload_bytes_total")
                      .Help("Upload body bytes accepted and passed on to populators")
                      .Register(r)
                      .Add({})) {}

UploadHandler::UploadHandler(bus::Requester& bus, TokenVerifier& verifier,
                             prometheus::Registry& registry, Clock& clock, UploadOptions options)
    : bus_(bus),
      verifier_(verifier),
      metrics_(registry),
      options_(options),
      limiter_(clock, {.rate_per_second = options.rate_per_second, .burst = options.burst}) {}

http::Response UploadHandler::Done(std::string_view outcome, http::Response response) {
  metrics_.uploads_total.Add({{"outcome", std::string(outcome)}}).Increment();
  response.headers.emplace_back("Cache-Control", "no-store");
  return response;
}

http::Response UploadHandler::Handle(const http::Request& request, http::BodyReader& body) {
  auto log = log::Get("upload");
  auto refuse = [&](int status, const std::string& message) {
    return Done(OutcomeFor(status), http::Response::Error(status, message));
  };
  const std::string ref = request.path.substr(std::string_view(kUploadPrefix).size());
  if (!ValidRef(ref)) {
    return refuse(400, "path: \"" + ref +
                           "\" is not a volume name or id (PUT /v1/upload/<volume>, "
                           "[A-Za-z0-9._-], at most 253 characters)");
  }
  if (!limiter_.Allow(request.remote)) {
    auto r = refuse(429, "too many upload attempts from " + request.remote + "; retry later");
    r.headers.emplace_back("Retry-After", "1");
    return r;
  }
  std::string_view auth = request.Header("authorization");
  if (auth.size() < 7 || !(auth.substr(0, 7) == "Bearer " || auth.substr(0, 7) == "bearer ")) {
    auto r = refuse(401,
                    "missing upload token: send \"Authorization: Bearer <token>\" with a token "
                    "from wisp.v1.token.upload (wispctl volume upload does)");
    r.headers.emplace_back("WWW-Authenticate", "Bearer");
    return r;
  }
  auto grant = verifier_.Verify(auth.substr(7));
  if (!grant.ok()) {
    if (grant.status().code() == absl::StatusCode::kUnavailable) {
      return refuse(503, std::string(grant.status().message()));
    }
    auto r = refuse(401, "invalid upload token: " + std::string(grant.status().message()));
    r.headers.emplace_back("WWW-Authenticate", "Bearer error=\"invalid_token\"");
    return r;
  }

  v1::GetVolumeRequest get;
  if (IsVolumeId(ref)) {
    get.set_volume_id(ref);
  } else {
    get.set_name(ref);
  }
  auto got =
      bus::Call<v1::GetVolumeResponse>(bus_, subjects::kVolumeGet, get, options_.request_timeout);
  if (!got.ok()) {
    const int status = HttpStatusFor(got.status().code());
    return refuse(status, status == 404 ? "volume " + ref + " not found"
                                        : "looking up volume " + ref + ": " +
                                              std::string(got.status().message()));
  }
  const v1::VolumeStatus& volume = got->volume();
  const std::string& id = volume.volume_id();
  log::ScopedRequestId rid(id);
  if (grant->volume_id != id) {
    return refuse(403, "the upload token is for volume " + grant->volume_id + ", not " + ref +
                           " (" + id + ")");
  }
  if (!volume.spec().source().has_upload()) {
    return refuse(409, "volume " + volume.spec().name() +
                           " is not an upload target (create it with --upload / source.upload)");
  }
  const uint64_t capacity = static_cast<uint64_t>(volume.spec().capacity_bytes());
  const uint64_t limit = capacity + capacity / 50 + (16ull << 20);
  const auto length = body.content_length();
  if (length && *length > limit) {
    return refuse(413, "upload of " + std::to_string(*length) + " bytes is larger than volume " +
                           volume.spec().name() + " can hold (capacity " +
                           std::to_string(capacity) + " bytes)");
  }

  v1::UploadOpenRequest open;
  open.set_volume_id(id);
  open.set_total_bytes(length ? static_cast<int64_t>(*length) : -1);
  open.set_sha256(std::string(request.Header("x-wisp-sha256")));
  open.set_remote(request.remote);
  auto session = bus::Call<v1::UploadOpenResponse>(
      bus_, subjects::Node(volume.spec().node(), subjects::kNodeUploadOpen), open,
      options_.request_timeout);
  if (!session.ok()) {
    const int status = HttpStatusFor(session.status().code());
    return refuse(status, status == 503 && session.status().code() == absl::StatusCode::kUnavailable
                              ? "no populator answers for node " + volume.spec().node() + ": " +
                                    std::string(session.status().message())
                              : std::string(session.status().message()));
  }
  SPDLOG_LOGGER_INFO(log, "upload to {} from {} started ({} bytes)", id, request.remote,
                     length ? std::to_string(*length) : std::string("chunked"));
  auto abort = [&](const std::string& reason, int64_t seq) {
    v1::UploadChunk chunk;
    chunk.set_session_id(session->session_id());
    chunk.set_seq(seq);
    chunk.set_abort(true);
    chunk.set_abort_reason(reason);
    (void)bus::Call<v1::UploadChunkResponse>(bus_, session->chunk_subject(), chunk,
                                             options_.request_timeout);
  };

  const size_t chunk_size = static_cast<size_t>(std::max(4096, session->max_chunk_bytes()));
  std::string buf(chunk_size, '\0');
  uint64_t sent = 0;
  int64_t seq = 0;
  for (;;) {
    // Fill a whole chunk (or up to the end) before sending it.
    size_t filled = 0;
    bool end = false;
    while (filled < chunk_size) {
      auto got_bytes = body.Read(buf.data() + filled, chunk_size - filled);
      if (!got_bytes.ok()) {
        const absl::Status& e = got_bytes.status();
        SPDLOG_LOGGER_WARN(log, "upload to {} aborted: {}", id, e.ToString());
        abort(std::string(e.message()), seq);
        const int status = e.code() == absl::StatusCode::kDeadlineExceeded ? 408
                           : e.code() == absl::StatusCode::kOutOfRange     ? 413
                           : e.code() == absl::StatusCode::kCancelled      ? 503
                                                                           : 400;
        return Done(status == 400 || status == 408 ? "aborted" : OutcomeFor(status),
                    http::Response::Error(status, "upload aborted: " + std::string(e.message())));
      }
      if (*got_bytes == 0) {
        end = true;
        break;
      }
      filled += *got_bytes;
    }
    if (sent + filled > limit) {
      abort("the body is larger than the volume can hold", seq);
      return refuse(413, "upload is larger than volume " + volume.spec().name() +
                             " can hold (capacity " + std::to_string(capacity) + " bytes)");
    }
    v1::UploadChunk chunk;
    chunk.set_session_id(session->session_id());
    chunk.set_seq(seq++);
    chunk.set_data(buf.data(), filled);
    chunk.set_last(end);
    auto ack =
        bus::Call<v1::UploadChunkResponse>(bus_, session->chunk_subject(), chunk,
                                           end ? options_.finish_timeout : options_.chunk_timeout);
    if (!ack.ok()) {
      const absl::Status& e = ack.status();
      if (!end) abort("the gateway gave up: " + std::string(e.message()), seq);
      const int status = HttpStatusFor(e.code());
      SPDLOG_LOGGER_WARN(log, "upload to {} failed: {}", id, e.ToString());
      return refuse(status, "upload of volume " + volume.spec().name() +
                                " failed: " + std::string(e.message()));
    }
    sent += filled;
    metrics_.bytes_total.Increment(static_cast<double>(filled));
    if (end) {
      const v1::VolumeStatus& v = ack->volume();
      nlohmann::json j = {{"volume_id", v.volume_id()},
                          {"name", v.spec().name()},
                          {"phase", v1::VolumePhase_Name(v.phase())},
                          {"format", v.format()},
                          {"sha256", v.sha256()},
                          {"bytes", sent}};
      SPDLOG_LOGGER_INFO(log, "upload to {} done: {} bytes, {}", id, sent, v.format());
      return Done("succeeded", http::Response::Json(200, j.dump()));
    }
  }
}

void RegisterUploadRoute(http::Server& server, UploadHandler& handler,
                         http::StreamOptions options) {
  server.HandleStream(
      "PUT", kUploadPrefix,
      [&handler](const http::Request& r, http::BodyReader& body) {
        return handler.Handle(r, body);
      },
      options);
}

}  // namespace wisp::gateway::upload
