// The store's TCP server (rank 0): one thread polls every connection, serves
// requests from a map, and parks GET/CHECK requests for missing keys until a
// SET or ADD creates them or the time the client allowed is up (see the
// waiting protocol in store_client.cpp). The same thread watches the ranks'
// heartbeats and records the job's first failure (store.h).
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "framework/error.h"
#include "parallel/socket/socket.h"
#include "parallel/rendezvous/store.h"
#include "framework/io/wire_format.h"
#include "parallel/rendezvous/store_protocol.h"

namespace strata::parallel {

namespace {

using namespace store_protocol;

// A client that connects but never says hello is dropped after this long.
constexpr auto kHelloTimeout = std::chrono::seconds(30);
// While ranks send heartbeats the loop wakes at least this often.
constexpr auto kWatchTick = std::chrono::milliseconds(250);
// A loop round this much later than the tick means the server itself did not
// run (its process was stopped or the machine suspended): the silence it saw
// is its own, so the ranks' heartbeat clocks restart instead of failing them.
constexpr auto kServerStall = std::chrono::seconds(2);

std::string seconds_text(Clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", std::chrono::duration<double>(d).count());
  return buf;
}

// Constant-time comparison, so the token cannot be guessed byte by byte from timings.
bool same_token(const std::string& presented, const std::string& expected) {
  if (presented.size() != expected.size()) return false;
  unsigned diff = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    diff |= static_cast<unsigned char>(presented[i]) ^ static_cast<unsigned char>(expected[i]);
  }
  return diff == 0;
}

}  // namespace

// ---- TCP server -------------------------------------------------------------------

struct StoreServer::Impl {
  struct Conn {
    Socket sock;
    std::string host;
    int rank = -1;
    bool hello_done = false;
    bool dead = false;      // drop at the next sweep
    bool closing = false;   // drop once the output is flushed (refused hello)
    Deadline hello_deadline;
    std::string in;
    size_t in_off = 0;
    std::string out;
    size_t out_off = 0;
    // A parked GET/CHECK waiting for parked_key until parked_until.
    bool parked = false;
    uint8_t parked_op = 0;
    std::string parked_key;
    Deadline parked_until;
    int beat_rank = -1;  // the rank whose heartbeats come on this connection
  };

  // A rank that sends heartbeats: silent for longer than `limit`, or its
  // connection closed without a goodbye, fails the job, or with `droppable`
  // is recorded as lost.
  struct Beat {
    uint64_t conn = 0;
    std::string host;
    std::chrono::milliseconds limit{0};
    Deadline last;
    bool droppable = false;
  };

  Socket listener;
  std::string token;
  int wake[2] = {-1, -1};
  std::thread thread;
  std::map<std::string, std::string> data;  // written by the loop under data_mu, read by it without
  mutable std::mutex data_mu;                // peek() reads from another thread
  std::map<uint64_t, std::unique_ptr<Conn>> conns;
  std::multimap<std::string, uint64_t> waiters;
  uint64_t next_id = 1;
  std::map<int, Beat> beats;
  Deadline last_round = Clock::now();
  // The destructor's wait for the heartbeat ranks' goodbyes.
  std::atomic<bool> draining{false};
  Deadline drain_until = Deadline::max();   // written before draining is set
  std::atomic<int64_t> drain_limit_ms{0};   // the longest heartbeat limit seen
  mutable std::mutex failure_mu;  // failure is read by other threads (the launcher)
  std::optional<JobFailure> failure;
  std::string failure_message;    // the loop's own copy, read without the lock
  std::vector<JobFailure> lost;   // droppable ranks given up, under failure_mu
  std::set<int> lost_set;         // the loop's own copy of their ranks

  // A droppable rank went silent or away: the job goes on without it.
  void record_lost(int rank, JobFailureKind kind, const std::string& message) {
    beats.erase(rank);
    if (!lost_set.insert(rank).second) return;
    std::lock_guard<std::mutex> lock(failure_mu);
    lost.push_back(JobFailure{rank, kind, message});
  }

  // The job's first failure: every request held is answered with it, and so
  // is every request from now on.
  void record_failure(int rank, JobFailureKind kind, const std::string& message) {
    {
      std::lock_guard<std::mutex> lock(failure_mu);
      if (failure) return;
      failure = JobFailure{rank, kind, message};
    }
    failure_message = message;
    beats.erase(rank);  // the failed rank will not hear of it; no need to wait for it
    std::vector<uint64_t> held;
    for (auto& [id, cp] : conns) {
      if (cp->parked && !cp->dead) held.push_back(id);
    }
    for (uint64_t id : held) {
      Conn& c = *conns.at(id);
      unpark(id, c);
      respond(c, kJobFailed, failure_message);
      process_input(id, c);
    }
  }

