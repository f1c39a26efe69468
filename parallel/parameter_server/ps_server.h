// One shard of a parameter server: the weights of its key range and their
// optimizer state, updated with the solver's own rule (framework/optimizer.h)
// from the workers' gradients, under one of three consistency models:
//
//   SYNC   clock c is applied once every live worker pushed its gradient of
//          clock c (their mean: allreduce data parallel's update), and a
//          worker's push is answered after its own clock is applied.
//   SSP τ  as SYNC, but a push of clock c is answered as soon as clocks
//          up to c - τ are applied: a worker runs at most τ steps ahead of the
//          slowest, reading weights that hold every finished step (τ = 0 is SYNC).
//   ASYNC  every push is applied when it arrives, as 1/N of a step (N
//          workers), and answered at once with the current weights.
//
//   worker 0: push c=5 ──┐                          ┌──► reply (weights after clock 5 - τ)
//   worker 1: push c=5 ──┼──► acc[5 mod (τ+1)] ──► apply mean when all live pushed clock 5
//   worker 2: push c=5 ──┘
//
// Each worker is served by a thread of its own over its own Transport; the
// shard's state is behind one mutex. A worker that breaks the protocol,
// closes its connection or goes silent past the timeout is dropped (named on
// stderr and in the statistics), and the others go on: SYNC and SSP steps
// then complete without it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "framework/net.h"
#include "framework/optimizer.h"
#include "framework/solver_config.h"
#include "parallel/parameter_server/key_layout.h"
#include "parallel/parameter_server/ps_protocol.h"
#include "parallel/parameter_server/ps_config.h"
#include "parallel/transport/transport.h"

namespace strata::parallel {

struct ShardServerOptions {
  int shard = 0;
  int workers = 1;
  PsMode mode = PsMode::kAsync;
  int staleness = 0;  // SSP only
  GradCompression compression = GradCompression::kNone;
  uint64_t token = 0;  // ps_token_hash of the run's token
  std::string who;     // "server 1 (rank 4 on host-a)", for messages
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

// Bins of the staleness histogram: 0 .. kStalenessBins-2 updates, and "more".
inline constexpr int kStalenessBins = 17;

class ShardServer {
 public:
  ShardServer(const SolverConfig& config, const KeyLayout& layout, const ShardServerOptions& options);
  ShardServer(const ShardServer&) = delete;
  ShardServer& operator=(const ShardServer&) = delete;

  // Serves one worker over `t` (this side is pair rank 0, the worker 1)
  // until it says goodbye or is dropped. Never throws.
  void serve(int worker, Transport& t, const std::string& worker_desc);
  // A worker that never connected (or whose connection failed) is lost.
  void lose(int worker, const std::string& worker_desc, const std::string& why);

  // Bytes per message kind, from the layout.
  uint64_t values_bytes() const { return static_cast<uint64_t>(count_) * 4; }
  uint64_t push_bytes() const;
  uint64_t state_bytes() const;  // INIT and FETCH|REPLY payloads
  uint64_t statics_bytes() const { return shard_ == 0 ? static_cast<uint64_t>(layout_.static_count()) * 4 : 0; }

  // "pushes 600, in 1.2 MB, out 1.2 MB, staleness 0:600", and the workers lost.
  std::string summary() const;
  // JSON members for the STATS reply.
  std::string stats_json() const;
  int lost_workers() const;

 private:
  void handle(int worker, Transport& t, const std::string& desc, const PsHeader& h, std::vector<char>& buf);
  void on_init(const PsHeader& h, const std::vector<char>& payload);
  void on_push(int worker, const PsHeader& h, const std::vector<char>& payload, const std::string& desc,
               std::unique_lock<std::mutex>& lock);
  // Applies one update from `grad` (count_ floats) times `scale`. Caller holds mu_.
  void apply(const float* grad, double scale);
  // SYNC/SSP: applies every clock that all live workers finished. Caller holds mu_.
  void complete_clocks();
  void write_state(std::vector<char>& out) const;  // caller holds mu_
  void wait_for_init(std::unique_lock<std::mutex>& lock, const std::string& desc);

  SolverConfig config_;
  const KeyLayout& layout_;
  ShardServerOptions o_;
  int shard_;
  int64_t count_;
  int slots_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool init_done_ = false;
  std::vector<float> values_;
  std::vector<float> statics_;
  std::vector<NetParam> seg_params_;  // one per segment: its value, gradient and history
  std::unique_ptr<Optimizer> optimizer_;
  int64_t start_iter_ = 0;   // the iteration the run started (or resumed) at
  int64_t version_ = 0;      // updates applied in this run
  int64_t pushes_ = 0;
  std::vector<std::vector<float>> acc_;  // SYNC/SSP: (staleness + 1) clocks of summed gradients
  std::vector<int> contributors_;
  std::vector<int64_t> clock_;           // per worker: pushes so far
  std::vector<char> alive_;
  int64_t completed_ = 0;                // SYNC/SSP: clocks applied
  std::vector<int64_t> staleness_;       // histogram
  std::vector<std::string> lost_;
  uint64_t bytes_in_ = 0, bytes_out_ = 0;
  std::vector<float> scratch_;
};

}  // namespace strata::parallel
