// Solver: trains the TRAIN net of a solver config with one of the optimizers,
// tests the TEST net (which shares the TRAIN net's weights) every
// test_interval iterations, reports progress to observers and writes
// snapshots that resume bit-for-bit.
//
// Strategies that train on several ranks attach through TrainingStrategy
// (parallel/training_run.h puts a whole run together).
//
// Typical use:
//   SolverConfig config = load_solver_config(path);
//   Solver solver(config);
//   if (resume) solver.restore(state_path); else if (weights) load_weights(solver.net(), w, opts);
//   ConsolePrinter console(std::cout); solver.add_observer(&console);
//   JsonLinesLog log(config.log, resume ? LogMode::kAppend : LogMode::kTruncate); solver.add_observer(&log);
//   solver.set_stop_flag(&g_stop);   // set by a SIGINT handler
//   SolveResult r = solver.solve();
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "framework/io/checkpoint.h"
#include "framework/solver/loss_scaler.h"
#include "framework/net.h"
#include "framework/solver/optimizer.h"
#include "framework/solver/solver_config.h"
#include "framework/solver/step_graph.h"
#include "framework/solver/step_ledger.h"
#include "framework/solver/training_log.h"
#include "framework/solver/training_strategy.h"

namespace strata {

class Communicator;

enum class SnapshotWriting { kEnabled, kDisabled };
// Which TEST samples a rank's test net reads: its share (i % world_size ==
// rank, the ranks' results averaged by a strategy) or all of them (a rank
// that tests alone: parameter-server worker 0).
enum class TestData { kShare, kWhole };

struct SolverOptions {
  // Rank r > 0 seeds its nets' generators with a mix of random_seed and r
  // (different dropout masks and shuffles); rank 0 uses random_seed as is.
  int rank = 0;
  int world_size = 1;
  Communicator* comm = nullptr;
  // Data-parallel ranks other than 0 train identically but write nothing.
  SnapshotWriting snapshots = SnapshotWriting::kEnabled;
  TestData test_data = TestData::kShare;
  // Where the nets run (--device). The config's precision applies on CUDA
  // devices only; a CPU run with precision other than FP32 is a ConfigError.
  Device device;
};

enum class SolveStatus { kCompleted, kInterrupted };

struct SolveResult {
  SolveStatus status = SolveStatus::kCompleted;
  int64_t iter = 0;            // iterations completed
  std::string last_snapshot;   // state file of the last snapshot written ("" if none)
  // snapshot_best: the best test value, its iteration and weights file
  // (best_iter -1: no test gave a finite value).
  double best_value = 0.0;
  int64_t best_iter = -1;
  std::string best_weights;
};

struct ResumeInfo {
  int64_t iter = 0;
  std::string weights_path;
  std::string state_path;
  // The solver settings that shape training (SolverConfig::fingerprint)
  // differ from those of the run that wrote the snapshot.
  bool config_changed = false;
  // Which settings, with old and new values ("" when the snapshot is older
  // than this record, or nothing changed).
  std::string settings_change;
  // Ranks of the run that wrote the snapshot. When it differs from this
  // run's world size, the data layers' states (cursor, order; layers without
  // bottoms) cannot be split per rank: they are not restored, and reading
  // starts again from the beginning of an epoch (data_order_restarted).
  int snapshot_world_size = 1;
  bool data_order_restarted = false;
};

// Reserved keys in SolverState::layer_states / test_layer_states (they name
// no layer, so Net::load_layer_states ignores them). Written only by runs of
// more than one rank:
//   "@world_size"      the number of ranks that wrote the snapshot
//   "@rank<r>/<layer>" rank r's state of that layer (r >= 1; rank 0's are the
//                      plain entries), gathered by the data-parallel snapshot hook
inline constexpr const char* kWorldSizeStateKey = "@world_size";
std::string rank_state_prefix(int rank);  // "@rank3/"

// The random seed of rank r's nets: rank 0 (and a single process) uses the
// run's seed, so its initial weights are those of a one-process run (and
// rank 0 broadcasts them); other ranks draw different dropout masks and
// shuffles instead of repeating rank 0's.
uint64_t rank_seed(uint64_t seed, int rank);

// Values of an f32 tensor that are inf or NaN (read on the host).
int64_t count_nonfinite(const Tensor& t);

class Solver {
 public:
  // Builds the TRAIN net, and the TEST net when test_interval > 0 and the
  // config has one (net:/net_param: TEST phase, or test_net:).
  explicit Solver(const SolverConfig& config, const SolverOptions& options = {});
  ~Solver();
  Solver(const Solver&) = delete;
  Solver& operator=(const Solver&) = delete;

