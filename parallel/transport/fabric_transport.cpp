#include "parallel/transport/fabric_transport.h"

#include "framework/error.h"

#ifdef STRATA_HAVE_LIBFABRIC
#include <poll.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "parallel/rendezvous/store.h"
#include "parallel/transport/fabric_mr_cache.h"
#include "parallel/transport/fabric_library.h"
#include "parallel/transport/fabric_provider.h"
#include "parallel/socket/socket.h"
#endif

namespace strata::parallel {

#ifdef STRATA_HAVE_LIBFABRIC

namespace {

constexpr int kRankBits = 16;
constexpr int kSeqBits = 64 - kRankBits;
constexpr uint64_t kSeqMask = (uint64_t{1} << kSeqBits) - 1;
// Idle polls of the completion queue before the loop starts sleeping.
constexpr int kSpinPolls = 2000;
// Messages this small (a collective's call header, a scalar) go through two
// buffers the transport owns and registers once, instead of registering the
// caller's memory: such buffers are often short-lived (a new address on every
// call), and a registration costs far more than copying a few KiB.
constexpr size_t kBounceBytes = 4096;

uint64_t make_tag(int sender, uint64_t seq) {
  return (static_cast<uint64_t>(sender) << kSeqBits) | (seq & kSeqMask);
}

std::string this_hostname() {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) return "?";
  return host;
}

std::string to_hex(const std::vector<uint8_t>& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (uint8_t b : bytes) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

bool from_hex(const std::string& s, std::vector<uint8_t>& out) {
  auto val = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  };
  if (s.size() % 2) return false;
  out.clear();
  for (size_t i = 0; i < s.size(); i += 2) {
    const int hi = val(s[i]);
    const int lo = val(s[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out.push_back(static_cast<uint8_t>(hi * 16 + lo));
  }
  return true;
}

// One posted send or receive of one chunk. The provider's scratch space
// (FI_CONTEXT / FI_CONTEXT2) comes first, and its address is the operation's
// context, which completions hand back.
struct Op {
  fi_context2 ctx;
  size_t chunk = 0;
  bool done = true;
};

// Chunks of one direction of a transfer: which are posted, which complete.
struct Direction {
  int peer = -1;
  char* data = nullptr;
  size_t bytes = 0;
  void* desc = nullptr;
  uint64_t seq0 = 0;   // tag sequence number of chunk 0
  size_t chunks = 0;
  size_t posted = 0;
  size_t finished = 0;  // chunks [0, finished) are complete
  std::vector<Op>* ops = nullptr;

  size_t done_bytes(size_t chunk_bytes) const { return std::min(bytes, finished * chunk_bytes); }
};

class FabricTransport final : public Transport {
 public:
  FabricTransport(std::unique_ptr<Transport> inner, std::string hostname, std::chrono::milliseconds timeout,
                  const FabricTransportOptions& options)
      : inner_(std::move(inner)),
        rank_(inner_->rank()),
        world_(inner_->world_size()),
        hostname_(std::move(hostname)),
        timeout_ms_(timeout.count()),
        chunk_(std::max<size_t>(1, options.chunk_bytes)),
        window_(std::max(1, options.window)),
        send_ops_(static_cast<size_t>(window_)),
        recv_ops_(static_cast<size_t>(window_)),
        addrs_(static_cast<size_t>(world_), FI_ADDR_UNSPEC),
        send_seq_(static_cast<size_t>(world_), 0),
        recv_seq_(static_cast<size_t>(world_), 0),
        send_bounce_(kBounceBytes),
        recv_bounce_(kBounceBytes) {}

  ~FabricTransport() override {
    close_endpoint();
    mr_.reset();  // registrations go before their domain
    if (av_) fi_close(&av_->fid);
    if (cq_) fi_close(&cq_->fid);
    if (domain_) fi_close(&domain_->fid);
    if (fabric_) fi_close(&fabric_->fid);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  void set_timeout(std::chrono::milliseconds timeout) override {
    timeout_ms_.store(timeout.count());
    inner_->set_timeout(timeout);
  }
  std::string peer_name(int peer) const override { return inner_->peer_name(peer); }
  int peer_socket(int peer) const override { return inner_->peer_socket(peer); }

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

  std::string self() const { return "rank " + std::to_string(rank_) + " on " + hostname_; }
  size_t registrations() const { return mr_ ? mr_->count() : 0; }
  const std::string& provider() const { return provider_; }

  // --- setup, used by connect_fabric_transport ---
  // Opens fabric, domain, completion queue, address vector and endpoint on
  // the first of `info`'s entries; returns this endpoint's address.
  std::vector<uint8_t> open(fi_info* info) {
    const std::string me = self();
    provider_ = info->fabric_attr->prov_name ? info->fabric_attr->prov_name : "?";
    STRATA_FABRIC_CHECK(me, fabric_api_or_throw().fabric(info->fabric_attr, &fabric_, nullptr));
    STRATA_FABRIC_CHECK(me, fi_domain(fabric_, info, &domain_, nullptr));
    mr_ = std::make_unique<FabricMrCache>(domain_, (info->domain_attr->mr_mode & FI_MR_LOCAL) != 0, me);

    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_TAGGED;
    cq_attr.size = static_cast<size_t>(4 * window_);
    // A wait descriptor lets an idle wait sleep in poll() beside the peers'
    // sockets; a provider without one is polled with short sleeps instead.
    cq_attr.wait_obj = FI_WAIT_FD;
    if (fi_cq_open(domain_, &cq_attr, &cq_, nullptr) == 0) {
      if (fi_control(&cq_->fid, FI_GETWAIT, &cq_fd_) != 0) cq_fd_ = -1;
    } else {
      cq_attr.wait_obj = FI_WAIT_NONE;
      STRATA_FABRIC_CHECK(me, fi_cq_open(domain_, &cq_attr, &cq_, nullptr));
    }
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    av_attr.count = static_cast<size_t>(world_);
    STRATA_FABRIC_CHECK(me, fi_av_open(domain_, &av_attr, &av_, nullptr));
    STRATA_FABRIC_CHECK(me, fi_endpoint(domain_, info, &ep_, nullptr));
    STRATA_FABRIC_CHECK(me, fi_ep_bind(ep_, &av_->fid, 0));
    STRATA_FABRIC_CHECK(me, fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV));
    STRATA_FABRIC_CHECK(me, fi_enable(ep_));
    std::vector<uint8_t> name(256);
    size_t len = name.size();
    int rc = fi_getname(&ep_->fid, name.data(), &len);
    if (rc == -FI_ETOOSMALL) {
      name.resize(len);
      rc = fi_getname(&ep_->fid, name.data(), &len);
    }
    STRATA_FABRIC_CHECK(me, rc);
    name.resize(len);
    return name;
  }

  void insert_address(int peer, const std::vector<uint8_t>& name) {
    fi_addr_t addr = FI_ADDR_UNSPEC;
    const int n = fi_av_insert(av_, name.data(), 1, &addr, 0, nullptr);
    if (n != 1) {
      fail<NetworkError>(self(), ": libfabric call failed: fi_av_insert of ", peer_name(peer), "'s endpoint address: ",
                         n < 0 ? fabric_strerror(-n) : "address not inserted");
    }
    addrs_[static_cast<size_t>(peer)] = addr;
  }

 private:
  void close_endpoint() {
    if (ep_) fi_close(&ep_->fid);
    ep_ = nullptr;
  }

  void check_peer(int peer, const char* op) const {
    if (peer < 0 || peer >= world_ || peer == rank_) {
      fail<Error>(self(), ": ", op, " with rank ", peer, ": not a peer in a world of ", world_, " ranks");
    }
  }

  [[noreturn]] void closed(const char* op, int peer, size_t done, size_t total, const char* direction) const {
    fail<NetworkError>(self(), ": ", peer_name(peer), " closed the connection during ", op, " after ", done, " of ",
                       total, " bytes ", direction, "; that rank has probably exited or crashed, see its output");
  }

  bool peer_gone(int peer) const {
    const int fd = inner_->peer_socket(peer);
    if (fd < 0) return false;
    char c;
    const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }

  // Posts the chunks of `d` that fit in the window; false once the provider
  // says its queue is full (-FI_EAGAIN), so the caller polls completions first.
  bool post(Direction& d, bool sending) {
    while (d.posted < d.chunks && d.posted - d.finished < static_cast<size_t>(window_)) {
      Op& op = (*d.ops)[d.posted % static_cast<size_t>(window_)];
      const size_t off = d.posted * chunk_;
      const size_t len = std::min(chunk_, d.bytes - off);
      op.chunk = d.posted;
      op.done = false;
      ssize_t rc;
      if (sending) {
        rc = fi_tsend(ep_, d.data + off, len, d.desc, addrs_[static_cast<size_t>(d.peer)],
                      make_tag(rank_, d.seq0 + d.posted), &op.ctx);
      } else {
        rc = fi_trecv(ep_, d.data + off, len, d.desc, FI_ADDR_UNSPEC, make_tag(d.peer, d.seq0 + d.posted), 0,
                      &op.ctx);
      }
      if (rc == -FI_EAGAIN) {
        op.done = true;
        return false;
      }
      if (rc != 0) {
        fail<NetworkError>(self(), ": libfabric call failed: ", sending ? "fi_tsend to " : "fi_trecv from ",
                           peer_name(d.peer), ": ", fabric_strerror(static_cast<int>(-rc)));
      }
      ++d.posted;
    }
    return true;
  }

  // Reads what the completion queue holds; true when anything completed.
  bool poll_completions(const char* op_name, const Direction& s, const Direction& r) {
    fi_cq_tagged_entry entries[16];
    const ssize_t n = fi_cq_read(cq_, entries, 16);
    if (n == -FI_EAGAIN) return false;
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(cq_, &err, 0);
      const bool was_recv = r.ops && err.op_context >= static_cast<void*>(r.ops->data()) &&
                            err.op_context < static_cast<void*>(r.ops->data() + r.ops->size());
      const int peer = was_recv ? r.peer : s.peer;
      // A peer that died shows first as a failed operation: say so plainly
      // when its socket confirms it (the kernel may take a moment to close it).
      const size_t done = was_recv ? r.done_bytes(chunk_) : s.done_bytes(chunk_);
      const size_t total = was_recv ? r.bytes : s.bytes;
      for (int i = 0; i < 20 && err.err != FI_ETRUNC; ++i) {
        if (peer_gone(peer)) closed(op_name, peer, done, total, was_recv ? "received" : "sent");
        ::usleep(10000);
      }
      char buf[256] = {0};
      const char* detail = fi_cq_strerror(cq_, err.prov_errno, err.err_data, buf, sizeof(buf));
      fail<NetworkError>(self(), ": ", was_recv ? "receiving from " : "sending to ", peer_name(peer), " during ",
                         op_name, " failed: ", fabric_strerror(err.err), " (provider ", provider_, ": ",
                         detail ? detail : "no detail", ")",
                         err.err == FI_ETRUNC ? "; the ranks disagree on message sizes (different operations?)"
                                              : "; that rank may have exited or crashed, see its output");
    }
    if (n < 0) {
      fail<NetworkError>(self(), ": libfabric call failed: fi_cq_read during ", op_name, ": ",
                         fabric_strerror(static_cast<int>(-n)));
    }
    for (ssize_t i = 0; i < n; ++i) static_cast<Op*>(entries[i].op_context)->done = true;
    return n > 0;
  }

  static bool advance(Direction& d, size_t window) {
    const size_t before = d.finished;
    while (d.finished < d.posted) {
      const Op& op = (*d.ops)[d.finished % window];
      if (!op.done || op.chunk != d.finished) break;
      ++d.finished;
    }
    return d.finished != before;
  }

  // Sleeps until the completion queue may have news, a waited-on peer's
  // socket closes, or `max_ms` passes.
  void wait_idle(int peer_a, int peer_b, int max_ms) {
    pollfd fds[3];
    nfds_t n = 0;
    for (int p : {peer_a, peer_b}) {
      const int fd = p >= 0 ? inner_->peer_socket(p) : -1;
      if (fd >= 0 && !(n == 1 && fds[0].fd == fd)) fds[n++] = pollfd{fd, POLLIN | POLLRDHUP, 0};
    }
    int ms = 0;
    if (cq_fd_ >= 0) {
      fid* fids[1] = {&cq_->fid};
      if (fi_trywait(fabric_, fids, 1) == FI_SUCCESS) {
        fds[n++] = pollfd{cq_fd_, POLLIN, 0};
        ms = max_ms;
      }
    }
    if (ms == 0) {
      const timespec ts{0, 50 * 1000};
      ::ppoll(fds, n, &ts, nullptr);
      return;
    }
    ::poll(fds, n, ms);
  }

  // Moves send_bytes to send_peer and recv_bytes from recv_peer at the same
  // time. A direction with zero bytes is idle (its peer is not checked).
  void transfer(const char* op, int send_peer, const void* send_data, size_t send_bytes, int recv_peer,
                void* recv_data, size_t recv_bytes, const std::function<void(size_t, size_t)>* on_received) {
    if (send_bytes) check_peer(send_peer, op);
    if (recv_bytes) check_peer(recv_peer, op);
    if (send_bytes == 0 && recv_bytes == 0) return;
    if (!ep_) {
      fail<NetworkError>(self(), ": ", op, " on a fabric transport that failed before (", broken_,
                         "); it cannot be used again");
    }
    mr_->trim();  // between transfers nothing is in flight
    const bool bounce_send = send_bytes > 0 && send_bytes <= kBounceBytes;
    const bool bounce_recv = recv_bytes > 0 && recv_bytes <= kBounceBytes;
    if (bounce_send) {
      std::memcpy(send_bounce_.data(), send_data, send_bytes);
      send_data = send_bounce_.data();
    }
    void* const caller_recv = recv_data;
    if (bounce_recv) recv_data = recv_bounce_.data();
    Direction s;
    Direction r;
    if (send_bytes) {
      s = {send_peer, static_cast<char*>(const_cast<void*>(send_data)), send_bytes, mr_->desc(send_data, send_bytes),
           send_seq_[static_cast<size_t>(send_peer)], (send_bytes + chunk_ - 1) / chunk_, 0, 0, &send_ops_};
      send_seq_[static_cast<size_t>(send_peer)] += s.chunks;
    }
    if (recv_bytes) {
      r = {recv_peer, static_cast<char*>(recv_data), recv_bytes, mr_->desc(recv_data, recv_bytes),
           recv_seq_[static_cast<size_t>(recv_peer)], (recv_bytes + chunk_ - 1) / chunk_, 0, 0, &recv_ops_};
      recv_seq_[static_cast<size_t>(recv_peer)] += r.chunks;
    }
    const std::chrono::milliseconds limit(timeout_ms_.load());
    try {
      Deadline deadline = deadline_after(limit);
      int idle = 0;
      while (s.finished < s.chunks || r.finished < r.chunks) {
        if (r.ops) post(r, false);  // receives first: the peer's sends find them
        if (s.ops) post(s, true);
        bool progressed = poll_completions(op, s, r);
        if (s.ops) advance(s, send_ops_.size());
        if (r.ops) {
          const size_t before = r.done_bytes(chunk_);
          if (advance(r, recv_ops_.size()) && on_received && !bounce_recv) {
            (*on_received)(before, r.done_bytes(chunk_));
          }
        }
        if (progressed) {
          idle = 0;
          deadline = deadline_after(limit);
          continue;
        }
        if (++idle < kSpinPolls) {
          if ((idle & 63) == 0) sched_yield();
          continue;
        }
        const bool recv_pending = r.finished < r.chunks;
        const Direction& waited = recv_pending ? r : s;
        if ((idle & 7) == 0 && peer_gone(waited.peer)) {
          closed(op, waited.peer, waited.done_bytes(chunk_), waited.bytes, recv_pending ? "received" : "sent");
        }
        if (Clock::now() >= deadline) {
          throw_transfer_timeout(*this, self(),
                                 {op, send_peer, s.done_bytes(chunk_), send_bytes, recv_peer, r.done_bytes(chunk_),
                                  recv_bytes},
                                 limit);
        }
        wait_idle(recv_pending ? r.peer : -1, s.finished < s.chunks ? s.peer : -1,
                  std::max(1, std::min(100, remaining_ms(deadline))));
      }
    } catch (const std::exception& e) {
      // Operations may still be posted on the caller's buffers: closing the
      // endpoint cancels them, so nothing writes there after we return.
      broken_ = e.what();
      close_endpoint();
      throw;
    }
    if (bounce_recv) {
      std::memcpy(caller_recv, recv_bounce_.data(), recv_bytes);
      if (on_received) (*on_received)(0, recv_bytes);
    }
  }

  std::unique_ptr<Transport> inner_;
  const int rank_;
  const int world_;
  const std::string hostname_;
  std::atomic<int64_t> timeout_ms_;
  const size_t chunk_;
  const int window_;
  std::string provider_;
  std::string broken_;

  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_av* av_ = nullptr;
  fid_ep* ep_ = nullptr;
  int cq_fd_ = -1;
  std::unique_ptr<FabricMrCache> mr_;

  std::vector<Op> send_ops_;
  std::vector<Op> recv_ops_;
  std::vector<fi_addr_t> addrs_;
  std::vector<uint64_t> send_seq_;  // chunks sent to each peer so far
  std::vector<uint64_t> recv_seq_;  // chunks received from each peer so far
  std::vector<char> send_bounce_, recv_bounce_;  // kBounceBytes each, registered on first use
};

}  // namespace

size_t fabric_registration_count(const Transport& t) {
  const auto* f = dynamic_cast<const FabricTransport*>(&t);
  return f ? f->registrations() : 0;
}

std::string fabric_provider_name(const Transport& t) {
  const auto* f = dynamic_cast<const FabricTransport*>(&t);
  return f ? f->provider() : "";
}

std::unique_ptr<Transport> connect_fabric_transport(Store& store, std::unique_ptr<Transport> inner,
                                                    const std::string& prefix, std::chrono::milliseconds timeout,
                                                    const FabricTransportOptions& options) {
  STRATA_CHECK(inner != nullptr, "connect_fabric_transport needs an inner transport");
  const int rank = inner->rank();
  const int world = inner->world_size();
  if (world > (1 << kRankBits)) {
    fail<ConfigError>("the fabric transport serves at most ", 1 << kRankBits, " ranks, not ", world);
  }
  const std::string hostname = options.hostname.empty() ? this_hostname() : options.hostname;
  auto t = std::make_unique<FabricTransport>(std::move(inner), hostname, timeout, options);
  const std::string self = t->self();
  const std::string provider = fabric_provider_choice(options.provider);
  // Software providers listen on the interface that reaches the master;
  // RDMA devices are found by their own names.
  FiInfoPtr info;
  if (provider != "verbs" && !options.advertise_host.empty()) info = find_fabric(provider, options.advertise_host);
  if (!info) info = find_fabric(provider, "");
  if (!info) {
    const std::string found = fabric_providers_found();
    if (provider == "verbs") {
      fail<ConfigError>(self, ": the rdma transport found no RDMA device: libfabric ", fabric_library_version(),
                        " has no 'verbs' provider with reliable tagged endpoints here (it found: ", found,
                        "). On an InfiniBand or RoCE machine check `ibv_devices` and that rdma-core (libibverbs "
                        "and the device's provider) is installed; to run over a software provider instead "
                        "(correct, not fast), set STRATA_FABRIC_PROVIDER=tcp; or use --dp-transport tcp");
    }
    fail<ConfigError>(self, ": libfabric ", fabric_library_version(), " has no provider '", provider,
                      "' with reliable tagged endpoints here (STRATA_FABRIC_PROVIDER; it found: ", found,
                      "); pick one of those");
  }
  const std::vector<uint8_t> name = t->open(info.get());
  const std::string mine = t->provider() + "|" + to_hex(name);
  store.set(prefix + "/addr/" + std::to_string(rank), mine);
  for (int p = 0; p < world; ++p) {
    if (p == rank) continue;
    const std::string key = prefix + "/addr/" + std::to_string(p);
    const std::string entry = store.get(key);
    const size_t bar = entry.find('|');
    std::vector<uint8_t> theirs;
    if (bar == std::string::npos || !from_hex(entry.substr(bar + 1), theirs) || theirs.empty()) {
      fail<NetworkError>(self, ": store key ", key, " holds '", entry, "', which is not a fabric endpoint address");
    }
    const std::string their_provider = entry.substr(0, bar);
    if (their_provider != t->provider()) {
      fail<ConfigError>(self, ": ", t->peer_name(p), " opened its fabric endpoint on provider '", their_provider,
                        "', this rank on '", t->provider(),
                        "'; every rank must use the same one (set STRATA_FABRIC_PROVIDER alike on every node)");
    }
    t->insert_address(p, theirs);
  }
  return t;
}

#else  // built without libfabric

size_t fabric_registration_count(const Transport&) { return 0; }
std::string fabric_provider_name(const Transport&) { return ""; }

std::unique_ptr<Transport> connect_fabric_transport(Store&, std::unique_ptr<Transport>, const std::string&,
                                                    std::chrono::milliseconds, const FabricTransportOptions&) {
  fail<ConfigError>("the rdma transport is not available: this strata was built without libfabric. Install it "
                    "(Debian/Ubuntu: apt-get install libfabric-dev, or tools/install_deps.sh), then re-run cmake "
                    "and rebuild; or use --dp-transport tcp, shm or auto");
}

#endif

}  // namespace strata::parallel