  bool failed() const { return !failure_message.empty(); }

  void forget_beat(uint64_t id, Conn& c) {
    auto it = beats.find(c.rank);
    if (it != beats.end() && it->second.conn == id) beats.erase(it);
    c.beat_rank = -1;
  }

  void handle_heartbeat(uint64_t id, Conn& c, const std::string& host, const std::string& value) {
    if (value.size() != 9 || c.rank < 0) {
      respond(c, kError, "HEARTBEAT: malformed request");
      return;
    }
    const uint8_t phase = static_cast<uint8_t>(value[0]);
    const auto limit = std::chrono::milliseconds(std::min<uint64_t>(wire::load_u64(value.data() + 1), INT32_MAX));
    if (phase != kBeat && phase != kGoodbye && phase != kBeatDroppable) {
      respond(c, kError, "HEARTBEAT: unknown phase " + std::to_string(phase));
      return;
    }
    if (lost_set.count(c.rank)) {
      // Given up while it was silent: it must not rejoin a job that went on without it.
      forget_beat(id, c);
      respond(c, kJobFailed, "rank " + std::to_string(c.rank) + " was dropped from the job after it went silent; "
                             "the others went on without it");
      return;
    }
    if (phase == kGoodbye || limit.count() == 0) {
      forget_beat(id, c);
    } else {
      Beat& b = beats[c.rank];
      b.conn = id;
      b.host = host;
      b.limit = limit;
      b.last = Clock::now();
      b.droppable = phase == kBeatDroppable;
      c.beat_rank = c.rank;
      if (limit.count() > drain_limit_ms.load()) drain_limit_ms.store(limit.count());
    }
    respond(c, kOk, "");
  }

  // Heartbeats that stopped coming.
  void check_beats(const Deadline now) {
    if (now - last_round > kServerStall) {
      for (auto& [rank, b] : beats) b.last = now;
    }
    last_round = now;
    if (failed()) return;
    for (const auto& [rank, b] : beats) {
      if (now - b.last <= b.limit) continue;
      const std::string message = "rank " + std::to_string(rank) + " on " + b.host + " sent no heartbeat for " +
                                  seconds_text(now - b.last) + " (the limit, STRATA_HEARTBEAT_TIMEOUT_S, is " +
                                  seconds_text(b.limit) + "): it is stopped (SIGSTOP, Ctrl-Z, a debugger) or hung";
      // Either erases from beats: leave the loop.
      if (b.droppable) {
        record_lost(rank, JobFailureKind::kSilent, message);
      } else {
        record_failure(rank, JobFailureKind::kSilent, message);
      }
      return;
    }
  }

  std::string describe(const Conn& c) const {
    return c.rank >= 0 ? c.host + " (rank " + std::to_string(c.rank) + ")" : c.host;
  }

  void drop(Conn& c, const std::string& why) {
    std::fprintf(stderr, "store: dropped connection from %s: %s\n", describe(c).c_str(), why.c_str());
    c.dead = true;
  }

  void respond(Conn& c, uint8_t status, const std::string& value) {
    c.out.push_back(static_cast<char>(status));
    wire::put_u64(c.out, value.size());
    c.out += value;
  }

  void unpark(uint64_t id, Conn& c) {
    auto range = waiters.equal_range(c.parked_key);
    for (auto it = range.first; it != range.second; ++it) {
      if (it->second == id) {
        waiters.erase(it);
        break;
      }
    }
    c.parked = false;
    c.parked_key.clear();
  }

  // A key was created or changed: answer the requests parked on it.
  void wake_waiters(const std::string& key) {
    std::vector<uint64_t> ids;
    auto range = waiters.equal_range(key);
    for (auto it = range.first; it != range.second; ++it) ids.push_back(it->second);
    waiters.erase(range.first, range.second);
    for (uint64_t id : ids) {
      auto it = conns.find(id);
      if (it == conns.end()) continue;
      Conn& c = *it->second;
      c.parked = false;
      c.parked_key.clear();
      respond(c, kOk, c.parked_op == kGet ? data.at(key) : std::string());
      process_input(id, c);
    }
  }

