// Solver: steps queued with nothing read back (framework/solver/step_ledger.h),
// and those steps captured as CUDA graphs (framework/solver/step_graph.h).
// The eager step, the reading of the records (account) and the run's loop
// are in solver.cpp.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "framework/error.h"
#include "framework/solver/lr_policy.h"
#include "framework/solver/solver.h"
#include "framework/solver/step_graph.h"
#include "framework/solver/step_ledger.h"
#include "framework/timeline.h"

namespace strata {

namespace {

// For one queued step: forward adds its losses into the step's record and
// backward reads the loss scale from the device; unbound when it ends.
class RecordBinding {
 public:
  RecordBinding(Net& net, const StepSlots& slots, bool scaled) : net_(net) {
    net_.set_loss_sink(slots.loss_sum);
    if (scaled) net_.set_loss_scale_source(slots.scale);
  }
  ~RecordBinding() {
    net_.set_loss_sink(nullptr);
    net_.set_loss_scale_source(nullptr);
  }
  RecordBinding(const RecordBinding&) = delete;
  RecordBinding& operator=(const RecordBinding&) = delete;

 private:
  Net& net_;
};

// The end of a queued step, nothing read back: the gradients unscaled and
// checked into the record, the device's decision, clipping by the norm
// taken there, and the update gated by the decision.
void queue_update(std::vector<NetParam>& params, const SolverConfig& config, bool scaled, StepLedger& ledger,
                  Optimizer& optimizer, double lr, StepSlots& slots) {
  const bool clip = config.clip_gradients > 0.0;
  scale_check_gradients_into(params, 1.0f / static_cast<float>(config.iter_size), scaled,
                             static_cast<double>(config.iter_size), clip, slots);
  ledger.decide();
  if (clip) clip_gradients_from(params, slots, config.clip_gradients);  // a skipped step's are never used
  optimizer.update(params, lr, &slots);
}

}  // namespace

void Solver::run_steps(int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (results_one_step_later()) {
      queue_step();
      account(ledger_->settle(1));
    } else {
      step_each();
    }
  }
  settle_results();
}

// ---- results read one step later (framework/solver/step_ledger.h) ----

// The strategy that keeps the run reading every step, or nullptr.
const TrainingStrategy* Solver::reads_every_step() const {
  for (const TrainingStrategy* t : strategies_) {
    if (!t->takes_results_one_step_later()) return t;
  }
  return nullptr;
}

bool Solver::results_one_step_later() const {
  switch (config_.step_results) {
    case StepResults::kEachStep:
      return false;
    case StepResults::kOneStepLater:
      return reads_every_step() == nullptr;
    case StepResults::kAuto:
      break;
  }
  return reads_every_step() == nullptr && !options_.device.is_cpu();
}

std::string Solver::step_results_summary() const {
  if (results_one_step_later()) return "step results read one step later";
  if (const TrainingStrategy* t = reads_every_step(); t && config_.step_results != StepResults::kEachStep) {
    return "step results read every step (" + t->name() + " reads them at once)";
  }
  return "step results read every step";
}

// The step's work queued with nothing read back: forward adds its loss into
// the step's record, the gradient check writes its flag there, the device
// decides, and the update reads that decision.
void Solver::queue_step() {
  const TimelineScope event("step", Timeline::on() ? "step " + std::to_string(iter_ + 1) : std::string());
  if (!ledger_) {
    StepRule rule;
    rule.scaling = scaler_ != nullptr;
    if (scaler_) rule.scale_rule = scaler_->rule();
    rule.stop_on_nonfinite = config_.nonfinite == NonFiniteAction::kStop;
    rule.iter_size = static_cast<int32_t>(config_.iter_size);
    StepCarry carry;
    carry.scale = scaler_ ? scaler_->scale() : 1.0;
    carry.good_steps = scaler_ ? scaler_->good_steps() : 0;
    carry.updates = optimizer_->steps();
    ledger_ = std::make_unique<StepLedger>(net_->device(), rule, carry);
  }
  for (TrainingStrategy* t : strategies_) t->before_step();
  net_->zero_param_diffs();
  StepSlots slots;
  last_lr_ = learning_rate(config_.lr, iter_);
  if (uses_step_graph()) {
    account(ledger_->begin(iter_ + 1, last_lr_, slots, /*fixed=*/true));
    queue_graph_step(slots);
    return;
  }
  account(ledger_->begin(iter_ + 1, last_lr_, slots));
  {
    const RecordBinding bound(*net_, slots, scaler_ != nullptr);
    for (pass_ = 0; pass_ < config_.iter_size; ++pass_) net_->forward_backward();
    pass_ = 0;
  }
  for (TrainingStrategy* t : strategies_) t->before_update(*net_);
  for (TrainingStrategy* t : strategies_) t->reduce_results(slots);
  queue_update(net_->params(), config_, scaler_ != nullptr, *ledger_, *optimizer_, last_lr_, slots);
  ledger_->finish();
  net_->trace_update();
  net_->flush_device_timeline();
  ++iter_;
}

