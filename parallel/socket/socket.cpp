#include "parallel/socket/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <thread>

namespace strata::parallel {

namespace {

std::string errno_str(int err) { return std::strerror(err); }

std::string join_host_port(const std::string& host, int port) {
  // IPv6 literals need brackets to be read back unambiguously.
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

// Formats a sockaddr as "host:port"; host_only drops the port.
std::string format_sockaddr(const sockaddr_storage& ss, bool host_only) {
  char buf[INET6_ADDRSTRLEN] = {0};
  int port = 0;
  if (ss.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
    port = ntohs(in->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf));
    port = ntohs(in6->sin6_port);
  } else {
    return "?";
  }
  return host_only ? std::string(buf) : join_host_port(buf, port);
}

}  // namespace

Deadline deadline_after(std::chrono::milliseconds timeout) {
  const Deadline now = Clock::now();
  if (timeout.count() < 0) return now;
  const auto room = std::chrono::duration_cast<std::chrono::milliseconds>(Deadline::max() - now);
  if (timeout >= room) return Deadline::max();
  return now + timeout;
}

int remaining_ms(Deadline deadline) {
  if (deadline == Deadline::max()) return INT_MAX;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return static_cast<int>(std::min<long long>(left, INT_MAX));
}

std::string format_duration(std::chrono::milliseconds d) {
  const long long ms = d.count();
  if (ms < 1000) return std::to_string(ms) + " ms";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + " s";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", static_cast<double>(ms) / 1000.0);
  return buf;
}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    peer_ = std::move(other.peer_);
    other.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) {
    ::close(fd_);  // not retried on EINTR: on Linux the descriptor is gone either way
    fd_ = -1;
  }
}

void Socket::shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

bool poll_fd(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int ms = remaining_ms(deadline);
    const int r = ::poll(&p, 1, deadline == Deadline::max() ? -1 : ms);
    if (r > 0) return true;  // ready, or error/hang-up for the next call to report
    if (r == 0) {
      if (Clock::now() >= deadline) return false;
      continue;  // poll's millisecond rounding woke us a little early
    }
    if (errno != EINTR) fail<NetworkError>("poll failed: ", errno_str(errno));
  }
}

void set_nodelay(int fd) {
  // Small control messages (store requests, ring headers) must not wait for
  // Nagle's algorithm to batch them.
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void set_nonblocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

void set_blocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
}

std::string peer_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  return format_sockaddr(ss, false);
}

std::string peer_host(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  return format_sockaddr(ss, true);
}

Socket listen_tcp(const std::string& host, int port, int backlog) {
  const std::string where = join_host_port(host.empty() ? "0.0.0.0" : host, port);
  if (port < 0 || port > 65535) fail<NetworkError>("listen on ", where, ": port out of range");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  const bool any = host.empty() || host == "0.0.0.0" || host == "*";
  if (any) hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  const std::string port_str = std::to_string(port);
  const int rc = getaddrinfo(any ? nullptr : host.c_str(), port_str.c_str(), &hints, &res);
  if (rc != 0) fail<NetworkError>("listen on ", where, ": cannot resolve '", host, "': ", gai_strerror(rc));
  std::string last_error = "no usable address";
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last_error = "socket: " + errno_str(errno);
      continue;
    }
    // A restarted rank 0 can reuse its port while old connections linger in TIME_WAIT.
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      last_error = "bind: " + errno_str(errno);
      ::close(fd);
      continue;
    }
    if (::listen(fd, backlog) != 0) {
      last_error = "listen: " + errno_str(errno);
      ::close(fd);
      continue;
    }
    freeaddrinfo(res);
    Socket s(fd, where + " (listening)");
    if (port == 0) {
      const int bound = local_port(s);
      s.set_peer(join_host_port(host.empty() ? "0.0.0.0" : host, bound) + " (listening)");
    }
    return s;
  }
  freeaddrinfo(res);
  fail<NetworkError>("listen on ", where, ": ", last_error);
}

