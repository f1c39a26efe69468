// TrainingStrategy: the one interface through which a way of training on
// several ranks (data parallel, pipeline, a parameter server, ...) takes part
// in Solver's loop. A strategy attaches to a Solver (Solver::attach) and
// detaches itself when it goes away (Solver::detach removes that strategy
// only); every method has a neutral default, so a strategy overrides just the
// points it needs.
//
// Where the Solver calls them:
//
//   step()      before_step()              every strategy
//               zero gradients
//               run_step()                 the one strategy that owns the step (a pipeline),
//               or iter_size x forward/backward, on_grad_ready(p) as each gradient is final
//               before_update(net)         every strategy (data parallel: average the gradients)
//               reduce_loss(loss)          every strategy (the loss over all ranks)
//               unscale, check finite      the Solver, or scale_check_gradients() of the one
//                                          strategy that owns the update and the check
//               run_update(net)            the one strategy that owns the update (a parameter
//               or clip, optimizer update  server: the servers hold the optimizer)
//               next_iteration(iter)       the one strategy that owns the update, or iter + 1
//   test()      before_test()              every strategy (agree on BatchNorm statistics)
//               run_test()                 the one strategy that owns the test, or the TEST net
//               reduce_outputs(values)     every strategy (the average over replicas)
//   report      reduce_outputs(values)     TRAIN outputs of a progress line
//   snapshot    snapshot_state(state)      every strategy, on every rank (writers or not)
//               write_weights(path, md)    the one strategy that assembles the snapshot, or
//                                          the Solver's own save of net()
//   step() with results read one step later: the same points, but
//               reduce_results(slots) in place of reduce_loss, and the
//               record read back a step later: read_results(verdict)
//   after each iteration: stop when local_stop... or, when a strategy decides_stop(),
//               when every such strategy says stop_requested() (ranks stop together)
//
// Order between strategies does not depend on which attached first: at every
// point the strategies that span replicas (StrategyScope::kAcrossReplicas:
// data parallel, a parameter server) go before those that split one replica
// (kWithinReplica: pipeline). Replicas agree first (gradients, buffers, the
// stop flag), and then a replica assembles what it agreed on (a pipeline
// gathers its stages' part of a snapshot). A point that one strategy owns
// (the step, the test, the snapshot's layout) can be owned by one only:
// attaching a second owner is a ConfigError naming both.
#pragma once

#include <string>

#include "framework/io/checkpoint.h"
#include "framework/net.h"
#include "framework/solver/step_ledger.h"
#include "framework/solver/training_log.h"

namespace strata {

enum class StrategyScope {
  kAcrossReplicas,  // keeps several copies of the model in step (data parallel, parameter server)
  kWithinReplica,   // splits one copy of the model over ranks (pipeline)
};

class TrainingStrategy {
 public:
  virtual ~TrainingStrategy() = default;

  // For messages: "data parallel", "pipeline".
  virtual std::string name() const = 0;
  virtual StrategyScope scope() const = 0;

  // ---- the step ----
  // First thing in a step, before the gradients are zeroed.
  virtual void before_step() {}
  // True when run_step() replaces the Solver's iter_size forward/backward passes.
  virtual bool owns_step() const { return false; }
  // The step's forward/backward passes (gradients already zeroed); returns
  // the step's loss, the mean over its passes.
  virtual float run_step() { return 0.0f; }
  // True when on_grad_ready() should be called during backward.
  virtual bool wants_grad_ready() const { return false; }
  // Called during backward when a parameter's gradient is final for the step
  // (the last of the iter_size passes: Solver::in_last_pass()).
  virtual void on_grad_ready(int /*param_index*/) {}
  // After the gradients of a step are accumulated, before the update.
  virtual void before_update(Net& /*net*/) {}
  // This rank's loss of a step -> the loss the run reports.
  virtual float reduce_loss(float loss) { return loss; }
  // True when run_update() replaces the Solver's gradient clipping and
  // optimizer update (a parameter server applies them on the servers).
  virtual bool owns_update() const { return false; }
  // With owns_update(): the step's final gradients (scaled by 1/iter_size
  // and checked finite) leave, and the net's weights are replaced by the
  // updated ones. Returns the learning rate of the update, for progress lines.
  virtual double run_update(Net& /*net*/) { return 0.0; }
  // With owns_update(): true when the gradients the update uses are not the
  // net's (sharded data parallel keeps the reduced gradients in slices, one
  // per rank), so the Solver cannot scale and check them itself and calls
  // scale_check_gradients() instead of looking at the net's gradients.
  virtual bool owns_gradient_check() const { return false; }
  // With owns_gradient_check(): multiplies the gradients the update will use
  // by `factor` (1 / iter_size, and 1 / loss scale) and returns whether all
  // of them are finite on every rank (every rank returns the same).
  virtual bool scale_check_gradients(float /*factor*/) { return true; }
  // With owns_update(): the iteration count after a step that ended at
  // `iter` (an asynchronous parameter server counts steps over all workers,
  // so a worker's count can jump or stand still). Tests, snapshots and
  // progress lines then come when the count crosses a multiple of their interval.
  virtual int64_t next_iteration(int64_t iter) { return iter + 1; }

  // ---- results read one step later (framework/solver/step_ledger.h) ----
  // True when this strategy can take part in steps whose results the host
  // reads one step later; one attached strategy that cannot keeps the run
  // reading every step.
  virtual bool takes_results_one_step_later() const { return false; }
  // With it, after before_update (in place of reduce_loss): the step's
  // record as the ranks agree on it, where it lies (on a GPU queued, nothing
  // read back): *slots.loss_sum averaged over the ranks, and this rank's
  // stop request added into *slots.stop.
  virtual void reduce_results(const StepSlots& /*slots*/) {}
  // With it: a record read back (a step later); the stop the ranks agreed on.
  virtual void read_results(const StepVerdict& /*verdict*/) {}

  // ---- test and progress ----
  virtual void before_test() {}
  // True when run_test() replaces evaluating the Solver's TEST net.
  virtual bool owns_test() const { return false; }
  // The test's scalar outputs, averaged over test_iter batches.
  virtual NamedValues run_test() { return {}; }
  // Test results and the TRAIN outputs of progress reports.
  virtual void reduce_outputs(NamedValues& /*values*/) {}

  // ---- snapshots ----
  // At each snapshot point on every rank, with the state about to be written
  // (ranks that write no files take part and write nothing afterwards).
  virtual void snapshot_state(SolverState& /*state*/) {}
  // True when this strategy lays out the snapshot itself: it writes the
  // weights file (write_weights) and gathers into the state the layer states
  // of every rank it spans, other replicas' included.
  virtual bool assembles_snapshot() const { return false; }
  virtual void write_weights(const std::string& /*path*/, const Metadata& /*metadata*/) {}

  // ---- stopping ----
  // True when this strategy decides for all its ranks when to stop (so that
  // none stops alone and leaves the others waiting).
  virtual bool decides_stop() const { return false; }
  // With decides_stop(): some rank was asked to stop at the last step.
  virtual bool stop_requested() const { return false; }
};

}  // namespace strata
