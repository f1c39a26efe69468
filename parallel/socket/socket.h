// TCP helpers shared by the rendezvous store and the TCP transport: listen,
// connect with retry, and whole-buffer send/receive that give up at a
// deadline. Errors name the peer address and the operation.
//
// Every socket is close-on-exec (the launcher forks ranks) and every send
// uses MSG_NOSIGNAL, so a peer that went away is an error, never SIGPIPE.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "framework/error.h"

namespace strata::parallel {

// A connection or socket operation failed (peer gone, refused, reset...).
class NetworkError : public Error {
 public:
  using Error::Error;
};

// A wait ran past its deadline. Callers catch this to add what they were
// waiting for (keys, ranks) to the message.
class TimeoutError : public NetworkError {
 public:
  using NetworkError::NetworkError;
};

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// now + timeout, saturating instead of overflowing for huge timeouts.
Deadline deadline_after(std::chrono::milliseconds timeout);
// Milliseconds left until the deadline (0 when past), clamped for poll().
int remaining_ms(Deadline deadline);
// "1.5 s", "300 s": for timeout messages.
std::string format_duration(std::chrono::milliseconds d);

// Owns a file descriptor; closes it on destruction.
class Socket {
 public:
  Socket() = default;
  Socket(int fd, std::string peer) : fd_(fd), peer_(std::move(peer)) {}
  ~Socket() { close(); }
  Socket(Socket&& other) noexcept : fd_(other.fd_), peer_(std::move(other.peer_)) { other.fd_ = -1; }
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // "10.0.0.2:41234" for connections, "0.0.0.0:29500 (listening)" for listeners.
  const std::string& peer() const { return peer_; }
  void set_peer(std::string peer) { peer_ = std::move(peer); }
  void close();
  // Stops both directions (wakes a thread blocked in poll on this socket)
  // without releasing the descriptor.
  void shutdown();

 private:
  int fd_ = -1;
  std::string peer_;
};

// Listens on host:port; port 0 picks a free port (see local_port). host ""
// or "0.0.0.0" listens on every IPv4 interface.
Socket listen_tcp(const std::string& host, int port, int backlog = 128);
// The port a socket is bound to.
int local_port(const Socket& socket);

// Waits for one connection until the deadline; returns an invalid Socket on
// timeout. The accepted socket has TCP_NODELAY set.
Socket accept_tcp(const Socket& listener, Deadline deadline);

// Connects to host:port, retrying refused/unreachable attempts with backoff
// until the deadline (the server may not be listening yet). Throws
// TimeoutError naming the address and the last error. TCP_NODELAY is set.
Socket connect_tcp(const std::string& host, int port, Deadline deadline);

// Sends/receives exactly `bytes`, handling EINTR and partial transfers.
// `what` names the operation for messages ("store request"). Throws
// TimeoutError at the deadline, NetworkError when the peer closed or reset.
void send_all(const Socket& socket, const void* data, size_t bytes, Deadline deadline, const char* what);
void recv_all(const Socket& socket, void* data, size_t bytes, Deadline deadline, const char* what);

// Polls one descriptor for `events` (POLLIN/POLLOUT) until the deadline;
// returns false on timeout. Retries on EINTR.
bool poll_fd(int fd, short events, Deadline deadline);

void set_nodelay(int fd);
void set_nonblocking(int fd);
void set_blocking(int fd);
// "1.2.3.4:5678" of the remote end, or "?" when unknown.
std::string peer_address(int fd);
// The host alone ("1.2.3.4"), for log lines about refused clients.
std::string peer_host(int fd);
// A port that was free a moment ago (bound with port 0, then released):
// for tests that need a port before anything listens on it. Another process
// may take it meanwhile, so rendezvous never relies on it: servers bind port
// 0 and publish the port they got (StoreServer::port, `strata launch`).
int pick_free_port(const std::string& host);

}  // namespace strata::parallel
