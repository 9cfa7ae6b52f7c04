#include "node/tls/tls_stream.h"

#include <openssl/ssl.h>
#include <openssl/x509.h>

namespace tally {

bool LooksLikeTlsHandshake(std::span<const std::byte> received) {
  // A record header: type 22 (handshake), version 3.x.
  return received.size() >= 2 && received[0] == std::byte{0x16} && received[1] == std::byte{0x03};
}

asio::awaitable<Status> NetStream::Handshake(Side side) {
  if (tls_ == nullptr) co_return Status::OK();
  handshake_done_ = false;
  ssl_.emplace(socket_, tls_->asio_context());
  asio::error_code ec;
  co_await ssl_->async_handshake(
      side == Side::kServer ? asio::ssl::stream_base::server : asio::ssl::stream_base::client,
      asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    const bool ended = ec == asio::error::eof || ec == asio::ssl::error::stream_truncated ||
                       ec == asio::error::operation_aborted || ec == asio::error::bad_descriptor;
    const std::string why = "TLS handshake failed: " + Describe(ec);
    co_return ended ? Status::IOError(why) : Status::Unavailable(why);
  }
  handshake_done_ = true;
  co_return Status::OK();
}

void NetStream::ShutdownTls() {
  if (!ssl_ || !handshake_done_ || !socket_.is_open()) return;
  handshake_done_ = false;
  const bool was_non_blocking = socket_.non_blocking();
  asio::error_code ignored;
  socket_.non_blocking(true, ignored);
  ssl_->shutdown(ignored);  // sends close_notify; the peer's is not waited for
  socket_.non_blocking(was_non_blocking, ignored);
}

size_t NetStream::TryWrite(asio::const_buffer bytes, asio::error_code& ec) {
  ec.clear();
  if (ssl_) return 0;
  const size_t written = socket_.write_some(bytes, ec);
  if (ec == asio::error::would_block) {
    ec.clear();
    return 0;
  }
  return written;
}

std::string NetStream::Describe(const asio::error_code& error) {
  std::string text = error.message();
  if (error == asio::error::eof || error == asio::ssl::error::stream_truncated) {
    return text +
           " (the other end closed the connection: it may have refused this node's "
           "certificate or key, or it does not speak TLS)";
  }
  if (error == asio::error::operation_aborted || error == asio::error::bad_descriptor) {
    return text + " (not complete in time)";
  }
  const long verify = SSL_get_verify_result(ssl_->native_handle());  // NOLINT(runtime/int)
  if (verify != X509_V_OK) {
    text += " (the other end's certificate does not chain to the CA file: ";
    text += X509_verify_cert_error_string(verify);
    text += ")";
  } else if (text.find("wrong version number") != std::string::npos ||
             text.find("http request") != std::string::npos ||
             text.find("packet length too long") != std::string::npos) {
    text += " (the other end does not speak TLS)";
  } else if (text.find("binder does not verify") != std::string::npos ||
             text.find("decrypt error") != std::string::npos) {
    text += " (the other end's pre-shared key differs: another cluster secret)";
  } else if (text.find("peer did not return a certificate") != std::string::npos) {
    text += " (a certificate is required)";
  }
  return text;
}

}  // namespace tally