int local_port(const Socket& socket) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getsockname(socket.fd(), reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    fail<NetworkError>("getsockname: ", errno_str(errno));
  }
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  fail<NetworkError>("getsockname: not an internet socket");
}

Socket accept_tcp(const Socket& listener, Deadline deadline) {
  for (;;) {
    if (!poll_fd(listener.fd(), POLLIN, deadline)) return Socket();
    const int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      set_nodelay(fd);
      return Socket(fd, peer_address(fd));
    }
    // The client may have given up between poll and accept; keep waiting.
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED) continue;
    fail<NetworkError>("accept on ", listener.peer(), ": ", errno_str(errno));
  }
}

Socket connect_tcp(const std::string& host, int port, Deadline deadline) {
  const std::string where = join_host_port(host, port);
  const Deadline start = Clock::now();
  std::string last_error = "no attempt made";
  auto backoff = std::chrono::milliseconds(10);
  const std::string port_str = std::to_string(port);
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* res = nullptr;
    const int rc = getaddrinfo(host.c_str(), port_str.c_str(), &hints, &res);
    if (rc == EAI_AGAIN) {
      last_error = std::string("cannot resolve '") + host + "': " + gai_strerror(rc);
    } else if (rc != 0) {
      fail<NetworkError>("connect to ", where, ": cannot resolve host '", host, "': ", gai_strerror(rc));
    } else {
      for (addrinfo* ai = res; ai; ai = ai->ai_next) {
        const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0) {
          last_error = "socket: " + errno_str(errno);
          continue;
        }
        int err = 0;
        if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
          err = errno;
          if (err == EINPROGRESS || err == EINTR) {
            if (!poll_fd(fd, POLLOUT, deadline)) {
              err = ETIMEDOUT;
            } else {
              socklen_t len = sizeof(err);
              if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
            }
          }
        }
        if (err == 0) {
          freeaddrinfo(res);
          set_blocking(fd);
          set_nodelay(fd);
          return Socket(fd, where);
        }
        last_error = errno_str(err);
        ::close(fd);
      }
      freeaddrinfo(res);
    }
    if (Clock::now() >= deadline) {
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
      throw TimeoutError("connect to " + where + ": gave up after " + format_duration(waited) +
                         " (last error: " + last_error + ")");
    }
    const auto left = std::chrono::milliseconds(remaining_ms(deadline));
    std::this_thread::sleep_for(std::min(backoff, left));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
}

void send_all(const Socket& socket, const void* data, size_t bytes, Deadline deadline, const char* what) {
  const char* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < bytes) {
    // MSG_DONTWAIT: never block past the deadline inside send itself.
    const ssize_t n = ::send(socket.fd(), p + done, bytes - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!poll_fd(socket.fd(), POLLOUT, deadline)) {
        throw TimeoutError(std::string(what) + " to " + socket.peer() + ": send timed out after " +
                           std::to_string(done) + " of " + std::to_string(bytes) +
                           " bytes (the peer is not reading)");
      }
      continue;
    }
    fail<NetworkError>(what, " to ", socket.peer(), ": send failed after ", done, " of ", bytes,
                       " bytes: ", errno_str(n < 0 ? errno : EPIPE));
  }
}

void recv_all(const Socket& socket, void* data, size_t bytes, Deadline deadline, const char* what) {
  char* p = static_cast<char*>(data);
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::recv(socket.fd(), p + done, bytes - done, MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      fail<NetworkError>(what, " from ", socket.peer(), ": connection closed by the peer after ", done, " of ",
                         bytes, " bytes");
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!poll_fd(socket.fd(), POLLIN, deadline)) {
        throw TimeoutError(std::string(what) + " from " + socket.peer() + ": receive timed out after " +
                           std::to_string(done) + " of " + std::to_string(bytes) + " bytes");
      }
      continue;
    }
    fail<NetworkError>(what, " from ", socket.peer(), ": receive failed after ", done, " of ", bytes,
                       " bytes: ", errno_str(errno));
  }
}

int pick_free_port(const std::string& host) {
  Socket s = listen_tcp(host, 0, 1);
  return local_port(s);
}

}  // namespace strata::parallel