  const SolverConfig& config() const { return config_; }
  const SolverOptions& options() const { return options_; }
  Net& net() { return *net_; }
  Net* test_net() { return test_net_.get(); }  // nullptr when there is none
  Optimizer& optimizer() { return *optimizer_; }
  int64_t iter() const { return iter_; }
  // The rate the next update will use.
  double current_lr() const;
  // Mean loss over the last average_loss iterations (0 before the first).
  double smoothed_loss() const;

  // ---- training strategies (framework/solver/training_strategy.h) ----
  // Attaches a strategy (not owned; it must detach before it goes away, as
  // DataParallel and PipelineParallel do in their destructors). Order between
  // strategies follows their scope, not the order of attach. A second
  // strategy that owns the step, the test or the snapshot layout is a
  // ConfigError naming both.
  void attach(TrainingStrategy& strategy);
  // Detaches `strategy` only; the others stay.
  void detach(TrainingStrategy& strategy);
  // Attached strategies, across-replica ones first.
  const std::vector<TrainingStrategy*>& strategies() const { return strategies_; }
  // The strategy that lays out snapshots (a pipeline), or nullptr.
  const TrainingStrategy* snapshot_assembler() const;
  // True while the last of the iter_size forward/backward passes of step()
  // runs: gradients reported by Net's grad-ready callback then are final.
  bool in_last_pass() const { return pass_ + 1 >= config_.iter_size; }

  // Steps skipped because their loss or gradients were not finite
  // (`nonfinite: SKIP`; with the default STOP the first one ends the run).
  int64_t nonfinite_skipped() const { return nonfinite_skipped_; }
  // FP16 loss scaling (nullptr in other precisions).
  const LossScaler* loss_scaler() const { return scaler_.get(); }
  // Where notices go ("iteration 120: gradient overflow at loss scale 65536,
  // update skipped, scale lowered to 32768"); default: standard error.
  void set_notice_sink(std::function<void(const std::string&)> f) { notice_ = std::move(f); }

  // Observers are not owned and must outlive solve().
  void add_observer(TrainingObserver* observer) { observers_.push_back(observer); }
  // Checked after every iteration; when set, solve() snapshots and returns
  // kInterrupted. With a strategy that decides_stop(), that strategy says
  // when (it reads this flag on every rank and stops them together).
  void set_stop_flag(const std::atomic<bool>* flag) { stop_ = flag; }
  const std::atomic<bool>* stop_flag() const { return stop_; }