// ---- step graphs (framework/solver/step_graph.h) ----

std::string Solver::step_graph_obstacle() const {
  if (!graph_failure_.empty()) return graph_failure_;
  if (!results_one_step_later()) {
    return "the step's results are read every step (" + step_results_summary() +
           "); a captured step must not wait for the device";
  }
  if (!strategies_.empty()) {
    return strategies_.front()->name() + " is attached, and its work is launched by the host during the step";
  }
  if (Timeline::on()) return "the timeline (--timeline) times each layer from the host";
  const Net::LayerPassHooks& hooks = net_->layer_pass_hooks();
  if (hooks.before_forward || hooks.after_forward || hooks.before_backward || hooks.after_backward) {
    return "layer pass hooks are set (Net::set_layer_pass_hooks), and a replay would not call them";
  }
  return StepGraph::net_obstacle(*net_);
}

bool Solver::uses_step_graph() const {
  switch (config_.step_graph) {
    case StepGraphMode::kOff:
      return false;
    case StepGraphMode::kAuto:
      if (options_.device.is_cpu()) return false;
      break;
    case StepGraphMode::kOn:
      break;
  }
  return step_graph_obstacle().empty();
}

bool Solver::step_graph_captured() const { return graph_ && graph_->captured(); }

void Solver::graph_failed(const std::string& why) {
  graph_failure_ = "at iteration " + std::to_string(iter_ + 1) + ", " + why;
  if (graph_) graph_->reset();
  if (config_.step_graph == StepGraphMode::kOn) {
    fail<Error>(graph_failure_, " (set `step_graph: AUTO` in the solver to go on without graphs, or OFF)");
  }
  if (notice_) notice_("step graph: " + graph_failure_ + "; the steps run eagerly from here on");
}

// The step as a captured graph replays it (the header says what runs where).
// The record is the ledger's fixed one, so its addresses are the same every step.
void Solver::queue_graph_step(StepSlots& slots) {
  if (!graph_) graph_ = std::make_unique<StepGraph>(options_.device);
  const RecordBinding bound(*net_, slots, scaler_ != nullptr);
  const int k = StepGraph::sources(*net_);
  const int last = net_->num_layers() - 1;
  const auto pass = [&] {
    net_->forward(k, last);
    net_->backward(k, last);
  };
  const auto before_replay = [&] {
    for (int i = k; i <= last; ++i) net_->layer(i).before_replay();
  };
  const auto update = [&] {
    queue_update(net_->params(), config_, scaler_ != nullptr, *ledger_, *optimizer_, last_lr_, slots);
  };
  // A part whose capture fails has run eagerly: the step goes on, and so does the run.
  const auto run = [&](StepGraph::Part part, const std::function<void()>& work, const std::function<void()>& before) {
    try {
      graph_->run(part, work, before);
    } catch (const StepGraph::Failed& f) {
      graph_failed("capturing the step failed: " + f.why);
    }
  };
  for (pass_ = 0; pass_ < config_.iter_size; ++pass_) {
    net_->forward(0, k - 1);  // the sources: a new batch into the same blobs
    if (graph_->enabled()) {
      if (const std::string changed = graph_->check_shapes(*net_); !changed.empty()) graph_failed(changed);
    }
    run(StepGraph::kPass, pass, before_replay);
    net_->backward(0, k - 1);
  }
  pass_ = 0;
  run(StepGraph::kUpdate, update, nullptr);
  ledger_->finish();
  net_->trace_update();
  net_->flush_device_timeline();
  ++iter_;
  // The first step ran eagerly (cuDNN's measurements, the allocator's
  // cache); capture from the next one on.
  if (!graph_->enabled() && graph_failure_.empty()) graph_->enable();
}

}  // namespace strata
