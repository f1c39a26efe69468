#include "parallel/transport/tcp_transport.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "framework/error.h"
#include "framework/hash.h"
#include "framework/io/wire_format.h"
#include "parallel/socket/socket.h"
#include "parallel/rendezvous/store.h"

namespace strata::parallel {

namespace {

constexpr char kMagic[4] = {'S', 'T', 'R', 'T'};
constexpr uint32_t kVersion = 1;
// Largest single recv: bounds how long the loop goes without feeding the
// send side or reporting progress.
constexpr size_t kMaxRecvChunk = 512 << 10;

std::string this_hostname() {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) return "?";
  return host;
}

// Connecting side: magic, version, rank, world size, prefix hash.
constexpr size_t kHelloBytes = 4 + 4 + 4 + 4 + 8;
// Accepting side: magic, status (0 = accepted).
constexpr size_t kAckBytes = 8;

struct HostPort {
  std::string host;
  int port = 0;
};

HostPort parse_host_port(const std::string& text, const std::string& key) {
  const size_t colon = text.rfind(':');
  HostPort hp;
  if (colon != std::string::npos && colon > 0) {
    hp.host = text.substr(0, colon);
    if (hp.host.size() > 2 && hp.host.front() == '[' && hp.host.back() == ']') {
      hp.host = hp.host.substr(1, hp.host.size() - 2);
    }
    const std::string port = text.substr(colon + 1);
    if (!port.empty() && port.size() <= 5 && port.find_first_not_of("0123456789") == std::string::npos) {
      hp.port = std::stoi(port);
    }
  }
  if (hp.host.empty() || hp.port <= 0 || hp.port > 65535) {
    fail<NetworkError>("store key ", key, " holds '", text, "', which is not host:port");
  }
  return hp;
}

std::string join_ranks(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

class TcpTransport final : public Transport {
 public:
  TcpTransport(int rank, int world_size, std::string hostname, std::chrono::milliseconds timeout)
      : rank_(rank),
        world_(world_size),
        hostname_(std::move(hostname)),
        timeout_ms_(timeout.count()),
        sockets_(static_cast<size_t>(world_size)),
        addresses_(static_cast<size_t>(world_size)) {}

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  void set_timeout(std::chrono::milliseconds timeout) override { timeout_ms_.store(timeout.count()); }
  std::string peer_name(int peer) const override {
    if (peer < 0 || peer >= world_) return "rank " + std::to_string(peer);
    const std::string& a = addresses_[static_cast<size_t>(peer)];
    return "rank " + std::to_string(peer) + (a.empty() ? "" : " (" + a + ")");
  }

  void send(int peer, const void* data, size_t bytes) override {
    transfer("send", peer, data, bytes, peer, nullptr, 0, nullptr);
  }
  void recv(int peer, void* data, size_t bytes) override {
    transfer("recv", peer, nullptr, 0, peer, data, bytes, nullptr);
  }
  void send_recv(int send_peer, const void* send_data, size_t send_bytes, int recv_peer, void* recv_data,
                 size_t recv_bytes, const std::function<void(size_t, size_t)>& on_received) override {
    transfer("send_recv", send_peer, send_data, send_bytes, recv_peer, recv_data, recv_bytes,
             on_received ? &on_received : nullptr);
  }

  // --- setup, used by connect_tcp_transport ---
  std::string self() const { return "rank " + std::to_string(rank_) + " on " + hostname_; }
  void set_address(int peer, std::string address) { addresses_[static_cast<size_t>(peer)] = std::move(address); }
  void set_socket(int peer, Socket s) { sockets_[static_cast<size_t>(peer)] = std::move(s); }
  bool has_socket(int peer) const { return sockets_[static_cast<size_t>(peer)].valid(); }
  const Socket& socket(int peer) const { return sockets_[static_cast<size_t>(peer)]; }
  int peer_socket(int peer) const override { return fd_or_minus_one(peer); }
  int fd_or_minus_one(int peer) const {
    if (peer < 0 || peer >= world_ || peer == rank_) return -1;
    return sockets_[static_cast<size_t>(peer)].fd();
  }

 private:
  std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(timeout_ms_.load()); }

  int fd_of(int peer, const char* op) const {
    if (peer < 0 || peer >= world_ || peer == rank_) {
      fail<Error>(self(), ": ", op, " with rank ", peer, ": not a peer in a world of ", world_, " ranks");
    }
    return sockets_[static_cast<size_t>(peer)].fd();
  }

  [[noreturn]] void closed(const char* op, int peer, size_t done, size_t total, const char* direction, int err) const {
    std::string why = err ? std::string(" (") + std::strerror(err) + ")" : "";
    fail<NetworkError>(self(), ": ", peer_name(peer), " closed the connection during ", op, why, " after ", done,
                       " of ", total, " bytes ", direction,
                       "; that rank has probably exited or crashed, see its output");
  }

  // Moves send_bytes to send_peer and recv_bytes from recv_peer at the same
  // time. A direction with zero bytes is idle (its peer is not checked).
  void transfer(const char* op, int send_peer, const void* send_data, size_t send_bytes, int recv_peer, void* recv_data,
                size_t recv_bytes, const std::function<void(size_t, size_t)>* on_received) {
    const int sfd = send_bytes ? fd_of(send_peer, op) : -1;
    const int rfd = recv_bytes ? fd_of(recv_peer, op) : -1;
    const char* sp = static_cast<const char*>(send_data);
    char* rp = static_cast<char*>(recv_data);
    size_t sent = 0;
    size_t got = 0;
    const std::chrono::milliseconds limit = timeout();
    // The timeout counts from the last progress, so a long transfer that
    // keeps moving never times out, and a silent peer is noticed after it.
    Deadline deadline = deadline_after(limit);
    while (sent < send_bytes || got < recv_bytes) {
      bool progressed = false;
      if (got < recv_bytes) {
        const ssize_t n = ::recv(rfd, rp + got, std::min(recv_bytes - got, kMaxRecvChunk), MSG_DONTWAIT);
        if (n > 0) {
          const size_t before = got;
          got += static_cast<size_t>(n);
          progressed = true;
          if (on_received) (*on_received)(before, got);
        } else if (n == 0) {
          closed(op, recv_peer, got, recv_bytes, "received", 0);
        } else if (const int err = errno; err != EAGAIN && err != EWOULDBLOCK && err != EINTR) {
          if (err == ECONNRESET || err == EPIPE) closed(op, recv_peer, got, recv_bytes, "received", err);
          fail<NetworkError>(self(), ": receiving from ", peer_name(recv_peer), " during ", op,
                             " failed: ", std::strerror(err));
        }
      }
      if (sent < send_bytes) {
        const ssize_t n = ::send(sfd, sp + sent, send_bytes - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
          sent += static_cast<size_t>(n);
          progressed = true;
        } else if (const int err = n < 0 ? errno : EAGAIN; err != EAGAIN && err != EWOULDBLOCK && err != EINTR) {
          if (err == ECONNRESET || err == EPIPE) closed(op, send_peer, sent, send_bytes, "sent", err);
          fail<NetworkError>(self(), ": sending to ", peer_name(send_peer), " during ", op,
                             " failed: ", std::strerror(err));
        }
      }
      if (progressed) {
        deadline = deadline_after(limit);
        continue;
      }
      // Nothing moved: sleep in poll until either direction can.
      pollfd fds[2];
      nfds_t nfds = 0;
      if (got < recv_bytes) fds[nfds++] = pollfd{rfd, POLLIN, 0};
      if (sent < send_bytes) {
        if (nfds == 1 && rfd == sfd) {
          fds[0].events |= POLLOUT;
        } else {
          fds[nfds++] = pollfd{sfd, POLLOUT, 0};
        }
      }
      const int ms = remaining_ms(deadline);
      const int r = ::poll(fds, nfds, deadline == Deadline::max() ? -1 : ms);
      if (r < 0 && errno != EINTR) fail<NetworkError>(self(), ": poll failed during ", op, ": ", std::strerror(errno));
      if (r == 0 && Clock::now() >= deadline) {
        throw_transfer_timeout(*this, self(), {op, send_peer, sent, send_bytes, recv_peer, got, recv_bytes}, limit);
      }
    }
  }

  const int rank_;
  const int world_;
  const std::string hostname_;
  std::atomic<int64_t> timeout_ms_;
  std::vector<Socket> sockets_;
  std::vector<std::string> addresses_;  // "host:port" each rank published
};

}  // namespace

