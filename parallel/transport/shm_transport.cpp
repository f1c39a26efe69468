#include "parallel/transport/shm_transport.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "framework/error.h"
#include "parallel/socket/socket.h"
#include "parallel/rendezvous/store.h"
#include "parallel/transport/tcp_transport.h"

namespace strata::parallel {

namespace {

constexpr uint64_t kRingMagic = 0x31474e494d485354ull;  // "TSHMING1"
// Largest single copy: bounds how long a loop goes without serving the
// other direction or reporting progress.
constexpr size_t kMaxCopy = 256 << 10;

static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared-memory counters must be lock-free");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared-memory flags must be lock-free");

// Lives at the start of the mapping; the data area follows at kDataOffset.
struct RingHeader {
  uint64_t magic;
  uint64_t capacity;
  alignas(64) std::atomic<uint64_t> head;  // bytes written, by the producer only
  alignas(64) std::atomic<uint64_t> tail;  // bytes read, by the consumer only
  alignas(64) std::atomic<uint32_t> producer_closed;
  std::atomic<uint32_t> consumer_closed;
};
constexpr size_t kDataOffset = 256;
static_assert(sizeof(RingHeader) <= kDataOffset, "ring header too large");

struct Ring {
  void* map = nullptr;
  size_t map_bytes = 0;
  RingHeader* hdr = nullptr;
  char* data = nullptr;
  uint64_t mask = 0;

  bool valid() const { return hdr != nullptr; }
  void unmap() {
    if (map) ::munmap(map, map_bytes);
    map = nullptr;
    hdr = nullptr;
    data = nullptr;
  }
};

std::string this_hostname() {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) return "?";
  return host;
}

std::string host_identity(const std::string& hostname) {
  std::string boot;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::getline(f, boot);
  return hostname + "/" + boot;
}

size_t round_up_pow2(size_t v) {
  size_t p = 4096;
  while (p < v) p <<= 1;
  return p;
}

// Maps an existing shared-memory object; false (and nothing mapped) when it
// cannot be opened or does not hold a ring.
bool map_ring(int fd, size_t bytes, Ring& ring) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return false;
  ring.map = p;
  ring.map_bytes = bytes;
  ring.hdr = static_cast<RingHeader*>(p);
  ring.data = static_cast<char*>(p) + kDataOffset;
  ring.mask = bytes - kDataOffset - 1;
  return true;
}

// The receiving side creates the ring; returns its name, "" on failure.
std::string create_ring(int src, int dst, size_t capacity, Ring& ring) {
  std::random_device rd;
  const std::string name = "/strata-shm-" + std::to_string(::getpid()) + "-" + std::to_string(rd()) + "-" +
                           std::to_string(src) + "-" + std::to_string(dst);
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return "";
  const size_t bytes = kDataOffset + capacity;
  // posix_fallocate reserves the pages now: on a full /dev/shm (64 MB by
  // default in containers) the pair falls back to TCP instead of the first
  // write into the mapping raising SIGBUS.
  bool ok = ::ftruncate(fd, static_cast<off_t>(bytes)) == 0 &&
            ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)) == 0 && map_ring(fd, bytes, ring);
  ::close(fd);
  if (!ok) {
    ::shm_unlink(name.c_str());
    return "";
  }
  RingHeader* h = ring.hdr;
  h->capacity = capacity;
  new (&h->head) std::atomic<uint64_t>(0);
  new (&h->tail) std::atomic<uint64_t>(0);
  new (&h->producer_closed) std::atomic<uint32_t>(0);
  new (&h->consumer_closed) std::atomic<uint32_t>(0);
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = kRingMagic;
  return name;
}

bool open_ring(const std::string& name, size_t capacity, Ring& ring) {
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) return false;
  struct stat st {};
  const size_t bytes = kDataOffset + capacity;
  bool ok = ::fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) == bytes && map_ring(fd, bytes, ring);
  ::close(fd);
  if (ok && (ring.hdr->magic != kRingMagic || ring.hdr->capacity != capacity)) {
    ring.unmap();
    ok = false;
  }
  return ok;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

class ShmTransport final : public Transport {
 public:
  ShmTransport(std::unique_ptr<Transport> inner, std::string hostname, std::chrono::milliseconds timeout)
      : inner_(std::move(inner)),
        rank_(inner_->rank()),
        world_(inner_->world_size()),
        hostname_(std::move(hostname)),
        timeout_ms_(timeout.count()),
        out_(static_cast<size_t>(world_)),
        in_(static_cast<size_t>(world_)) {}

