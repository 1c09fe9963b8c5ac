#include "tls_stream.hpp"

#include <cstdint>

namespace wisp::http::detail {
namespace {

int Fd(BIO* b) { return static_cast<int>(reinterpret_cast<intptr_t>(BIO_get_data(b))); }

bool Transient(int err) { return err == EAGAIN || err == EWOULDBLOCK || err == EINTR; }

int Write(BIO* b, const char* data, int size) {
  BIO_clear_retry_flags(b);
  const ssize_t n = ::send(Fd(b), data, static_cast<size_t>(size), MSG_NOSIGNAL);
  if (n < 0 && Transient(errno)) BIO_set_retry_write(b);
  return static_cast<int>(n);
}

int Read(BIO* b, char* out, int size) {
  BIO_clear_retry_flags(b);
  const ssize_t n = ::recv(Fd(b), out, static_cast<size_t>(size), 0);
  if (n < 0 && Transient(errno)) BIO_set_retry_read(b);
  if (n == 0) BIO_set_flags(b, BIO_FLAGS_IN_EOF);  // what BIO_eof() reports: a clean TCP close
  return static_cast<int>(n);
}

long Ctrl(BIO* b, int cmd, long, void*) {  // NOLINT(google-runtime-int): OpenSSL's signature
  switch (cmd) {
    case BIO_CTRL_FLUSH:
      return 1;  // nothing is buffered here
    case BIO_CTRL_EOF:
      return BIO_test_flags(b, BIO_FLAGS_IN_EOF) != 0 ? 1 : 0;
    default:
      return 0;
  }
}

int Create(BIO* b) {
  BIO_set_init(b, 1);
  return 1;
}

int Destroy(BIO*) { return 1; }  // the socket belongs to the stream, which closes it

BIO_METHOD* Method() {
  static BIO_METHOD* method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR,
                                 "wisp socket");
    if (m == nullptr) return m;
    BIO_meth_set_write(m, Write);
    BIO_meth_set_read(m, Read);
    BIO_meth_set_ctrl(m, Ctrl);
    BIO_meth_set_create(m, Create);
    BIO_meth_set_destroy(m, Destroy);
    return m;
  }();
  return method;
}

}  // namespace

BIO* NewSocketBio(int fd) {
  BIO_METHOD* method = Method();
  if (method == nullptr) return nullptr;
  BIO* b = BIO_new(method);
  if (b != nullptr) BIO_set_data(b, reinterpret_cast<void*>(static_cast<intptr_t>(fd)));
  return b;
}

}  // namespace wisp::http::detail
