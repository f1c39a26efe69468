// The rendezvous store: an in-process map for threads, and the TCP server
// (rank 0) and client (every rank) speaking the protocol in store.h.
//
// Waiting: a GET or CHECK request may carry an 8-byte little-endian value,
// the number of milliseconds the server may hold the request while the key
// is missing. The server parks it and answers as soon as a SET or ADD
// creates the key, or "not found" when that time is up; the client then
// decides whether its own deadline has passed. So no client polls, and a
// client whose deadline passes still has a connection in a known state.
#include "parallel/store.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "framework/error.h"
#include "parallel/socket.h"

namespace strata::parallel {

namespace {

constexpr char kMagic[4] = {'S', 'T', 'R', 'S'};
constexpr uint32_t kVersion = 1;
constexpr size_t kMaxKeyBytes = 4096;
constexpr size_t kMaxTokenBytes = 4096;
constexpr uint64_t kMaxValueBytes = 256ull << 20;
// A client that connects but never says hello is dropped after this long.
constexpr auto kHelloTimeout = std::chrono::seconds(30);
// After asking the server to hold a request for T, the client waits T plus
// this for the answer before calling the server unresponsive.
constexpr auto kResponseSlack = std::chrono::seconds(10);

enum Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kCheck = 4, kDelete = 5 };
enum Status : uint8_t { kOk = 0, kNotFound = 1, kError = 2 };

const char* op_name(uint8_t op) {
  switch (op) {
    case kSet: return "SET";
    case kGet: return "GET";
    case kAdd: return "ADD";
    case kCheck: return "CHECK";
    case kDelete: return "DELETE";
    default: return "unknown operation";
  }
}

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}
uint64_t get_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

bool parse_int64(const std::string& s, int64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

// ADD on a stored value: the new value, or an error message.
bool add_to(const std::string* current, const std::string& key, int64_t delta, std::string* result) {
  int64_t base = 0;
  if (current && !parse_int64(*current, &base)) {
    *result = "ADD '" + key + "': the stored value is not an integer";
    return false;
  }
  *result = std::to_string(base + delta);
  return true;
}

void check_sizes(const std::string& key, size_t value_bytes) {
  if (key.size() > kMaxKeyBytes) {
    fail<ConfigError>("store key '", key.substr(0, 64), "...' is ", key.size(), " bytes; keys are limited to ",
                      kMaxKeyBytes);
  }
  if (value_bytes > kMaxValueBytes) {
    fail<ConfigError>("store value for key '", key, "' is ", value_bytes, " bytes; values are limited to ",
                      kMaxValueBytes, " (256 MiB)");
  }
}

// "'a', 'b' and 3 more": the first few keys of a long list.
std::string list_keys(const std::vector<std::string>& keys) {
  constexpr size_t kShown = 10;
  std::string s;
  for (size_t i = 0; i < keys.size() && i < kShown; ++i) {
    if (i) s += ", ";
    s += "'" + keys[i] + "'";
  }
  if (keys.size() > kShown) s += " and " + std::to_string(keys.size() - kShown) + " more";
  return s;
}

std::string this_host() {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) return "?";
  return host;
}

// ---- in-process store ---------------------------------------------------------

class MemoryStore final : public Store {
 public:
  explicit MemoryStore(std::chrono::milliseconds timeout) : timeout_(timeout) {}

  void set(const std::string& key, const std::string& value) override {
    check_sizes(key, value.size());
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] = value;
    cv_.notify_all();
  }

  std::string get(const std::string& key) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!wait_locked(lock, [&] { return data_.count(key) > 0; })) {
      throw TimeoutError("timed out after " + format_duration(timeout_) + " waiting for key '" + key +
                         "' in the in-process store");
    }
    return data_.at(key);
  }

  int64_t add(const std::string& key, int64_t delta) override {
    check_sizes(key, 0);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(key);
    std::string result;
    if (!add_to(it == data_.end() ? nullptr : &it->second, key, delta, &result)) fail<Error>(result);
    data_[key] = result;
    cv_.notify_all();
    return std::stoll(result);
  }

  bool check(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    return data_.count(key) > 0;
  }

  void wait(const std::vector<std::string>& keys) override {
    std::unique_lock<std::mutex> lock(mu_);
    auto all_present = [&] {
      for (const auto& k : keys) {
        if (!data_.count(k)) return false;
      }
      return true;
    };
    if (wait_locked(lock, all_present)) return;
    std::vector<std::string> missing;
    for (const auto& k : keys) {
      if (!data_.count(k)) missing.push_back(k);
    }
    throw TimeoutError("timed out after " + format_duration(timeout_) + " waiting for " +
                       std::to_string(missing.size()) + " of " + std::to_string(keys.size()) +
                       " keys in the in-process store; missing " + list_keys(missing));
  }

  void set_timeout(std::chrono::milliseconds timeout) override {
    std::lock_guard<std::mutex> lock(mu_);
    timeout_ = timeout;
  }

 private:
  template <typename Pred>
  bool wait_locked(std::unique_lock<std::mutex>& lock, Pred pred) {
    const Deadline deadline = deadline_after(timeout_);
    // wait_until with time_point::max() overflows inside some libstdc++ versions.
    if (deadline == Deadline::max()) {
      cv_.wait(lock, pred);
      return true;
    }
    return cv_.wait_until(lock, deadline, pred);
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> data_;
  std::chrono::milliseconds timeout_;
};

