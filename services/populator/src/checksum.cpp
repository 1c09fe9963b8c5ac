#include "checksum.hpp"

#include <cctype>

namespace wisp::populator {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr); }
Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }

void Sha256::Update(const uint8_t* data, size_t n) {
  if (n > 0) EVP_DigestUpdate(ctx_, data, n);
}

std::string Sha256::HexDigest() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx_, md, &len);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(kHex[md[i] >> 4]);
    out.push_back(kHex[md[i] & 15]);
  }
  return out;
}

PipelinedSha256::PipelinedSha256() : thread_([this] { Run(); }) {}

PipelinedSha256::~PipelinedSha256() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void PipelinedSha256::Run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything queued is done
    Item item = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    sha_.Update(item.data, item.n);
    if (item.done) item.done();
    lock.lock();
    busy_ = false;
    cv_.notify_all();
  }
}

void PipelinedSha256::Submit(const uint8_t* data, size_t n, std::function<void()> done) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back({data, n, std::move(done)});
  }
  cv_.notify_all();
}

void PipelinedSha256::WaitIdle() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

void PipelinedSha256::Update(const uint8_t* data, size_t n) {
  Submit(data, n, nullptr);
  WaitIdle();
}

std::string PipelinedSha256::HexDigest() {
  WaitIdle();
  return sha_.HexDigest();
}

absl::StatusOr<std::string> NormalizeSha256(std::string_view value, std::string_view field) {
  if (value.substr(0, 7) == "sha256:") value.remove_prefix(7);
  std::string out;
  for (char c : value) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) {
      return absl::InvalidArgumentError(std::string(field) +
                                        ": sha256 must be 64 hexadecimal digits");
    }
    out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  if (out.size() != 64) {
    return absl::InvalidArgumentError(std::string(field) +
                                      ": sha256 must be 64 hexadecimal digits, got " +
                                      std::to_string(out.size()));
  }
  return out;
}

}  // namespace wisp::populator