  void handle_request(uint64_t id, Conn& c, uint8_t op, const std::string& key, const std::string& value) {
    if (op == kFail && !failed()) {
      record_failure(c.rank, JobFailureKind::kReported,
                     "rank " + std::to_string(c.rank) + " on " + key + " failed: " + value);
      respond(c, kOk, "");
      return;
    }
    if (failed()) {
      // This rank has heard of the failure now: nothing more to wait for from it.
      if (op == kHeartbeat) forget_beat(id, c);
      respond(c, kJobFailed, failure_message);
      return;
    }
    switch (op) {
      case kHeartbeat:
        handle_heartbeat(id, c, key, value);
        return;
      case kSet: {
        {
          std::lock_guard<std::mutex> lock(data_mu);
          data[key] = value;
        }
        respond(c, kOk, "");
        wake_waiters(key);
        return;
      }
      case kGet:
      case kCheck: {
        auto it = data.find(key);
        if (it != data.end()) {
          respond(c, kOk, op == kGet ? it->second : std::string());
          return;
        }
        const uint64_t wait_ms = value.size() == 8 ? wire::load_u64(value.data()) : 0;
        if (wait_ms == 0) {
          respond(c, kNotFound, "");
          return;
        }
        c.parked = true;
        c.parked_op = op;
        c.parked_key = key;
        c.parked_until = deadline_after(std::chrono::milliseconds(std::min<uint64_t>(wait_ms, INT64_MAX / 2)));
        waiters.emplace(key, id);
        return;
      }
      case kAdd: {
        int64_t delta = 0;
        if (!parse_int64(value, &delta)) {
          respond(c, kError, "ADD '" + key + "': the delta is not an integer");
          return;
        }
        auto it = data.find(key);
        std::string result;
        if (!add_to(it == data.end() ? nullptr : &it->second, key, delta, &result)) {
          respond(c, kError, result);
          return;
        }
        {
          std::lock_guard<std::mutex> lock(data_mu);
          data[key] = result;
        }
        respond(c, kOk, result);
        wake_waiters(key);
        return;
      }
      case kDelete: {
        size_t erased = 0;
        {
          std::lock_guard<std::mutex> lock(data_mu);
          erased = data.erase(key);
        }
        respond(c, erased ? kOk : kNotFound, "");
        return;
      }
      default:
        respond(c, kError, "unknown store operation " + std::to_string(op));
        return;
    }
  }

  // Parses and serves as many complete messages as the input buffer holds.
  // Sizes are checked from the headers before the bodies are awaited.
  void process_input(uint64_t id, Conn& c) {
    while (!c.dead && !c.closing && !c.parked) {
      const char* p = c.in.data() + c.in_off;
      const size_t avail = c.in.size() - c.in_off;
      if (!c.hello_done) {
        if (avail < 16) break;
        if (std::memcmp(p, kMagic, 4) != 0) {
          std::fprintf(stderr, "store: refused connection from %s: not a strata store client\n", c.host.c_str());
          c.dead = true;
          return;
        }
        const uint32_t version = wire::load_u32(p + 4);
        const uint32_t rank = wire::load_u32(p + 8);
        const uint32_t token_len = wire::load_u32(p + 12);
        if (token_len > kMaxTokenBytes) {
          std::fprintf(stderr, "store: refused connection from %s: token of %u bytes is over the %zu-byte limit\n",
                       c.host.c_str(), token_len, kMaxTokenBytes);
          c.dead = true;
          return;
        }
        if (avail < 16 + token_len) break;
        const std::string presented(p + 16, token_len);
        c.in_off += 16 + token_len;
        std::string reply(kMagic, 4);
        if (version != kVersion) {
          std::fprintf(stderr, "store: refused connection from %s: protocol version %u (this server speaks %u)\n",
                       c.host.c_str(), version, kVersion);
          wire::put_u32(reply, 1);
          c.closing = true;
        } else if (!same_token(presented, token)) {
          std::fprintf(stderr, "store: refused connection from %s: bad token\n", c.host.c_str());
          wire::put_u32(reply, 1);
          c.closing = true;
          // A strata client of this protocol version: one of this job's
          // ranks, started with another STRATA_TOKEN. The job cannot
          // complete without it, so every rank hears of it now.
          record_failure(static_cast<int>(rank), JobFailureKind::kWrongToken,
                         "rank " + std::to_string(rank) + " on " + c.host + " presented a wrong STRATA_TOKEN and "
                         "was refused by the store: every rank of a job must have the same STRATA_TOKEN (with "
                         "several nodes, export the same value on every node)");
        } else {
          wire::put_u32(reply, 0);
          c.hello_done = true;
          c.rank = static_cast<int>(rank);
        }
        c.out += reply;
        continue;
      }
      if (avail < 5) break;
      const uint8_t op = static_cast<uint8_t>(p[0]);
      const uint32_t key_len = wire::load_u32(p + 1);
      if (key_len > kMaxKeyBytes) {
        drop(c, "key of " + std::to_string(key_len) + " bytes exceeds the " + std::to_string(kMaxKeyBytes) +
                    "-byte limit");
        return;
      }
      if (avail < 5 + key_len + 8) break;
      const uint64_t value_len = wire::load_u64(p + 5 + key_len);
      if (value_len > kMaxValueBytes) {
        drop(c, "value of " + std::to_string(value_len) + " bytes exceeds the " + std::to_string(kMaxValueBytes) +
                    "-byte (256 MiB) limit");
        return;
      }
      const size_t total = 5 + key_len + 8 + value_len;
      if (avail < total) {
        c.in.reserve(c.in_off + total);  // safe: the size was checked above
        break;
      }
      const std::string key(p + 5, key_len);
      const std::string value(p + 5 + key_len + 8, value_len);
      c.in_off += total;
      handle_request(id, c, op, key, value);
    }
    // Compact consumed input so the buffer does not grow without bound.
    if (c.in_off > 0 && (c.in_off == c.in.size() || c.in_off > (1u << 20))) {
      c.in.erase(0, c.in_off);
      c.in_off = 0;
    }
  }