  ~ShmTransport() override {
    // Tell the peers at once, so they do not wait out their timeout.
    for (Ring& r : out_) {
      if (r.valid()) r.hdr->producer_closed.store(1, std::memory_order_release);
      r.unmap();
    }
    for (Ring& r : in_) {
      if (r.valid()) r.hdr->consumer_closed.store(1, std::memory_order_release);
      r.unmap();
    }
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  void set_timeout(std::chrono::milliseconds timeout) override {
    timeout_ms_.store(timeout.count());
    inner_->set_timeout(timeout);
  }
  std::string peer_name(int peer) const override {
    return inner_->peer_name(peer) + (is_shm(peer) ? " [shm]" : "");
  }
  int peer_socket(int peer) const override { return inner_->peer_socket(peer); }

  void send(int peer, const void* data, size_t bytes) override {
    if (bytes == 0) return;
    if (!is_shm(peer)) return inner_->send(peer, data, bytes);
    shm_transfer("send", peer, data, bytes, peer, nullptr, 0, nullptr);
  }
  void recv(int peer, void* data, size_t bytes) override {
    if (bytes == 0) return;
    if (!is_shm(peer)) return inner_->recv(peer, data, bytes);
    shm_transfer("recv", peer, nullptr, 0, peer, data, bytes, nullptr);
  }
  void send_recv(int send_peer, const void* send_data, size_t send_bytes, int recv_peer, void* recv_data,
                 size_t recv_bytes, const std::function<void(size_t, size_t)>& on_received) override {
    const auto* cb = on_received ? &on_received : nullptr;
    // An idle direction goes with either path.
    const bool send_shm = send_bytes == 0 || is_shm(send_peer);
    const bool recv_shm = recv_bytes == 0 || is_shm(recv_peer);
    const bool send_inner = send_bytes == 0 || !is_shm(send_peer);
    const bool recv_inner = recv_bytes == 0 || !is_shm(recv_peer);
    if (send_shm && recv_shm) {
      shm_transfer("send_recv", send_peer, send_data, send_bytes, recv_peer, recv_data, recv_bytes, cb);
      return;
    }
    if (send_inner && recv_inner) {
      inner_->send_recv(send_peer, send_data, send_bytes, recv_peer, recv_data, recv_bytes, on_received);
      return;
    }
    // Mixed paths: the send direction on a helper thread, so both progress.
    std::exception_ptr send_error;
    std::thread sender([&] {
      try {
        if (send_shm) {
          shm_transfer("send_recv", send_peer, send_data, send_bytes, recv_peer, nullptr, 0, nullptr);
        } else {
          inner_->send(send_peer, send_data, send_bytes);
        }
      } catch (...) {
        send_error = std::current_exception();
      }
    });
    std::exception_ptr recv_error;
    try {
      if (recv_shm) {
        shm_transfer("send_recv", send_peer, nullptr, 0, recv_peer, recv_data, recv_bytes, cb);
      } else {
        inner_->send_recv(send_peer, nullptr, 0, recv_peer, recv_data, recv_bytes, on_received);
      }
    } catch (...) {
      recv_error = std::current_exception();
    }
    sender.join();
    if (recv_error) std::rethrow_exception(recv_error);
    if (send_error) std::rethrow_exception(send_error);
  }

  const Transport& inner() const { return *inner_; }

  // --- setup, used by connect_shm_transport ---
  std::string self() const { return "rank " + std::to_string(rank_) + " on " + hostname_; }
  Ring& out(int peer) { return out_[static_cast<size_t>(peer)]; }
  Ring& in(int peer) { return in_[static_cast<size_t>(peer)]; }
  int shm_peers() const {
    int n = 0;
    for (int p = 0; p < world_; ++p) n += is_shm(p) ? 1 : 0;
    return n;
  }

 private:
  bool is_shm(int peer) const {
    return peer >= 0 && peer < world_ && peer != rank_ && out_[static_cast<size_t>(peer)].valid() &&
           in_[static_cast<size_t>(peer)].valid();
  }

  [[noreturn]] void closed(const char* op, int peer, size_t done, size_t total, const char* direction) const {
    fail<NetworkError>(self(), ": ", peer_name(peer), " closed the connection during ", op, " after ", done, " of ",
                       total, " bytes ", direction, "; that rank has probably exited or crashed, see its output");
  }

  // True when the peer's inner socket says the peer went away.
  bool peer_gone(int peer) const {
    const int fd = tcp_transport_socket(*inner_, peer);
    if (fd < 0) return false;
    char c;
    const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }

  // Sleeps up to `us` microseconds, waking early when a peer's socket
  // becomes readable (it closed: the peer died).
  void sleep_on_peers(int a, int b, int us) const {
    pollfd fds[2];
    nfds_t n = 0;
    for (int p : {a, b}) {
      const int fd = p >= 0 ? tcp_transport_socket(*inner_, p) : -1;
      if (fd >= 0 && !(n == 1 && fds[0].fd == fd)) fds[n++] = pollfd{fd, POLLIN | POLLRDHUP, 0};
    }
    const timespec ts{0, static_cast<long>(us) * 1000};
    ::ppoll(fds, n, &ts, nullptr);
  }

  void shm_transfer(const char* op, int send_peer, const void* send_data, size_t send_bytes, int recv_peer,
                    void* recv_data, size_t recv_bytes, const std::function<void(size_t, size_t)>* on_received) {
    if ((send_bytes && !is_shm(send_peer)) || (recv_bytes && !is_shm(recv_peer))) {
      fail<Error>(self(), ": ", op, " with rank ", send_bytes ? send_peer : recv_peer,
                  ": not a shared-memory peer in a world of ", world_, " ranks");
    }
    Ring* so = send_bytes ? &out(send_peer) : nullptr;
    Ring* ri = recv_bytes ? &in(recv_peer) : nullptr;
    const char* sp = static_cast<const char*>(send_data);
    char* rp = static_cast<char*>(recv_data);
    size_t sent = 0;
    size_t got = 0;
    const std::chrono::milliseconds limit(timeout_ms_.load());
    Deadline deadline = deadline_after(limit);
    int idle = 0;
    while (sent < send_bytes || got < recv_bytes) {
      bool progressed = false;
      if (got < recv_bytes) {
        RingHeader* h = ri->hdr;
        const uint64_t tail = h->tail.load(std::memory_order_relaxed);
        const uint64_t avail = h->head.load(std::memory_order_acquire) - tail;
        if (avail > 0) {
          const size_t n = static_cast<size_t>(std::min<uint64_t>({avail, recv_bytes - got, kMaxCopy}));
          const size_t at = static_cast<size_t>(tail & ri->mask);
          const size_t first = std::min(n, static_cast<size_t>(ri->mask + 1) - at);
          std::memcpy(rp + got, ri->data + at, first);
          if (n > first) std::memcpy(rp + got + first, ri->data, n - first);
          h->tail.store(tail + n, std::memory_order_release);
          const size_t before = got;
          got += n;
          progressed = true;
          if (on_received) (*on_received)(before, got);
        } else if (h->producer_closed.load(std::memory_order_acquire) &&
                   h->head.load(std::memory_order_acquire) == tail) {
          closed(op, recv_peer, got, recv_bytes, "received");
        }
      }
      if (sent < send_bytes) {
        RingHeader* h = so->hdr;
        if (h->consumer_closed.load(std::memory_order_acquire)) closed(op, send_peer, sent, send_bytes, "sent");
        const uint64_t head = h->head.load(std::memory_order_relaxed);
        const uint64_t space = (so->mask + 1) - (head - h->tail.load(std::memory_order_acquire));
        if (space > 0) {
          const size_t n = static_cast<size_t>(std::min<uint64_t>({space, send_bytes - sent, kMaxCopy}));
          const size_t at = static_cast<size_t>(head & so->mask);
          const size_t first = std::min(n, static_cast<size_t>(so->mask + 1) - at);
          std::memcpy(so->data + at, sp + sent, first);
          if (n > first) std::memcpy(so->data, sp + sent + first, n - first);
          h->head.store(head + n, std::memory_order_release);
          sent += n;
          progressed = true;
        }
      }
      if (progressed) {
        idle = 0;
        deadline = deadline_after(limit);
        continue;
      }
      // Nothing moved: spin briefly, then yield, then sleep in short steps.
      ++idle;
      if (idle < 200) {
        cpu_relax();
        continue;
      }
      if (idle < 400) {
        sched_yield();
        continue;
      }
      const int waiting_on = got < recv_bytes ? recv_peer : send_peer;
      if ((idle & 15) == 0 && peer_gone(waiting_on)) {
        closed(op, waiting_on, got < recv_bytes ? got : sent, got < recv_bytes ? recv_bytes : send_bytes,
               got < recv_bytes ? "received" : "sent");
      }
      if (Clock::now() >= deadline) {
        throw_transfer_timeout(*this, self(), {op, send_peer, sent, send_bytes, recv_peer, got, recv_bytes}, limit);
      }
      sleep_on_peers(got < recv_bytes ? recv_peer : -1, sent < send_bytes ? send_peer : -1,
                     std::min(1000, 20 << std::min(6, (idle - 400) / 32)));
    }
  }

  std::unique_ptr<Transport> inner_;
  const int rank_;
  const int world_;
  const std::string hostname_;
  std::atomic<int64_t> timeout_ms_;
  std::vector<Ring> out_;  // rings this rank writes, per peer
  std::vector<Ring> in_;   // rings this rank reads, per peer
};

}  // namespace