int tcp_transport_socket(const Transport& t, int peer) { return t.peer_socket(peer); }

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

std::string local_address_towards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  const std::string port_str = std::to_string(port > 0 ? port : 9);
  if (getaddrinfo(host.c_str(), port_str.c_str(), &hints, &res) != 0 || !res) return "";
  std::string result;
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    // connect() on a UDP socket only chooses the route and source address.
    if (::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
      sockaddr_in local{};
      socklen_t len = sizeof(local);
      char buf[INET_ADDRSTRLEN] = {0};
      if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
          inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf)) && local.sin_addr.s_addr != INADDR_ANY) {
        result = buf;
      }
    }
    ::close(fd);
  }
  freeaddrinfo(res);
  return result;
}

std::string default_advertise_host() {
  ifaddrs* list = nullptr;
  std::string result = "127.0.0.1";
  if (getifaddrs(&list) != 0) return result;
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    if (!(a->ifa_flags & IFF_UP) || !(a->ifa_flags & IFF_RUNNING) || (a->ifa_flags & IFF_LOOPBACK)) continue;
    char buf[INET_ADDRSTRLEN] = {0};
    if (inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf, sizeof(buf))) {
      result = buf;
      break;
    }
  }
  freeifaddrs(list);
  return result;
}

std::unique_ptr<Transport> connect_tcp_transport(Store& store, int rank, int world_size, const std::string& prefix,
                                                 std::chrono::milliseconds timeout,
                                                 const TcpTransportOptions& options) {
  const std::string hostname = options.hostname.empty() ? this_hostname() : options.hostname;
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    fail<Error>("tcp transport: rank ", rank, " is not in a world of ", world_size, " ranks");
  }
  auto t = std::make_unique<TcpTransport>(rank, world_size, hostname, timeout);
  const std::string self = t->self();
  if (world_size == 1) return t;

  const std::string advertise = options.advertise_host.empty() ? default_advertise_host() : options.advertise_host;
  const std::string bind = !options.bind_host.empty()    ? options.bind_host
                           : is_loopback_host(advertise) ? "127.0.0.1"
                                                         : "0.0.0.0";
  const uint64_t prefix_hash = fnv1a(prefix);
  const Deadline deadline = deadline_after(timeout);
  const std::string during = " while connecting the tcp transport (prefix '" + prefix + "')";
  try {
    Socket listener = listen_tcp(bind, 0, world_size + 8);
    const bool ipv6_literal = advertise.find(':') != std::string::npos;
    const std::string mine =
        (ipv6_literal ? "[" + advertise + "]" : advertise) + ":" + std::to_string(local_port(listener));
    t->set_address(rank, mine);
    store.set(prefix + "/addr/" + std::to_string(rank), mine);

    // 1. Connect to every higher rank and say who we are. Their listeners
    //    exist before their addresses are published, so this never waits for
    //    them to reach their accept loop.
    for (int p = rank + 1; p < world_size; ++p) {
      const std::string key = prefix + "/addr/" + std::to_string(p);
      const std::string addr = store.get(key);
      t->set_address(p, addr);
      const HostPort hp = parse_host_port(addr, key);
      Socket s = connect_tcp(hp.host, hp.port, deadline);
      char hello[kHelloBytes];
      std::memcpy(hello, kMagic, 4);
      wire::store_u32(hello + 4, kVersion);
      wire::store_u32(hello + 8, static_cast<uint32_t>(rank));
      wire::store_u32(hello + 12, static_cast<uint32_t>(world_size));
      wire::store_u64(hello + 16, prefix_hash);
      send_all(s, hello, sizeof(hello), deadline, "transport handshake");
      t->set_socket(p, std::move(s));
    }

    // 2. Accept every lower rank, checking its handshake.
    int missing = rank;
    while (missing > 0) {
      Socket s = accept_tcp(listener, deadline);
      if (!s.valid()) {
        std::vector<int> absent;
        for (int p = 0; p < rank; ++p) {
          if (!t->has_socket(p)) absent.push_back(p);
        }
        throw TimeoutError(self + ": timed out after " + format_duration(timeout) + " waiting for rank" +
                           (absent.size() > 1 ? "s " : " ") + join_ranks(absent) + " to connect to " + mine + during +
                           "; those ranks are not running, or cannot reach this address");
      }
      char hello[kHelloBytes];
      try {
        recv_all(s, hello, sizeof(hello), deadline, "transport handshake");
      } catch (const TimeoutError&) {
        throw;
      } catch (const NetworkError&) {
        continue;  // a stranger that hung up (a port scan, a stale run); keep waiting
      }
      if (std::memcmp(hello, kMagic, 4) != 0 || wire::load_u32(hello + 4) != kVersion ||
          wire::load_u64(hello + 16) != prefix_hash) {
        std::fprintf(stderr, "%s: ignoring a connection from %s that is not a strata transport peer of this run\n",
                     self.c_str(), s.peer().c_str());
        continue;
      }
      const int peer = static_cast<int>(wire::load_u32(hello + 8));
      const int peer_world = static_cast<int>(wire::load_u32(hello + 12));
      if (peer_world != world_size) {
        fail<NetworkError>(self, ": rank ", peer, " (", s.peer(), ") runs with world size ", peer_world,
                           ", this rank with ", world_size, during);
      }
      if (peer < 0 || peer >= rank) {
        fail<NetworkError>(self, ": a peer at ", s.peer(), " claims rank ", peer, ", but only lower ranks connect here",
                           during);
      }
      if (t->has_socket(peer)) {
        fail<NetworkError>(self, ": two processes connected as rank ", peer, " (the second from ", s.peer(), ")",
                           during, "; check that every rank has a distinct STRATA_RANK");
      }
      char ack[kAckBytes];
      std::memcpy(ack, kMagic, 4);
      wire::store_u32(ack + 4, 0);
      send_all(s, ack, sizeof(ack), deadline, "transport handshake");
      t->set_address(peer, store.get(prefix + "/addr/" + std::to_string(peer)));
      t->set_socket(peer, std::move(s));
      --missing;
    }

    // 3. Collect the acknowledgements of the higher ranks.
    for (int p = rank + 1; p < world_size; ++p) {
      char ack[kAckBytes];
      recv_all(t->socket(p), ack, sizeof(ack), deadline, "transport handshake");
      if (std::memcmp(ack, kMagic, 4) != 0 || wire::load_u32(ack + 4) != 0) {
        fail<NetworkError>(self, ": ", t->peer_name(p), " refused the transport handshake", during);
      }
    }
  } catch (const TimeoutError& e) {
    const std::string what = e.what();
    if (what.rfind(self, 0) == 0) throw;
    throw TimeoutError(self + ": " + what + during);
  } catch (const NetworkError& e) {
    const std::string what = e.what();
    if (what.rfind(self, 0) == 0) throw;
    throw NetworkError(self + ": " + what + during);
  }
  for (int p = 0; p < world_size; ++p) {
    if (p != rank) set_nonblocking(t->socket(p).fd());
  }
  return t;
}

std::unique_ptr<Transport> connect_tcp_transport(Store& store, int rank, int world_size, const std::string& prefix,
                                                 std::chrono::milliseconds timeout) {
  return connect_tcp_transport(store, rank, world_size, prefix, timeout, TcpTransportOptions{});
}

}  // namespace strata::parallel