  void accept_all() {
    for (;;) {
      const int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          std::fprintf(stderr, "store: accept failed: %s\n", std::strerror(errno));
        }
        return;
      }
      set_nodelay(fd);
      auto c = std::make_unique<Conn>();
      c->host = peer_host(fd);
      c->sock = Socket(fd, peer_address(fd));
      c->hello_deadline = deadline_after(kHelloTimeout);
      conns.emplace(next_id++, std::move(c));
    }
  }

  void read_from(uint64_t id, Conn& c) {
    char buf[64 << 10];
    // Bounded per round so one fast sender cannot starve the others.
    for (int round = 0; round < 16; ++round) {
      const ssize_t n = ::recv(c.sock.fd(), buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0) {
        c.in.append(buf, static_cast<size_t>(n));
        process_input(id, c);
        if (c.dead) return;
        continue;
      }
      if (n == 0) {
        c.dead = true;  // the client hung up; normal at the end of a run
        return;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      drop(c, std::string("receive failed: ") + std::strerror(errno));
      return;
    }
  }

  void write_to(Conn& c) {
    while (c.out_off < c.out.size()) {
      const ssize_t n =
          ::send(c.sock.fd(), c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        c.out_off += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      c.dead = true;  // the client went away mid-response
      return;
    }
    c.out.clear();
    c.out_off = 0;
    if (c.closing) c.dead = true;
  }

  void expire(const Deadline now) {
    for (auto& [id, cp] : conns) {
      Conn& c = *cp;
      if (c.dead) continue;
      if (!c.hello_done && !c.closing && now >= c.hello_deadline) {
        drop(c, "no hello within 30 s");
        continue;
      }
      if (c.parked && now >= c.parked_until) {
        unpark(id, c);
        respond(c, kNotFound, "");
        process_input(id, c);
      }
    }
  }

  void sweep() {
    std::vector<std::pair<int, Beat>> lost_beats;
    for (auto it = conns.begin(); it != conns.end();) {
      if (it->second->dead) {
        Conn& c = *it->second;
        if (c.parked) unpark(it->first, c);
        auto b = c.beat_rank >= 0 ? beats.find(c.beat_rank) : beats.end();
        if (b != beats.end() && b->second.conn == it->first) {
          lost_beats.emplace_back(b->first, b->second);
          beats.erase(b);
        }
        it = conns.erase(it);
      } else {
        ++it;
      }
    }
    for (const auto& [rank, b] : lost_beats) {
      const std::string message = "rank " + std::to_string(rank) + " on " + b.host +
                                  " closed its connection to the store without finishing: its process exited or "
                                  "was killed";
      if (b.droppable) {
        record_lost(rank, JobFailureKind::kConnectionLost, message);
      } else {
        record_failure(rank, JobFailureKind::kConnectionLost, message);
      }
    }
  }

  void loop() {
    std::vector<pollfd> fds;
    std::vector<uint64_t> ids;
    for (;;) {
      if (draining.load() && (beats.empty() || Clock::now() >= drain_until)) return;
      fds.clear();
      ids.clear();
      fds.push_back({wake[0], POLLIN, 0});
      fds.push_back({listener.fd(), POLLIN, 0});
      Deadline next = Deadline::max();
      for (auto& [id, cp] : conns) {
        Conn& c = *cp;
        short events = POLLIN;
        if (c.out_off < c.out.size()) events |= POLLOUT;
        fds.push_back({c.sock.fd(), events, 0});
        ids.push_back(id);
        if (c.parked) next = std::min(next, c.parked_until);
        if (!c.hello_done) next = std::min(next, c.hello_deadline);
      }
      if (!beats.empty()) next = std::min(next, deadline_after(kWatchTick));
      if (draining.load()) next = std::min(next, drain_until);
      const int timeout = next == Deadline::max() ? -1 : std::max(1, remaining_ms(next));
      const int r = ::poll(fds.data(), fds.size(), timeout);
      if (r < 0) {
        if (errno == EINTR) continue;
        std::fprintf(stderr, "store: server stopped: poll failed: %s\n", std::strerror(errno));
        return;
      }
      if (fds[0].revents) {
        char b[64];
        while (::read(wake[0], b, sizeof(b)) > 0) {
        }
      }
      if (fds[1].revents & POLLIN) accept_all();
      for (size_t i = 0; i < ids.size(); ++i) {
        const short re = fds[i + 2].revents;
        if (!re) continue;
        auto it = conns.find(ids[i]);
        if (it == conns.end() || it->second->dead) continue;
        Conn& c = *it->second;
        if (re & (POLLIN | POLLHUP | POLLERR)) read_from(ids[i], c);
        if (!c.dead && (re & POLLOUT)) write_to(c);
      }
      expire(Clock::now());
      check_beats(Clock::now());
      // Answers produced while serving other connections go out now rather
      // than after the next poll round.
      for (auto& [id, cp] : conns) {
        if (!cp->dead && cp->out_off < cp->out.size()) write_to(*cp);
      }
      sweep();
    }
  }
};

StoreServer::StoreServer(const std::string& bind_host, int port, std::string token)
    : impl_(std::make_unique<Impl>()) {
  if (token.empty()) fail<ConfigError>("store server: the token is empty; set STRATA_TOKEN");
  impl_->token = std::move(token);
  impl_->listener = listen_tcp(bind_host, port);
  set_nonblocking(impl_->listener.fd());
  if (::pipe2(impl_->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    fail<NetworkError>("store server: pipe failed: ", std::strerror(errno));
  }
  Impl* impl = impl_.get();
  impl_->thread = std::thread([impl] {
    try {
      impl->loop();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "store: server stopped: %s\n", e.what());
    }
  });
}

StoreServer::~StoreServer() {
  // Ranks still sending heartbeats finish, or learn of the failure, before the
  // store goes: the loop ends once every one of them has said goodbye (or its
  // connection closed), or after the longest limit any of them asked for.
  impl_->drain_until =
      deadline_after(std::chrono::milliseconds(impl_->drain_limit_ms.load()) + std::chrono::seconds(1));
  impl_->draining.store(true);
  const char b = 1;
  [[maybe_unused]] ssize_t n = ::write(impl_->wake[1], &b, 1);
  if (impl_->thread.joinable()) impl_->thread.join();
  ::close(impl_->wake[0]);
  ::close(impl_->wake[1]);
}

int StoreServer::port() const { return local_port(impl_->listener); }

std::optional<JobFailure> StoreServer::failure() const {
  std::lock_guard<std::mutex> lock(impl_->failure_mu);
  return impl_->failure;
}

std::vector<JobFailure> StoreServer::lost_ranks() const {
  std::lock_guard<std::mutex> lock(impl_->failure_mu);
  return impl_->lost;
}

std::optional<std::string> StoreServer::peek(const std::string& key) const {
  std::lock_guard<std::mutex> lock(impl_->data_mu);
  auto it = impl_->data.find(key);
  if (it == impl_->data.end()) return std::nullopt;
  return it->second;
}

}  // namespace strata::parallel
