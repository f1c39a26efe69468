// Liveness of a multi-process run: a thread per rank tells the rendezvous
// store "alive" every interval, on a connection of its own; the store fails
// the job when a rank goes silent for longer than the limit (stopped with
// SIGSTOP or a debugger, hung in the kernel, swapped out) or when its
// connection closes without a goodbye (killed), and records a rank's own
// report of an error. Every rank learns of that failure with its next
// heartbeat, within one interval, and stops naming the rank that failed,
// instead of waiting in a transfer for the whole STRATA_TIMEOUT_S.
//
//   rank r:   [training thread]  ... compute ... send/recv ...
//             [heartbeat thread] beat ── 1 s ── beat ── 1 s ── beat
//   store:    last[r] = now at each beat; now - last[r] > limit: job failed
//
// The heartbeat comes from its own thread, so a long step (a slow first
// iteration, a large snapshot write) is never taken for a hang; a process
// whose every thread stops (SIGSTOP, a debugger at a breakpoint) is. To
// debug one rank of a run, turn heartbeats off (STRATA_HEARTBEAT_TIMEOUT_S=0,
// `strata launch --heartbeat-timeout 0`) or raise the limit.
//
// A rank the job can go on without (a parameter-server worker other than
// worker 0) beats with IfLost::kDropRank: its silence or exit is recorded as
// a lost rank instead of failing the job, and `strata launch` kills it if it
// is still there (stopped or hung), so that the servers drop it at once.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "parallel/rendezvous/env.h"
#include "parallel/rendezvous/store.h"

namespace strata::parallel {

// Called on the heartbeat thread, at most once, when the job failed on
// another rank or the store stopped answering; `message` names the rank.
using JobFailedHandler = std::function<void(const std::string& message)>;

// The default handler: prints "<program>: error: <message>" to stderr and
// ends the process with status 1 at once. The training thread may be
// blocked in a transfer with the failed rank, which would otherwise last
// the whole STRATA_TIMEOUT_S.
JobFailedHandler exit_on_job_failure(std::string program);

// What the job does when this rank goes silent or away.
enum class IfLost {
  kFailJob,   // every rank stops, naming it
  kDropRank,  // the others go on without it (store.h: HeartbeatPhase::kBeatDroppable)
};

// What an error on this rank was, for report_failure.
enum class FailureOrigin {
  kThisRank,       // this rank's own error (a bad config, a non-finite loss, ...)
  kCommunication,  // a transfer with another rank failed: often the echo of that rank's failure
};

class Heartbeat {
 public:
  // Sends the first heartbeat (JobFailedError when the job has already
  // failed), then beats every `interval` from a thread. `store` is this
  // rank's own connection, whose requests time out after `limit`;
  // `store_desc` names who serves the store ("rank 0, which serves the store
  // at h:p,"), for the message when it goes silent.
  Heartbeat(std::unique_ptr<Store> store, std::string who, std::string store_desc,
            std::chrono::milliseconds interval, std::chrono::milliseconds limit, JobFailedHandler on_failure,
            IfLost if_lost = IfLost::kFailJob);
  // Stops the thread and says goodbye: this rank ends normally.
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // This rank failed: the store records `what` (with this rank and host) and
  // every other rank stops naming it; this rank's own error goes on to be
  // reported as usual. A communication error is reported only when, within
  // one interval, the store knows of no other failure: the rank at the other
  // end usually failed first, and then its failure (the store's message
  // naming it) is returned, for this rank's error to name the cause. Returns
  // "" otherwise. Never throws.
  std::string report_failure(const std::string& what, FailureOrigin origin);

 private:
  void run();

  std::unique_ptr<Store> store_;
  std::string who_, store_desc_;
  std::chrono::milliseconds interval_, limit_;
  JobFailedHandler on_failure_;
  HeartbeatPhase beat_;  // kBeat, or kBeatDroppable
  std::atomic<bool> this_rank_failed_{false};
  std::atomic<bool> job_failed_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// This rank's heartbeat, for a distributed run whose ranks meet at a store
// (STRATA_MASTER and STRATA_TOKEN set) with env.heartbeat_timeout > 0; null
// otherwise. `program` ("strata train") prefixes the message of a failure;
// `name_ranks`, when given, rewrites that message first (a parameter server
// run names a server rank by its role: "server 0 (rank 2)").
std::unique_ptr<Heartbeat> start_heartbeat(const RankEnv& env, const std::string& program,
                                           IfLost if_lost = IfLost::kFailJob,
                                           const std::function<std::string(const std::string&)>& name_ranks = {});

}  // namespace strata::parallel
