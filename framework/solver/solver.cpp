#include "framework/timeline.h"
#include "framework/solver/solver.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <algorithm>
#include <iostream>
#include <set>
#include <sstream>

#include "framework/error.h"
#include "framework/solver/finetune_policy.h"
#include "framework/io/file_util.h"
#include "framework/solver/lr_policy.h"
#include "framework/solver/precision.h"
#include "framework/solver/step_ledger.h"

namespace strata {

namespace {

// The scalar outputs of a net, in output order.
NamedValues scalar_outputs(Net& net) {
  NamedValues out;
  for (const std::string& name : net.output_names()) {
    const Blob& b = net.blob(name);
    if (b.numel() == 1) out.emplace_back(name, b.data.to(Device::cpu()).data<float>()[0]);
  }
  return out;
}

std::string format_loss(double loss) {
  std::ostringstream os;
  os << loss;
  return os.str();
}

}  // namespace

int64_t count_nonfinite(const Tensor& t) {
  if (t.numel() == 0 || !is_float_dtype(t.dtype())) return 0;
  Tensor host = t.device().is_cpu() ? t : t.to(Device::cpu());
  if (host.dtype() != DType::kF32) {  // a blob stored in bf16/f16
    Tensor wide(host.shape(), DType::kF32);
    cast_into(wide, host);
    host = wide;
  }
  const float* p = host.data<float>();
  int64_t n = 0;
  for (int64_t i = 0, e = host.numel(); i < e; ++i) n += !std::isfinite(p[i]);
  return n;
}

namespace {

// Where a non-finite step started: weights that already hold inf/NaN, else
// the first layer (in forward order) whose output does, else the gradient
// written first in backward.
std::string first_nonfinite(Net& net) {
  auto count = [](int64_t n, int64_t of) {
    return std::to_string(n) + " of its " + std::to_string(of) + " values are inf/NaN";
  };
  for (const NetParam& p : net.params()) {
    // A weight whose storage is let go between uses (sharded data
    // parallel's PARAMETERS stage) is not read: it would be taken as zeros.
    if (!p.blob->data.holds_memory()) continue;
    if (const int64_t n = count_nonfinite(p.blob->data)) {
      return "parameter '" + p.name + "' already holds non-finite weights (" + count(n, p.blob->numel()) +
             "; from the loaded weights or an earlier update)";
    }
  }
  bool released = false;  // outputs whose memory the blob plan gave on during the step
  for (int i = 0; i < net.num_layers(); ++i) {
    for (const Blob* b : net.tops(i)) {
      if (!net.value_outlives_step(*b)) {
        released = true;
        continue;
      }
      if (const int64_t n = count_nonfinite(b->data)) {
        return "the first non-finite output is that of layer '" + net.layer(i).name() + "' (" +
               net.layer(i).type() + "): " + count(n, b->numel());
      }
    }
  }
  for (int id = static_cast<int>(net.params().size()) - 1; id >= 0; --id) {
    // A gradient kept by sharded data parallel may hold another bucket's by now.
    if (net.gradient_handed_over(id)) continue;
    const NetParam& p = net.params()[static_cast<size_t>(id)];
    if (const int64_t n = count_nonfinite(p.blob->diff)) {
      return "the first non-finite gradient in backward is that of parameter '" + p.name + "': " +
             count(n, p.blob->numel());
    }
  }
  if (released) {
    return "the outputs still held are finite (the others' memory went on to later blobs during the step: "
           "set `blob_memory: SEPARATE` in the solver to keep every output for this diagnosis)";
  }
  return "every layer output and gradient is finite now";
}

}  // namespace

std::string rank_state_prefix(int rank) { return "@rank" + std::to_string(rank) + "/"; }

Solver::Solver(const SolverConfig& config, const SolverOptions& options)
    : config_(config), options_(options) {
  apply_precision(config_.precision, options_.device, config_.source.empty() ? std::string("solver") : config_.source);
  if (config_.precision == Precision::kFP16) {
    LossScalerOptions lso;
    lso.initial_scale = config_.initial_loss_scale;
    lso.growth_interval = config_.loss_scale_growth_interval;
    scaler_ = std::make_unique<LossScaler>(lso);
  }
  notice_ = [](const std::string& msg) { std::cerr << msg << std::endl; };
  optimizer_ = make_optimizer(config_.optimizer);  // before the nets: their memory plan counts its history
  build_nets();
  apply_finetune_policy(*net_, config_.finetune);  // layer_decay, no_weight_decay
  optimizer_->prepare(net_->params());
  start_time_ = report_time_ = Clock::now();
}

Solver::~Solver() = default;

void Solver::build_nets() {
  auto net_options = [&](Phase phase, const std::string& base_dir) {
    NetOptions o;
    o.phase = phase;
    o.state = phase == Phase::kTrain ? config_.train_state : config_.test_state;
    o.base_dir = base_dir;
    o.seed = rank_seed(config_.random_seed, options_.rank);
    const bool whole = phase == Phase::kTest && options_.test_data == TestData::kWhole;
    o.rank = whole ? 0 : options_.rank;
    o.world_size = whole ? 1 : options_.world_size;
    o.comm = options_.comm;
    o.device = options_.device;
    o.blob_memory = config_.blob_memory;  // a TEST net: planned for forward passes only
    o.storage_dtype = storage_dtype_of(config_.precision);
    o.fuse_epilogues = config_.fuse_epilogues;
    o.channels_last = config_.channels_last;
    if (phase == Phase::kTrain) o.optimizer_slots = static_cast<int>(optimizer_->slot_names().size());
    return o;
  };
  const bool want_test = config_.test_interval > 0;
  for (const std::string& path : {config_.net, config_.train_net, config_.test_net}) {
    // Found in neither the working directory nor beside the solver: say both.
    auto it = config_.not_found.find(path);
    if (it != config_.not_found.end() && !file_exists(path)) throw ConfigError(it->second);
  }
  // The TEST net runs between training steps: its values lie in the TRAIN net's arena (NetOptions::arena_host).
  auto test_options = [&](const std::string& base_dir) {
    NetOptions o = net_options(Phase::kTest, base_dir);
    o.arena_host = net_.get();
    return o;
  };
  if (config_.has_net_param) {
    net_ = std::make_unique<Net>(config_.net_param, net_options(Phase::kTrain, config_.base_dir));
    if (want_test) test_net_ = std::make_unique<Net>(config_.net_param, test_options(config_.base_dir));
  } else if (!config_.net.empty()) {
    net_ = Net::from_file(config_.net, net_options(Phase::kTrain, ""));
    if (want_test) test_net_ = Net::from_file(config_.net, test_options(""));
  } else {
    net_ = Net::from_file(config_.train_net, net_options(Phase::kTrain, ""));
    if (want_test && !config_.test_net.empty()) test_net_ = Net::from_file(config_.test_net, test_options(""));
  }
  if (test_net_) test_net_->share_params_from(*net_);
}

double Solver::current_lr() const { return learning_rate(config_.lr, iter_); }

double Solver::smoothed_loss() const {
  if (loss_window_.empty()) return 0.0;
  double sum = 0.0;
  for (float l : loss_window_) sum += l;
  return sum / static_cast<double>(loss_window_.size());
}

double Solver::elapsed_seconds() const {
  return std::chrono::duration<double>(Clock::now() - start_time_).count();
}

int64_t Solver::samples_per_iteration() const {
  // The batch of the first layer without bottoms (a data or Input layer).
  for (int i = 0; i < net_->num_layers(); ++i) {
    if (!net_->bottoms(i).empty() || net_->tops(i).empty()) continue;
    const Blob* top = net_->tops(i)[0];
    if (top->shape().empty()) return 0;
    return top->shape()[0] * config_.iter_size;
  }
  return 0;
}

float Solver::step() {
  if (results_one_step_later()) {
    queue_step();
    account(ledger_->settle(0));
    return last_loss_;
  }
  return step_each();
}

// The eager step: the host reads the loss and the finite flag, and decides.
float Solver::step_each() {
  settle_results();  // a step queued by solve() before a strategy attached
  const TimelineScope event("step", Timeline::on() ? "step " + std::to_string(iter_ + 1) : std::string());
  for (TrainingStrategy* t : strategies_) t->before_step();
  net_->zero_param_diffs();
  if (scaler_) net_->set_loss_scale(static_cast<float>(scaler_->scale()));
  double loss = 0.0;
  if (TrainingStrategy* runner = owner([](const TrainingStrategy& t) { return t.owns_step(); })) {
    loss = runner->run_step();
  } else {
    for (pass_ = 0; pass_ < config_.iter_size; ++pass_) loss += net_->forward_backward();
    pass_ = 0;
    loss /= static_cast<double>(config_.iter_size);
  }
  for (TrainingStrategy* t : strategies_) t->before_update(*net_);
  for (TrainingStrategy* t : strategies_) loss = t->reduce_loss(static_cast<float>(loss));

  std::vector<NetParam>& params = net_->params();
  last_lr_ = learning_rate(config_.lr, iter_);
  // The gradients the update uses: the net's, or a strategy's own (sharded
  // data parallel's slices), which that strategy scales and checks on every rank.
  TrainingStrategy* checker = owner([](const TrainingStrategy& t) { return t.owns_update() && t.owns_gradient_check(); });
  const auto scale_check = [&](float factor) {
    return checker ? checker->scale_check_gradients(factor) : scale_gradients_check_finite(params, factor);
  };
  if (scaler_) {
    // FP16: unscale, and skip the update when a gradient overflowed.
    const double scale = scaler_->scale();
    const bool finite = scale_check(static_cast<float>(1.0 / (scale * static_cast<double>(config_.iter_size))));
    if (scaler_->update(!finite) == StepDecision::kSkip) {
      overflow_notice(iter_ + 1, scale);
      return finish_step(loss);
    }
  } else {
    // One pass scales and checks: a NaN/inf step never reaches the weights.
    const bool finite = scale_check(1.0f / static_cast<float>(config_.iter_size));
    if (!finite || !std::isfinite(loss)) {
      nonfinite_step(iter_ + 1, loss, finite, first_nonfinite(*net_));
      return finish_step(loss);
    }
  }
  if (TrainingStrategy* updater = owner([](const TrainingStrategy& t) { return t.owns_update(); })) {
    last_lr_ = updater->run_update(*net_);
    return finish_step(loss);
  }
  clip_gradients(params, config_.clip_gradients);
  optimizer_->update(params, last_lr_);
  return finish_step(loss);
}

void Solver::overflow_notice(int64_t iteration, double scale) const {
  if (!notice_) return;
  std::ostringstream msg;
  msg << "iteration " << iteration << ": gradient overflow (inf/NaN) at loss scale " << scale
      << ", update skipped, loss scale lowered to " << scaler_->scale();
  notice_(msg.str());
}

void Solver::nonfinite_step(int64_t iteration, double loss, bool gradients_finite, const std::string& diagnosis) {
  const std::string what = "iteration " + std::to_string(iteration) + ": the loss is " + format_loss(loss) +
                           (gradients_finite ? "" : " and some gradients are not finite") + "; " + diagnosis;
  if (config_.nonfinite == NonFiniteAction::kStop) {
    fail<NumericError>(what, ". The update was not applied and no snapshot of these weights is written. "
                             "Lower base_lr (or set clip_gradients), check the inputs and the loaded weights, "
                             "or set `nonfinite: SKIP` in the solver to skip such steps");
  }
  ++nonfinite_skipped_;
  if (notice_) notice_(what + "; update skipped (nonfinite: SKIP), " + std::to_string(nonfinite_skipped_) + " so far");
}

// The host's part of steps read back: progress, the scaler's and the
// optimizer's counts, notices, and the error of a non-finite step under STOP.
void Solver::account(const std::vector<SettledStep>& steps) {
  for (const SettledStep& s : steps) {
    const StepVerdict& v = s.verdict;
    for (TrainingStrategy* t : strategies_) t->read_results(v);
    const double loss = step_loss(v, ledger_->rule());
    optimizer_->set_steps(v.updates);
    if (scaler_) {
      scaler_->set_state(v.next_scale, v.good_steps);
      if (!v.applied) {
        scaler_->count_skipped();
        overflow_notice(s.iteration, v.scale);
      }
    } else if (!v.applied) {
      // The blobs still hold this step's values only when no later step ran.
      std::string diagnosis = first_nonfinite(*net_);
      if (s.iteration != iter_) {
        diagnosis = std::string("read one step later, when the next step had run") +
                    (v.halted ? " and applied no update" : "") +
                    " (set `step_results: EACH_STEP` in the solver to see which layer went non-finite first)";
      }
      nonfinite_step(s.iteration, loss, v.nonfinite == 0, diagnosis);
    }
    record_loss(loss);
  }
}

void Solver::settle_results() {
  if (ledger_) account(ledger_->settle(0));
}

// The end of every eager step, updated or skipped: the iteration counts and
// its loss joins the window the progress lines average.
float Solver::finish_step(double loss) {
  net_->trace_update();  // STRATA_MEMORY_TRACE: what the optimizer took
  net_->flush_device_timeline();  // the step's GPU spans, inside its host span (waits only with --timeline)
  TrainingStrategy* updater = owner([](const TrainingStrategy& t) { return t.owns_update(); });
  iter_ = updater ? std::max(iter_, updater->next_iteration(iter_)) : iter_ + 1;
  record_loss(loss);
  return last_loss_;
}

void Solver::record_loss(double loss) {
  last_loss_ = static_cast<float>(loss);
  loss_window_.push_back(last_loss_);
  while (static_cast<int64_t>(loss_window_.size()) > config_.average_loss) loss_window_.pop_front();
}

NamedValues Solver::test() {
  NamedValues sums;
  if (!test_net_) return sums;
  const TimelineScope event("test", "test");
  for (TrainingStrategy* t : strategies_) t->before_test();
  if (TrainingStrategy* tester = owner([](const TrainingStrategy& t) { return t.owns_test(); })) {
    sums = tester->run_test();
    test_net_->flush_device_timeline();
    reduce_outputs(sums);
    return sums;
  }
  for (int64_t b = 0; b < config_.test_iter; ++b) {
    test_net_->forward();
    const NamedValues now = scalar_outputs(*test_net_);
    if (sums.empty()) {
      sums = now;
      continue;
    }
    for (size_t k = 0; k < sums.size() && k < now.size(); ++k) sums[k].second += now[k].second;
  }
  for (auto& kv : sums) kv.second /= static_cast<double>(config_.test_iter);
  test_net_->flush_device_timeline();
  reduce_outputs(sums);
  return sums;
}

void Solver::run_test_and_report() {
  TestInfo info;
  info.iter = iter_;
  info.outputs = test();
  info.elapsed_seconds = elapsed_seconds();
  for (TrainingObserver* o : observers_) o->on_test(info);
  if (!config_.snapshot_best.empty()) snapshot_if_best(info.outputs);
}

void Solver::report_iteration() {
  const Clock::time_point now = Clock::now();
  const double interval = std::chrono::duration<double>(now - report_time_).count();
  const int64_t iters = iter_ - report_iter_;
  IterationInfo info;
  info.iter = iter_;
  info.max_iter = config_.max_iter;
  info.loss = smoothed_loss();
  info.lr = last_lr_;
  if (interval > 0 && iters > 0) {
    info.samples_per_second = static_cast<double>(samples_per_iteration() * iters) / interval;
    info.eta_seconds = interval / static_cast<double>(iters) * static_cast<double>(std::max<int64_t>(0, config_.max_iter - iter_));
  }
  info.elapsed_seconds = elapsed_seconds();
  info.outputs = scalar_outputs(*net_);
  reduce_outputs(info.outputs);
  for (TrainingObserver* o : observers_) o->on_iteration(info);
  report_time_ = now;
  report_iter_ = iter_;
}

// ---- strategies ----

void Solver::attach(TrainingStrategy& strategy) {
  if (std::find(strategies_.begin(), strategies_.end(), &strategy) != strategies_.end()) return;
  struct Role {
    const char* what;
    bool (TrainingStrategy::*owns)() const;
  };
  for (const Role& role : {Role{"the step", &TrainingStrategy::owns_step}, Role{"the test", &TrainingStrategy::owns_test},
                           Role{"the update", &TrainingStrategy::owns_update},
                           Role{"the snapshot layout", &TrainingStrategy::assembles_snapshot}}) {
    if (!(strategy.*role.owns)()) continue;
    for (const TrainingStrategy* t : strategies_) {
      if ((t->*role.owns)()) {
        fail<ConfigError>("training strategies '", t->name(), "' and '", strategy.name(), "' both take over ",
                          role.what, "; they cannot be combined in one run");
      }
    }
  }
  // Across-replica strategies first, each group in attach order.
  auto pos = strategies_.end();
  if (strategy.scope() == StrategyScope::kAcrossReplicas) {
    pos = std::find_if(strategies_.begin(), strategies_.end(),
                       [](const TrainingStrategy* t) { return t->scope() == StrategyScope::kWithinReplica; });
  }
  strategies_.insert(pos, &strategy);
  if (strategy.wants_grad_ready()) {
    net_->set_grad_ready_callback([this](int id) {
      for (TrainingStrategy* t : strategies_) {
        if (t->wants_grad_ready()) t->on_grad_ready(id);
      }
    });
  }
}

void Solver::detach(TrainingStrategy& strategy) {
  strategies_.erase(std::remove(strategies_.begin(), strategies_.end(), &strategy), strategies_.end());
  const bool any_wants = std::any_of(strategies_.begin(), strategies_.end(),
                                     [](const TrainingStrategy* t) { return t->wants_grad_ready(); });
  if (!any_wants) net_->set_grad_ready_callback(nullptr);
}

const TrainingStrategy* Solver::snapshot_assembler() const {
  return owner([](const TrainingStrategy& t) { return t.assembles_snapshot(); });
}

void Solver::reduce_outputs(NamedValues& values) {
  for (TrainingStrategy* t : strategies_) t->reduce_outputs(values);
}

bool Solver::stop_now() const {
  bool decided = false;
  for (const TrainingStrategy* t : strategies_) {
    if (!t->decides_stop()) continue;
    if (t->stop_requested()) return true;
    decided = true;
  }
  return !decided && stop_ && stop_->load();
}

uint64_t rank_seed(uint64_t seed, int rank) {
  if (rank == 0) return seed;
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(rank) + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

SolveResult Solver::solve() {
  start_time_ = report_time_ = Clock::now();
  report_iter_ = iter_;
  StartInfo start;
  start.iter = iter_;
  start.max_iter = config_.max_iter;
  start.net_name = net_->name();
  start.summary = config_.summary();
  if (results_one_step_later()) start.summary += ", " + step_results_summary();
  const bool on = config_.step_graph == StepGraphMode::kOn;
  if (on || (config_.step_graph == StepGraphMode::kAuto && !options_.device.is_cpu())) {
    const std::string why = step_graph_obstacle();
    if (why.empty()) {
      start.summary += options_.device.is_cpu()
                           ? std::string(", the step split as a CUDA graph replays it (run eagerly: the CPU has no graphs)")
                           : ", the step captured as a CUDA graph from iteration " + std::to_string(iter_ + 2);
    } else if (on) {
      fail<ConfigError>("step_graph: ON, but the step cannot be captured: ", why,
                        " (set `step_graph: AUTO` to run it eagerly)");
    } else {
      start.summary += ", steps not captured as a CUDA graph: " + why;
    }
  }
  for (TrainingObserver* o : observers_) o->on_start(start);

  const bool testing = test_net_ && config_.test_interval > 0;
  if (testing && iter_ == 0 && config_.test_initialization) run_test_and_report();

  SolveResult result;
  // A step normally counts one iteration; under an asynchronous parameter
  // server the count is global and may jump, so an interval's work comes
  // when the count reaches or passes its next multiple.
  const auto crossed = [](int64_t before, int64_t now, int64_t interval) {
    return interval > 0 && now / interval > before / interval;
  };
  while (iter_ < config_.max_iter) {
    const int64_t before = iter_;
    if (results_one_step_later()) {
      // The host reads the last step's results while the device runs this one.
      queue_step();
      account(ledger_->settle(1));
    } else {
      step_each();
    }
    const bool report = crossed(before, iter_, config_.display);
    const bool test_now = testing && crossed(before, iter_, config_.test_interval);
    const bool snapshot_now = crossed(before, iter_, config_.snapshot);
    if (report || test_now || snapshot_now || iter_ >= config_.max_iter || stop_now()) settle_results();
    if (report) report_iteration();
    if (test_now) run_test_and_report();
    if (snapshot_now) write_snapshot_if_enabled();
    if (stop_now()) {
      result.status = SolveStatus::kInterrupted;
      break;
    }
  }
  if (result.status == SolveStatus::kInterrupted || config_.snapshot_after_train == SnapshotAfterTrain::kYes) {
    write_snapshot_if_enabled();
  }
  result.iter = iter_;
  result.last_snapshot = last_snapshot_;
  if (best_iter_ >= 0) {
    result.best_iter = best_iter_;
    result.best_value = best_value_;
    result.best_weights = snapshot_paths(config_.snapshot_prefix, best_iter_).weights;
  }
  FinishInfo fin;
  fin.iter = iter_;
  fin.reason = result.status == SolveStatus::kInterrupted ? FinishReason::kInterrupted : FinishReason::kCompleted;
  fin.elapsed_seconds = elapsed_seconds();
  for (TrainingObserver* o : observers_) o->on_finish(fin);
  return result;
}

}  // namespace strata
