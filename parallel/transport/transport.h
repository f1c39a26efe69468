// Point-to-point byte transport between the ranks of one world. The
// collective algorithms (ring, tree) are written once over this interface;
// TCP, shared memory and libfabric (RDMA) transports implement it.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace strata::parallel {

class Store;

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual void set_timeout(std::chrono::milliseconds timeout) = 0;
  // "rank 2 (host-b:41234)", for error messages.
  virtual std::string peer_name(int peer) const = 0;

  // Blocking; every wait ends with an error naming the peer after the timeout.
  virtual void send(int peer, const void* data, size_t bytes) = 0;
  virtual void recv(int peer, void* data, size_t bytes) = 0;
  // Full duplex: sends send_bytes to send_peer while receiving recv_bytes from
  // recv_peer (the two peers may be equal). on_received(begin, end) is called
  // as each further stretch of the receive buffer is complete, in order, so a
  // caller can reduce received data while the rest is still in flight.
  virtual void send_recv(int send_peer, const void* send_data, size_t send_bytes, int recv_peer,
                         void* recv_data, size_t recv_bytes,
                         const std::function<void(size_t begin, size_t end)>& on_received) = 0;

  // A socket to `peer` that the kernel closes when the peer's process dies,
  // or -1. Transports that wrap a TCP transport (shared memory, fabric) poll
  // it while they wait, so a dead peer is named at once, not at the timeout.
  virtual int peer_socket(int /*peer*/) const { return -1; }
};

// How far a send_recv got before it stalled, for its timeout message.
struct TransferProgress {
  const char* op;  // "allreduce_ring", ...
  int send_peer;
  size_t sent, send_bytes;
  int recv_peer;
  size_t got, recv_bytes;
};

// Throws the TimeoutError of a send_recv that moved nothing for `limit`
// (parallel/socket/socket.h). It names the peer waited on: the sender if
// data is still due, otherwise the receiver that stopped taking ours.
// `self` is "rank 1 on host-a".
[[noreturn]] void throw_transfer_timeout(const Transport& transport, const std::string& self,
                                         const TransferProgress& progress, std::chrono::milliseconds limit);

// Connects every pair of ranks over TCP (one connection per pair), exchanging
// listening addresses through the store under `prefix`.
std::unique_ptr<Transport> connect_tcp_transport(Store& store, int rank, int world_size,
                                                 const std::string& prefix,
                                                 std::chrono::milliseconds timeout);

}  // namespace strata::parallel
