// The TCP implementation of Transport: one connection per pair of ranks.
//
// Setup (connect_tcp_transport): every rank listens on a port the OS picks,
// publishes "host:port" in the store under "<prefix>/addr/<rank>", connects
// to every higher rank and accepts every lower one. A connection starts with
// a handshake (magic, version, rank, world size, a hash of the prefix) that
// the accepting rank checks and acknowledges; strangers are dropped.
//
// Transfers: send/recv/send_recv move raw bytes with poll() over
// non-blocking sockets, so send_recv progresses both directions at once and
// reports received data (on_received) as it lands. Every wait ends after the
// timeout without progress, with an error such as
//   rank 1 on host-a: timed out after 30 s waiting for rank 2 (10.0.0.7:41234) during recv ...
// and a peer that went away gives
//   rank 1 on host-a: rank 2 (10.0.0.7:41234) closed the connection during recv ...
// (TimeoutError / NetworkError from parallel/socket/socket.h). These errors are how
// a dead or stuck rank is detected. After an error the byte streams are out
// of step; the transport must not be used again.
//
// A transport is used by one thread at a time; set_timeout may be called
// from any thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "parallel/transport/transport.h"

namespace strata::parallel {

struct TcpTransportOptions {
  // The host other ranks connect to. "" picks this machine's first
  // non-loopback IPv4 address that is up (127.0.0.1 when there is none).
  // The communicator factory passes the address of the interface that
  // routes to the master, which is right for multi-homed machines.
  std::string advertise_host;
  // Interface to listen on; "" listens on 127.0.0.1 when advertise_host is
  // a loopback address and on every interface otherwise.
  std::string bind_host;
  // This machine's name in messages; "" = gethostname().
  std::string hostname;
};

std::unique_ptr<Transport> connect_tcp_transport(Store& store, int rank, int world_size, const std::string& prefix,
                                                 std::chrono::milliseconds timeout, const TcpTransportOptions& options);

// The local IPv4 address of the interface that routes to host (found with a
// connected UDP socket; no packet is sent), or "" when it cannot be found.
std::string local_address_towards(const std::string& host, int port);

// This machine's first non-loopback IPv4 address that is up, else "127.0.0.1".
std::string default_advertise_host();

bool is_loopback_host(const std::string& host);

// The socket of a transport to `peer` (Transport::peer_socket: a TCP
// transport's own, or the one a wrapping transport keeps), or -1. The
// shared-memory transport polls it to notice a peer that died.
int tcp_transport_socket(const Transport& t, int peer);

}  // namespace strata::parallel