// ---- TCP client ----------------------------------------------------------------

struct Response {
  uint8_t status = kError;
  std::string value;
};

class TcpStore final : public Store {
 public:
  TcpStore(std::string host, int port, std::string token, int rank, std::chrono::milliseconds timeout)
      : host_(std::move(host)), port_(port), token_(std::move(token)), rank_(rank), timeout_(timeout) {
    who_ = "rank " + std::to_string(rank_) + " on " + this_host();
    where_ = "the store at " + host_ + ":" + std::to_string(port_);
    std::lock_guard<std::mutex> lock(mu_);
    connect_locked(deadline_after(timeout_));
  }

  void set(const std::string& key, const std::string& value) override {
    check_sizes(key, value.size());
    std::lock_guard<std::mutex> lock(mu_);
    const Response r = request_locked(kSet, key, value, deadline_after(timeout_));
    expect_ok(r, kSet, key);
  }

  std::string get(const std::string& key) override {
    check_sizes(key, 0);
    std::lock_guard<std::mutex> lock(mu_);
    const Deadline deadline = deadline_after(timeout_);
    if (!wait_for_key_locked(kGet, key, deadline)) {
      throw TimeoutError(who_ + ": timed out after " + format_duration(timeout_) + " waiting for key '" + key +
                         "' in " + where_);
    }
    return last_value_;
  }

  int64_t add(const std::string& key, int64_t delta) override {
    check_sizes(key, 0);
    std::lock_guard<std::mutex> lock(mu_);
    const Response r = request_locked(kAdd, key, std::to_string(delta), deadline_after(timeout_));
    expect_ok(r, kAdd, key);
    int64_t v = 0;
    if (!parse_int64(r.value, &v)) fail<NetworkError>(who_, ": ", where_, " answered ADD with a non-integer");
    return v;
  }

  bool check(const std::string& key) override {
    check_sizes(key, 0);
    std::lock_guard<std::mutex> lock(mu_);
    const Response r = request_locked(kCheck, key, "", deadline_after(timeout_));
    if (r.status == kNotFound) return false;
    expect_ok(r, kCheck, key);
    return true;
  }

  void wait(const std::vector<std::string>& keys) override {
    for (const auto& k : keys) check_sizes(k, 0);
    std::lock_guard<std::mutex> lock(mu_);
    const Deadline deadline = deadline_after(timeout_);
    for (const auto& k : keys) {
      if (wait_for_key_locked(kCheck, k, deadline)) continue;
      // Time is up: find every key still missing, for the message.
      std::vector<std::string> missing;
      const Deadline quick = deadline_after(std::chrono::seconds(10) + timeout_ / 10);
      for (const auto& m : keys) {
        if (request_locked(kCheck, m, "", quick).status == kNotFound) missing.push_back(m);
      }
      if (missing.empty()) return;  // they all arrived just now
      throw TimeoutError(who_ + ": timed out after " + format_duration(timeout_) + " waiting for " +
                         std::to_string(missing.size()) + " of " + std::to_string(keys.size()) + " keys in " +
                         where_ + "; missing " + list_keys(missing));
    }
  }

  void set_timeout(std::chrono::milliseconds timeout) override {
    std::lock_guard<std::mutex> lock(mu_);
    timeout_ = timeout;
  }