  // One iteration: zero gradients, iter_size forward/backward passes,
  // before_update hook, gradients / iter_size, clipping, optimizer update.
  // Returns the loss averaged over the iter_size passes. It reads the step's
  // results before it returns; solve() reads them one step later where the
  // config lets it (`step_results`, framework/solver/step_ledger.h).
  float step();
  // `n` steps as solve() runs them (results read one step later where it
  // reads them so, the device always a step ahead), all read on return; no
  // tests, progress or snapshots. What a benchmark of the training loop runs.
  void run_steps(int64_t n);
  // Whether solve() reads each step's results one step later, and a line
  // saying so for the start of a run.
  bool results_one_step_later() const;
  std::string step_results_summary() const;
  // Step graphs (`step_graph`, framework/solver/step_graph.h): why this
  // run's steps cannot be captured ("" when they can), and whether its
  // steps run the graph's way (on a GPU: captured from the second step on).
  std::string step_graph_obstacle() const;
  bool uses_step_graph() const;
  // Whether the steps are being replayed from captured graphs now.
  bool step_graph_captured() const;
  // Runs the TEST net for test_iter batches; each scalar output averaged.
  // Empty when there is no TEST net.
  NamedValues test();
  // Writes the weights and solver state for the current iteration
  // (both atomically), notifies observers, and returns the paths.
  SnapshotPaths snapshot();
  // Restores a snapshot from its .solverstate.safetensors file (the weights
  // file beside it is found by name). Errors name what does not match:
  // solver type, parameter names or shapes. Every rank of a multi-rank run
  // restores the same file: with the world size it was written with, rank r
  // takes its own layer states ("@rank<r>/..."); otherwise see ResumeInfo.
  ResumeInfo restore(const std::string& state_path);
  // Trains from iter() to max_iter with tests, progress and snapshots.
  SolveResult solve();

 private:
  void build_nets();
  void run_test_and_report();
  void snapshot_if_best(const NamedValues& outputs);
  void apply_retention();
  void report_iteration();
  void reduce_outputs(NamedValues& values);
  float step_each();
  const TrainingStrategy* reads_every_step() const;
  void queue_step();
  void queue_graph_step(StepSlots& slots);
  void graph_failed(const std::string& why);
  void account(const std::vector<SettledStep>& steps);
  void settle_results();
  void overflow_notice(int64_t iteration, double scale) const;
  void nonfinite_step(int64_t iteration, double loss, bool gradients_finite, const std::string& diagnosis);
  float finish_step(double loss);
  void record_loss(double loss);
  bool stop_now() const;
  template <typename Pred>
  TrainingStrategy* owner(Pred owns) const;
  std::string write_snapshot_if_enabled();
  SolverState capture_state(const SnapshotPaths& paths);
  SnapshotPaths write_snapshot(const SolverState& st, const SnapshotPaths& paths);
  void adapt_layer_states(SolverState& st, ResumeInfo& info) const;
  double elapsed_seconds() const;
  int64_t samples_per_iteration() const;

  SolverConfig config_;
  SolverOptions options_;
  std::unique_ptr<Net> net_;
  std::unique_ptr<Net> test_net_;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<TrainingStrategy*> strategies_;  // across-replica ones first
  std::function<void(const std::string&)> notice_;
  std::unique_ptr<LossScaler> scaler_;
  // Steps whose results are read one step later (made at the first such step).
  std::unique_ptr<StepLedger> ledger_;
  // The captured step (made at the first step that uses it); why capturing stopped.
  std::unique_ptr<StepGraph> graph_;
  std::string graph_failure_;
  float last_loss_ = 0.0f;
  int64_t pass_ = 0;  // forward/backward pass of the running step()
  int64_t nonfinite_skipped_ = 0;
  std::vector<TrainingObserver*> observers_;
  const std::atomic<bool>* stop_ = nullptr;

  int64_t iter_ = 0;
  double last_lr_ = 0.0;
  std::deque<float> loss_window_;
  int64_t last_snapshot_iter_ = -1;
  std::deque<SnapshotPaths> written_;  // this run's snapshots, oldest first (snapshot_keep)
  double best_value_ = 0.0;            // snapshot_best, when best_iter_ >= 0
  int64_t best_iter_ = -1;
  std::string last_snapshot_;

  using Clock = std::chrono::steady_clock;
  Clock::time_point start_time_;
  Clock::time_point report_time_;
  int64_t report_iter_ = 0;
};

template <typename Pred>
TrainingStrategy* Solver::owner(Pred owns) const {
  for (TrainingStrategy* t : strategies_) {
    if (owns(*t)) return t;
  }
  return nullptr;
}

}  // namespace strata
