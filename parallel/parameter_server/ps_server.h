// One shard of a parameter server: the weights of its key range and their
// optimizer state, updated with the solver's own rule (framework/solver/optimizer.h)
// from the workers' gradients, under one of three consistency models:
//
//   SYNC   step c is applied once every live worker pushed its gradient of
//          step c, as one update with their mean (allreduce data parallel's
//          update), and each push is answered after that update.
//   ASYNC  every push is applied when it arrives, as 1/N of a step (N
//          workers), and answered at once with the current weights.
//   SSP τ  pushes are applied as in ASYNC, but the push of a worker's step c
//          is answered only once the slowest live worker has pushed step
//          c - τ: no worker runs more than τ steps ahead (Ho et al., 2013).
//          With τ = 0 nobody may run ahead, every step's gradients are in
//          before any is read, and the step is applied as SYNC applies it.
//
//   SYNC:  worker 0: push c ──┐
//          worker 1: push c ──┼──► sum ──► all live pushed c: apply the mean ──► answer all
//          worker 2: push c ──┘
//   SSP:   worker 0: push c ──► apply ──► answer when min(clock of live workers) >= c + 1 - τ
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
#include "framework/solver/optimizer.h"
#include "framework/solver/solver_config.h"
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
  void handle(int worker, Transport& t, const std::string& desc, const PsHeader& h, std::vector<char>& buf,
              std::vector<char>& out);
  void on_init(const PsHeader& h, const std::vector<char>& payload);
  void on_push(int worker, const PsHeader& h, const std::vector<char>& payload, const std::string& desc,
               std::unique_lock<std::mutex>& lock);
  // Applies one update from `grad` (count_ floats) times `scale`. Caller holds mu_.
  void apply(const float* grad, double scale);
  // SYNC: applies the step when all live workers pushed it. Caller holds mu_.
  void complete_clocks();
  // The step count the servers reached: SYNC steps applied, else pushes / N.
  int64_t step() const;
  // SSP: the fewest steps any live worker pushed.
  int64_t slowest_clock() const;
  bool aggregates() const { return o_.mode == PsMode::kSync; }
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
  std::vector<float> acc_;               // SYNC: the step's summed gradients
  int contributors_ = 0;
  std::vector<int64_t> clock_;           // per worker: pushes so far
  std::vector<char> alive_;
  int64_t completed_ = 0;                // SYNC: steps applied
  std::vector<int64_t> staleness_;       // histogram
  std::vector<std::string> lost_;
  uint64_t bytes_in_ = 0, bytes_out_ = 0;
  std::vector<float> scratch_;
};

}  // namespace strata::parallel