 private:
  void connect_locked(Deadline deadline) {
    try {
      sock_ = connect_tcp(host_, port_, deadline);
    } catch (const TimeoutError& e) {
      throw TimeoutError(who_ + ": cannot reach " + where_ + " (served by rank 0; is it running?): " + e.what());
    } catch (const NetworkError& e) {
      throw NetworkError(who_ + ": cannot reach " + where_ + ": " + e.what());
    }
    std::string hello(kMagic, 4);
    put_u32(hello, kVersion);
    put_u32(hello, static_cast<uint32_t>(rank_));
    put_u32(hello, static_cast<uint32_t>(token_.size()));
    hello += token_;
    char reply[8];
    try {
      send_all(sock_, hello.data(), hello.size(), deadline, "store hello");
      recv_all(sock_, reply, sizeof(reply), deadline, "store hello");
    } catch (const NetworkError& e) {
      sock_.close();
      // A server that refuses closes the connection, possibly before the reply arrives.
      throw NetworkError(who_ + ": " + where_ + " did not accept the connection: " + e.what() +
                         " (check that STRATA_TOKEN is the same on every rank)");
    }
    if (std::memcmp(reply, kMagic, 4) != 0) {
      sock_.close();
      fail<NetworkError>(who_, ": ", where_, " is not a strata store (wrong greeting); check STRATA_MASTER");
    }
    if (get_u32(reply + 4) != 0) {
      sock_.close();
      fail<NetworkError>(who_, ": ", where_, " refused the connection: bad token (STRATA_TOKEN must be the "
                         "same on every rank) or a different strata version");
    }
  }

  // Sends one request and reads its response. Any transport error leaves
  // the connection in an unknown state, so it is closed and the next request
  // reconnects.
  Response request_locked(uint8_t op, const std::string& key, const std::string& value, Deadline deadline) {
    if (!sock_.valid()) connect_locked(deadline_after(timeout_));
    std::string head;
    head.reserve(13 + key.size() + value.size());
    head.push_back(static_cast<char>(op));
    put_u32(head, static_cast<uint32_t>(key.size()));
    head += key;
    put_u64(head, value.size());
    Response r;
    try {
      if (value.size() <= (64u << 10)) {
        head += value;
        send_all(sock_, head.data(), head.size(), deadline, "store request");
      } else {
        send_all(sock_, head.data(), head.size(), deadline, "store request");
        send_all(sock_, value.data(), value.size(), deadline, "store request");
      }
      char rh[9];
      recv_all(sock_, rh, sizeof(rh), deadline, "store response");
      r.status = static_cast<uint8_t>(rh[0]);
      const uint64_t len = get_u64(rh + 1);
      if (len > kMaxValueBytes) {
        fail<NetworkError>("store response from ", sock_.peer(), ": value of ", len, " bytes is over the limit");
      }
      r.value.resize(len);
      recv_all(sock_, r.value.data(), len, deadline, "store response");
    } catch (const TimeoutError& e) {
      sock_.close();
      throw TimeoutError(who_ + ": " + op_name(op) + " '" + key + "' in " + where_ +
                         " got no answer: " + e.what());
    } catch (const NetworkError& e) {
      sock_.close();
      throw NetworkError(who_ + ": " + op_name(op) + " '" + key + "' in " + where_ + " failed: " + e.what() +
                         " (rank 0, which serves the store, may have exited)");
    }
    return r;
  }

  // GET or CHECK that the server holds until the key exists or the deadline
  // passes. Returns false on timeout; for GET, the value is in last_value_.
  bool wait_for_key_locked(uint8_t op, const std::string& key, Deadline deadline) {
    for (;;) {
      const int ms = remaining_ms(deadline);
      std::string wait;
      put_u64(wait, static_cast<uint64_t>(ms));
      const Deadline io = ms >= INT32_MAX - 20000 ? Deadline::max() : deadline + kResponseSlack;
      Response r = request_locked(op, key, wait, io);
      if (r.status == kOk) {
        last_value_ = std::move(r.value);
        return true;
      }
      if (r.status != kNotFound) expect_ok(r, op, key);
      if (Clock::now() >= deadline) return false;
    }
  }

  void expect_ok(const Response& r, uint8_t op, const std::string& key) const {
    if (r.status == kOk) return;
    if (r.status == kNotFound) fail<Error>(who_, ": ", op_name(op), " '", key, "': not found in ", where_);
    fail<Error>(who_, ": ", op_name(op), " '", key, "' in ", where_, " failed: ", r.value);
  }

  std::mutex mu_;
  std::string host_;
  int port_;
  std::string token_;
  int rank_;
  std::chrono::milliseconds timeout_;
  std::string who_, where_;
  Socket sock_;
  std::string last_value_;
};

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

// ---- barrier --------------------------------------------------------------------

