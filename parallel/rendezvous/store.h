// The rendezvous key-value store: rank 0 serves it over TCP, every rank
// (rank 0 included) is a client. Used to exchange addresses and ids, and for
// barriers. Every wait has a timeout whose message names what did not arrive.
//
// Wire protocol (all integers little-endian), one request/response at a time
// per connection:
//   client hello:  "STRS" u32 version, u32 rank, u32 token_len, token bytes
//   server hello:  "STRS" u32 status (0 ok, 1 refused)
//   request:       u8 op (SET=1 GET=2 ADD=3 CHECK=4 DELETE=5 HEARTBEAT=6 FAIL=7),
//                  u32 key_len, key, u64 value_len, value   (sizes checked before reading)
//   response:      u8 status (0 ok, 1 not found, 2 error, 3 job failed), u64 value_len, value
//
// Job failure: the server records the first failure of the job (a rank's
// FAIL report, a rank whose heartbeats stop, a heartbeat connection that
// closes without a goodbye, a client presenting a wrong token) and from then
// on answers every request, and every request it holds, with "job failed"
// and the message naming that rank: so one failure ends every rank at once
// instead of leaving the others waiting for their timeout.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "framework/error.h"

namespace strata::parallel {

// Another rank of the job failed (or went silent) and the store says so; the
// message names that rank, its host and what happened.
class JobFailedError : public Error {
 public:
  using Error::Error;
};

// How the store learnt of a failure.
enum class JobFailureKind {
  kReported,        // the rank reported its own error (FAIL)
  kSilent,          // no heartbeat within the rank's limit: stopped or hung
  kConnectionLost,  // its heartbeat connection closed without a goodbye: it exited or was killed
  kWrongToken,      // it presented another STRATA_TOKEN and was refused
};

// The first failure the store recorded.
struct JobFailure {
  int rank = -1;        // the rank that failed
  JobFailureKind kind = JobFailureKind::kReported;
  std::string message;  // "rank 1 on host-a failed: ...", a whole sentence
};

// kBeat: "alive; if nothing more comes within the limit, or the connection
// closes without a goodbye, the job has failed". kBeatDroppable: alive too,
// from a rank the job can go on without (a parameter-server worker other than
// worker 0): its silence or loss is recorded as a lost rank (StoreServer::
// lost_ranks, which strata launch acts on), not as the job's failure, and a
// later request of its own is answered "job failed" (it was given up).
enum class HeartbeatPhase { kBeat, kBeatDroppable, kGoodbye };

// What the collectives and launch code need from a store. A TCP client and
// an in-process store (for ranks-as-threads tests) implement it.
class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Waits until the key exists (up to the timeout), then returns its value.
  virtual std::string get(const std::string& key) = 0;
  // Atomically adds delta to the integer stored at key (0 if absent); returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  virtual bool check(const std::string& key) = 0;
  // Waits until every key exists; the timeout error lists the missing keys.
  virtual void wait(const std::vector<std::string>& keys) = 0;
  virtual void set_timeout(std::chrono::milliseconds timeout) = 0;

  // Records that this rank failed and why (`what`; the store adds the rank and
  // host): every rank's next request, and every request held, fails with
  // JobFailedError naming it. The first failure recorded is kept.
  virtual void report_failure(const std::string& what) = 0;
  // One heartbeat of this rank (parallel/rendezvous/heartbeat.h), on a
  // connection of its own: kBeat says "alive, and fail the job if nothing more
  // comes within `limit`"; kGoodbye says this rank ends normally. Throws
  // JobFailedError when the job has failed, NetworkError/TimeoutError when
  // the store does not answer. The in-process store only reports failures.
  virtual void heartbeat(HeartbeatPhase phase, std::chrono::milliseconds limit) = 0;
};

// Every rank sets "<name>/<rank>" and waits for all; a timeout names the
// ranks that did not arrive.
void store_barrier(Store& store, const std::string& name, int rank, int world_size);

// In-process store shared by threads (tests, single-process use).
std::shared_ptr<Store> make_memory_store(std::chrono::milliseconds timeout);

// Rank 0's server: listens on `port` (0 = any free port), accepts clients
// presenting `token`, refuses and logs others; a strata client presenting a
// wrong token fails the job (it is one of this job's ranks, misconfigured).
// Serves from a background thread until destroyed; the destructor first
// waits (up to the longest heartbeat limit) for the ranks that send
// heartbeats to say goodbye, so that a rank finishing last, or learning of a
// failure, still finds the store.
class StoreServer {
 public:
  StoreServer(const std::string& bind_host, int port, std::string token);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;
  int port() const;
  // The first failure the server recorded, if any (the launcher names that
  // rank as the cause when it serves the store).
  std::optional<JobFailure> failure() const;
  // Ranks that sent kBeatDroppable heartbeats and then went silent
  // (kSilent) or closed their connection without a goodbye
  // (kConnectionLost), in the order they were lost; the job goes on.
  std::vector<JobFailure> lost_ranks() const;
  // A key's value as it is now, without waiting (the launcher reads what the
  // ranks published, e.g. the last snapshot's path).
  std::optional<std::string> peek(const std::string& key) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A client connection; retries connecting until the timeout (rank 0 may not
// be listening yet). Errors name the server address and this rank.
std::unique_ptr<Store> connect_store(const std::string& host, int port, const std::string& token, int rank,
                                     std::chrono::milliseconds timeout);

}  // namespace strata::parallel
