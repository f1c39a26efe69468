// A parameter-server worker: the strategy (framework/solver/training_strategy.h,
// scope kAcrossReplicas) through which a rank's Solver trains against the
// servers instead of updating its own weights.
//
//   ParameterServerWorker ps(solver, store, config, roles, rank, env);  // after resume / weights
//   solver.solve();
//
// At the start it publishes (worker 0) or checks (the others: ConfigError
// naming the first differing parameter) the table of parameters, connects to
// every shard, sends worker 0's starting point (weights, optimizer history and
// iteration, so a resumed run resumes on the servers too) and pulls it on
// every worker. Each step then pushes the step's gradients (scaled by
// 1/iter_size and checked finite by the Solver) to every shard and replaces
// the net's weights with the shards' answers: the update itself, gradient
// clipping and the learning rate live on the servers.
//
// Iterations: SYNC and SSP count this worker's steps; ASYNC counts steps over
// all workers (N pushes are one step), so a worker's count can jump or stand
// still and the run ends when the workers together made max_iter steps.
// Worker 0 tests (on its current weights, the whole TEST set), writes
// snapshots (fetching every shard's weights and optimizer state, so the file
// is the same as one process's and resumes on any layout) and logs the
// servers' statistics (a "ps" line: pushes, bytes, staleness histogram, lost
// workers) with each progress line. The others skip the test.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/solver/solver.h"
#include "framework/solver/training_strategy.h"
#include "parallel/parameter_server/key_layout.h"
#include "parallel/parameter_server/ps_config.h"
#include "parallel/parameter_server/ps_protocol.h"
#include "parallel/rendezvous/env.h"
#include "parallel/rendezvous/store.h"
#include "parallel/transport/transport.h"
#include "parallel/transport/transport_select.h"

namespace strata::parallel {

// Connects one side of the (shard, worker) pair transport: the server is
// pair rank 0, the worker pair rank 1; `transport` as --dp-transport
// (auto: shared memory when both are on one host, RDMA between hosts with a
// device, TCP otherwise; parallel/transport/transport_select.h).
std::unique_ptr<Transport> connect_ps_pair(Store& store, int shard, int worker, int pair_rank, const RankEnv& env,
                                           TransportChoice transport);
// Store key of the parameter table worker 0 publishes.
inline constexpr const char* kPsTableKey = "strata/ps/table";

class ParameterServerWorker final : public TrainingStrategy {
 public:
  ParameterServerWorker(Solver& solver, Store& store, const ParameterServerConfig& config, const PsRoles& roles,
                        int worker, const RankEnv& env);
  // Says goodbye to every shard (never throws) and detaches.
  ~ParameterServerWorker() override;
  ParameterServerWorker(const ParameterServerWorker&) = delete;
  ParameterServerWorker& operator=(const ParameterServerWorker&) = delete;

  const KeyLayout& layout() const { return *layout_; }
  int workers() const { return roles_.workers; }
  // "server 0 (rank 3): conv1.weight, ... (7.2 KB)", one line per shard.
  std::string ownership_lines() const;
  // What carries this worker's pairs: "tcp + shm (1 peer)", "rdma (tcp;ofi_rxm)".
  std::string link_description() const;
  // Worker 0: every shard's statistics as JSON members ("shards":[{...},...]).
  std::string stats_fields();
  // Seconds spent waiting on the servers since the previous call.
  double take_comm_wait_seconds();

  // ---- TrainingStrategy ----
  std::string name() const override { return "parameter server"; }
  StrategyScope scope() const override { return StrategyScope::kAcrossReplicas; }
  bool owns_update() const override { return true; }
  // Pushing while backward runs: a shard's gradients leave as soon as the
  // last of its parameters is final, so later shards' transfers overlap the
  // backward of earlier layers. Only where nothing can still change or veto
  // a gradient after backward: iter_size 1, no FP16 loss scaling, and
  // `nonfinite: STOP` (a non-finite shard is held back, and the Solver stops).
  void before_step() override;
  bool wants_grad_ready() const override { return early_push_; }
  void on_grad_ready(int param_index) override;
  double run_update(Net& net) override;
  int64_t next_iteration(int64_t iter) override;
  bool owns_test() const override { return worker_ != 0; }
  NamedValues run_test() override { return {}; }
  void snapshot_state(SolverState& state) override;

 private:
  // Receives a reply of `op` from shard s: the ERROR a server sends is
  // thrown with its reason; the payload length is checked.
  PsHeader recv_reply(int s, PsOp op, uint64_t bytes);
  std::string shard_desc(int s) const;
  void send_init();
  void pull_start();
  // Sends shard s the step's gradients; false (nothing sent) when
  // `only_if_finite` and some are not finite.
  bool push(int s, bool only_if_finite);

  Solver& solver_;
  ParameterServerConfig config_;
  PsRoles roles_;
  int worker_;
  RankEnv env_;
  uint64_t token_;
  std::unique_ptr<KeyLayout> layout_;
  std::vector<std::unique_ptr<Transport>> links_;  // per shard
  bool in_place_ = true;                           // the parameters are in host memory: no buffers below
  std::vector<Tensor> values_;                     // per shard (not in place): host f32 buffer of its segments
  std::vector<std::vector<char>> wire_;            // per shard (compression only): compressed gradients
  std::vector<int64_t> version_;                   // per shard: version of the weights last pulled
  int64_t clock_ = 0;                              // steps pushed in this run
  int64_t server_step_ = 0;                        // shard 0's step count at the last answer
  double comm_wait_ = 0.0;
  bool early_push_ = false;
  std::vector<std::vector<int>> shards_of_param_;  // per parameter: the shards holding part of it
  std::vector<int> params_in_shard_;               // per shard: distinct parameters in its segments
  std::vector<int> pending_;                       // per shard: parameters not yet final this step
  std::vector<char> pushed_;                       // per shard: this step's gradients sent
  bool broken_ = false;                            // a link failed: no goodbye
};

}  // namespace strata::parallel