void store_barrier(Store& store, const std::string& name, int rank, int world_size) {
  STRATA_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "rank ", rank, " of ", world_size);
  store.set(name + "/" + std::to_string(rank), "1");
  std::vector<std::string> keys;
  keys.reserve(world_size);
  for (int r = 0; r < world_size; ++r) keys.push_back(name + "/" + std::to_string(r));
  try {
    store.wait(keys);
  } catch (const TimeoutError& e) {
    std::vector<int> missing;
    for (int r = 0; r < world_size; ++r) {
      if (!store.check(keys[r])) missing.push_back(r);
    }
    if (missing.empty()) return;
    std::string ranks;
    constexpr size_t kShown = 32;
    for (size_t i = 0; i < missing.size() && i < kShown; ++i) ranks += (i ? ", " : "") + std::to_string(missing[i]);
    if (missing.size() > kShown) ranks += " and " + std::to_string(missing.size() - kShown) + " more";
    const bool one = missing.size() == 1;
    throw TimeoutError("barrier '" + name + "' (rank " + std::to_string(rank) + " of " + std::to_string(world_size) +
                       "): " + std::to_string(missing.size()) + (one ? " rank" : " ranks") +
                       " did not arrive: " + (one ? "rank " : "ranks ") + ranks + " (" + e.what() + ")");
  }
}

std::shared_ptr<Store> make_memory_store(std::chrono::milliseconds timeout) {
  return std::make_shared<MemoryStore>(timeout);
}

std::unique_ptr<Store> connect_store(const std::string& host, int port, const std::string& token, int rank,
                                     std::chrono::milliseconds timeout) {
  return std::make_unique<TcpStore>(host, port, token, rank, timeout);
}

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
  };

  Socket listener;
  std::string token;
  int wake[2] = {-1, -1};
  std::atomic<bool> stop{false};
  std::thread thread;
  std::map<std::string, std::string> data;
  std::map<uint64_t, std::unique_ptr<Conn>> conns;
  std::multimap<std::string, uint64_t> waiters;
  uint64_t next_id = 1;

  std::string describe(const Conn& c) const {
    return c.rank >= 0 ? c.host + " (rank " + std::to_string(c.rank) + ")" : c.host;
  }

  void drop(Conn& c, const std::string& why) {
    std::fprintf(stderr, "store: dropped connection from %s: %s\n", describe(c).c_str(), why.c_str());
    c.dead = true;
  }

  void respond(Conn& c, uint8_t status, const std::string& value) {
    c.out.push_back(static_cast<char>(status));
    put_u64(c.out, value.size());
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
    switch (op) {
      case kSet:
        data[key] = value;
        respond(c, kOk, "");
        wake_waiters(key);
        return;
      case kGet:
      case kCheck: {
        auto it = data.find(key);
        if (it != data.end()) {
          respond(c, kOk, op == kGet ? it->second : std::string());
          return;
        }
        const uint64_t wait_ms = value.size() == 8 ? get_u64(value.data()) : 0;
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
        data[key] = result;
        respond(c, kOk, result);
        wake_waiters(key);
        return;
      }
      case kDelete:
        respond(c, data.erase(key) ? kOk : kNotFound, "");
        return;
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
        const uint32_t version = get_u32(p + 4);
        const uint32_t rank = get_u32(p + 8);
        const uint32_t token_len = get_u32(p + 12);
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
          put_u32(reply, 1);
          c.closing = true;
        } else if (!same_token(presented, token)) {
          std::fprintf(stderr, "store: refused connection from %s: bad token\n", c.host.c_str());
          put_u32(reply, 1);
          c.closing = true;
        } else {
          put_u32(reply, 0);
          c.hello_done = true;
          c.rank = static_cast<int>(rank);
        }
        c.out += reply;
        continue;
      }
      if (avail < 5) break;
      const uint8_t op = static_cast<uint8_t>(p[0]);
      const uint32_t key_len = get_u32(p + 1);
      if (key_len > kMaxKeyBytes) {
        drop(c, "key of " + std::to_string(key_len) + " bytes exceeds the " + std::to_string(kMaxKeyBytes) +
                    "-byte limit");
        return;
      }
      if (avail < 5 + key_len + 8) break;
      const uint64_t value_len = get_u64(p + 5 + key_len);
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
    for (auto it = conns.begin(); it != conns.end();) {
      if (it->second->dead) {
        if (it->second->parked) unpark(it->first, *it->second);
        it = conns.erase(it);
      } else {
        ++it;
      }
    }
  }

  void loop() {
    std::vector<pollfd> fds;
    std::vector<uint64_t> ids;
    while (!stop.load()) {
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
      if (stop.load()) return;
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
  impl_->stop.store(true);
  const char b = 1;
  [[maybe_unused]] ssize_t n = ::write(impl_->wake[1], &b, 1);
  if (impl_->thread.joinable()) impl_->thread.join();
  ::close(impl_->wake[0]);
  ::close(impl_->wake[1]);
}

int StoreServer::port() const { return local_port(impl_->listener); }

}  // namespace strata::parallel
