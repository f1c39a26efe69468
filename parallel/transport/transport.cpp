#include "parallel/transport/transport.h"

#include "parallel/socket/socket.h"

namespace strata::parallel {

void throw_transfer_timeout(const Transport& transport, const std::string& self, const TransferProgress& p,
                            std::chrono::milliseconds limit) {
  const bool recv_pending = p.got < p.recv_bytes;
  const int waited = recv_pending ? p.recv_peer : p.send_peer;
  std::string detail;
  if (recv_pending) {
    detail = "received " + std::to_string(p.got) + " of " + std::to_string(p.recv_bytes) + " bytes";
  } else {
    detail = "sent " + std::to_string(p.sent) + " of " + std::to_string(p.send_bytes) +
             " bytes; the peer is not reading";
  }
  if (recv_pending && p.sent < p.send_bytes && p.send_peer != p.recv_peer) {
    detail += "; " + transport.peer_name(p.send_peer) + " has taken " + std::to_string(p.sent) + " of " +
              std::to_string(p.send_bytes) + " bytes sent to it";
  }
  throw TimeoutError(self + ": timed out after " + format_duration(limit) + " waiting for " +
                     transport.peer_name(waited) + " during " + p.op + " (" + detail +
                     "); that rank is stuck, dead, or running a different operation");
}

}  // namespace strata::parallel
