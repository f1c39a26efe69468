// The store's TCP client: one connection per Store, used by every rank
// (rank 0 included) to reach the server in store_server.cpp.
//
// Waiting: a GET or CHECK request may carry an 8-byte little-endian value,
// the number of milliseconds the server may hold the request while the key
// is missing. The server parks it and answers as soon as a SET or ADD
// creates the key, or "not found" when that time is up; the client then
// decides whether its own deadline has passed. So no client polls, and a
// client whose deadline passes still has a connection in a known state.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "framework/error.h"
#include "parallel/socket/socket.h"
#include "parallel/rendezvous/store.h"
#include "framework/io/wire_format.h"
#include "parallel/rendezvous/store_protocol.h"

namespace strata::parallel {

namespace {

using namespace store_protocol;

// After asking the server to hold a request for T, the client waits T plus
// this for the answer before calling the server unresponsive.
constexpr auto kResponseSlack = std::chrono::seconds(10);

std::string this_host() {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) return "?";
  return host;
}

// ---- TCP client ----------------------------------------------------------------

struct Response {
  uint8_t status = kError;
  std::string value;
};

class TcpStore final : public Store {
 public:
  TcpStore(std::string host, int port, std::string token, int rank, std::chrono::milliseconds timeout)
      : host_(std::move(host)), port_(port), token_(std::move(token)), rank_(rank), timeout_(timeout) {
    host_name_ = this_host();
    who_ = "rank " + std::to_string(rank_) + " on " + host_name_;
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

  void report_failure(const std::string& what) override {
    const std::string text = what.size() > kMaxValueBytes ? what.substr(0, 4096) : what;
    std::lock_guard<std::mutex> lock(mu_);
    try {
      expect_ok(request_locked(kFail, host_name_, text, deadline_after(timeout_)), kFail, "");
    } catch (const JobFailedError&) {
      // Another failure was recorded first; it is the one every rank reports.
    }
  }

  void heartbeat(HeartbeatPhase phase, std::chrono::milliseconds limit) override {
    std::string value;
    const BeatPhase wire_phase = phase == HeartbeatPhase::kBeat            ? kBeat
                                 : phase == HeartbeatPhase::kBeatDroppable ? kBeatDroppable
                                                                           : kGoodbye;
    value.push_back(static_cast<char>(wire_phase));
    wire::put_u64(value, static_cast<uint64_t>(std::max<int64_t>(0, limit.count())));
    std::lock_guard<std::mutex> lock(mu_);
    expect_ok(request_locked(kHeartbeat, host_name_, value, deadline_after(timeout_)), kHeartbeat, "");
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
    wire::put_u32(hello, kVersion);
    wire::put_u32(hello, static_cast<uint32_t>(rank_));
    wire::put_u32(hello, static_cast<uint32_t>(token_.size()));
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
    if (wire::load_u32(reply + 4) != 0) {
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
    wire::put_u32(head, static_cast<uint32_t>(key.size()));
    head += key;
    wire::put_u64(head, value.size());
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
      const uint64_t len = wire::load_u64(rh + 1);
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
    if (r.status == kJobFailed) throw JobFailedError(who_ + ": the job failed: " + r.value);
    return r;
  }

  // GET or CHECK that the server holds until the key exists or the deadline
  // passes. Returns false on timeout; for GET, the value is in last_value_.
  bool wait_for_key_locked(uint8_t op, const std::string& key, Deadline deadline) {
    for (;;) {
      const int ms = remaining_ms(deadline);
      std::string wait;
      wire::put_u64(wait, static_cast<uint64_t>(ms));
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
  std::string who_, where_, host_name_;
  Socket sock_;
  std::string last_value_;
};

}  // namespace

std::unique_ptr<Store> connect_store(const std::string& host, int port, const std::string& token, int rank,
                                     std::chrono::milliseconds timeout) {
  return std::make_unique<TcpStore>(host, port, token, rank, timeout);
}

}  // namespace strata::parallel