bool shm_enabled_by_env() {
  const char* v = std::getenv("STRATA_SHM");
  if (!v || !*v || std::string(v) == "1") return true;
  if (std::string(v) == "0") return false;
  fail<ConfigError>("STRATA_SHM is '", v, "': expected 1 (ranks on one host exchange through shared memory, the "
                    "default) or 0 (they use the network transport)");
}

int shm_peer_count(const Transport& t) {
  const auto* shm = dynamic_cast<const ShmTransport*>(&t);
  return shm ? shm->shm_peers() : 0;
}

const Transport* shm_inner_transport(const Transport& t) {
  const auto* shm = dynamic_cast<const ShmTransport*>(&t);
  return shm ? &shm->inner() : nullptr;
}

std::unique_ptr<Transport> connect_shm_transport(Store& store, std::unique_ptr<Transport> inner,
                                                 const std::string& prefix, std::chrono::milliseconds timeout,
                                                 const ShmTransportOptions& options) {
  STRATA_CHECK(inner != nullptr, "connect_shm_transport needs an inner transport");
  const int rank = inner->rank();
  const int world = inner->world_size();
  const std::string hostname = options.hostname.empty() ? this_hostname() : options.hostname;
  auto t = std::make_unique<ShmTransport>(std::move(inner), hostname, timeout);
  if (world == 1) return t;
  const size_t capacity = round_up_pow2(options.ring_bytes);
  const std::string id = options.host_id.empty() ? host_identity(hostname) : options.host_id;
  auto key = [&](const char* what, int a, int b) {
    return prefix + "/" + what + "/" + std::to_string(a) + (b >= 0 ? "/" + std::to_string(b) : "");
  };

  store.set(key("host", rank, -1), id);
  std::vector<int> local;
  for (int p = 0; p < world; ++p) {
    if (p != rank && store.get(key("host", p, -1)) == id) local.push_back(p);
  }
  // 1. Create the rings this rank reads (p -> rank) and publish their names.
  std::vector<std::string> created(static_cast<size_t>(world));
  try {
    for (int p : local) {
      created[static_cast<size_t>(p)] = create_ring(p, rank, capacity, t->in(p));
      store.set(key("ring", p, rank), created[static_cast<size_t>(p)]);
    }
    // 2. Map the rings this rank writes (rank -> p) and say whether it worked.
    for (int p : local) {
      const std::string name = store.get(key("ring", rank, p));
      const bool ok = !name.empty() && open_ring(name, capacity, t->out(p));
      store.set(key("mapped", rank, p), ok ? "1" : "0");
    }
    // 3. Once the writer answered, the name is no longer needed.
    for (int p : local) {
      const bool theirs = store.get(key("mapped", p, rank)) == "1";
      const bool mine = store.get(key("mapped", rank, p)) == "1";
      const std::string& name = created[static_cast<size_t>(p)];
      if (!name.empty()) ::shm_unlink(name.c_str());
      created[static_cast<size_t>(p)].clear();
      if (!theirs || !mine) {  // both sides reach the same decision
        t->in(p).unmap();
        t->out(p).unmap();
      }
    }
  } catch (...) {
    for (const std::string& name : created) {
      if (!name.empty()) ::shm_unlink(name.c_str());
    }
    throw;
  }
  return t;
}

}  // namespace strata::parallel
