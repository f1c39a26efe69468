#include "framework/solver.h"

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
#include "framework/finetune_policy.h"
#include "framework/io/file_util.h"
#include "framework/lr_policy.h"
#ifdef STRATA_WITH_CUDA
#include "framework/cuda/math.h"
#endif

namespace strata {

namespace {

std::string basename_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string join(const std::vector<std::string>& v, size_t limit = 10) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < limit; ++i) s += (i ? ", " : "") + v[i];
  if (v.size() > limit) s += ", ... (" + std::to_string(v.size() - limit) + " more)";
  return s;
}

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
  if (t.numel() == 0 || t.dtype() != DType::kF32) return 0;
  const Tensor host = t.device().is_cpu() ? t : t.to(Device::cpu());
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
    if (const int64_t n = count_nonfinite(p.blob->data)) {
      return "parameter '" + p.name + "' already holds non-finite weights (" + count(n, p.blob->numel()) +
             "; from the loaded weights or an earlier update)";
    }
  }
  for (int i = 0; i < net.num_layers(); ++i) {
    for (const Blob* b : net.tops(i)) {
      if (const int64_t n = count_nonfinite(b->data)) {
        return "the first non-finite output is that of layer '" + net.layer(i).name() + "' (" +
               net.layer(i).type() + "): " + count(n, b->numel());
      }
    }
  }
  for (auto it = net.params().rbegin(); it != net.params().rend(); ++it) {
    if (const int64_t n = count_nonfinite(it->blob->diff)) {
      return "the first non-finite gradient in backward is that of parameter '" + it->name + "': " +
             count(n, it->blob->numel());
    }
  }
  return "every layer output and gradient is finite now";
}

// Reserved layer-state key holding the FP16 loss scaler ("<scale> <good steps>").
constexpr const char* kLossScaleStateKey = "@loss_scale";
// Reserved layer-state key holding snapshot_best's record ("<iteration> <value>").
constexpr const char* kBestStateKey = "@best";

// Precision -> GEMM/convolution math on the GPU; ConfigError on the CPU.
void apply_precision(const SolverConfig& config, Device device) {
  if (device.is_cpu()) {
    if (config.precision != Precision::kFP32) {
      fail<ConfigError>(config.source.empty() ? std::string("solver") : config.source, ": precision ",
                        precision_name(config.precision),
                        " needs a CUDA device (--device cuda); CPU training is FP32 only");
    }
    return;
  }
#ifdef STRATA_WITH_CUDA
  // FP16 has no fp16 GEMM mode yet: TF32 math, with loss scaling (docs/config.md).
  const cuda::MathMode mode = config.precision == Precision::kFP32   ? cuda::MathMode::kFP32
                              : config.precision == Precision::kBF16 ? cuda::MathMode::kBF16
                                                                     : cuda::MathMode::kTF32;
  cuda::set_math_mode(mode);
#endif
}


// Layers without bottoms (data and Input layers): their state is a position
// in this rank's shard of the data.
std::set<std::string> source_layer_names(const Net& net) {
  std::set<std::string> out;
  for (int i = 0; i < net.num_layers(); ++i) {
    if (net.bottoms(i).empty()) out.insert(net.layer(i).name());
  }
  return out;
}

// Replaces the plain entries by rank r's "@rank<r>/..." entries when the
// snapshot has them, and drops every reserved "@..." entry.
void select_rank_states(std::map<std::string, std::string>& states, int rank) {
  const std::string prefix = rank_state_prefix(rank);
  std::map<std::string, std::string> mine;
  bool found = false;
  for (const auto& [key, value] : states) {
    if (rank > 0 && key.compare(0, prefix.size(), prefix) == 0) {
      mine[key.substr(prefix.size())] = value;
      found = true;
    }
  }
  if (!found) {
    for (const auto& [key, value] : states) {
      if (key.empty() || key[0] != '@') mine[key] = value;
    }
  }
  states = std::move(mine);
}

}  // namespace

std::string rank_state_prefix(int rank) { return "@rank" + std::to_string(rank) + "/"; }

Solver::Solver(const SolverConfig& config, const SolverOptions& options)
    : config_(config), options_(options) {
  apply_precision(config_, options_.device);
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
    o.base_dir = base_dir;
    o.seed = rank_seed(config_.random_seed, options_.rank);
    o.rank = options_.rank;
    o.world_size = options_.world_size;
    o.comm = options_.comm;
    o.device = options_.device;
    if (phase == Phase::kTrain) o.optimizer_slots = static_cast<int>(optimizer_->slot_names().size());
    return o;
  };
  const bool want_test = config_.test_interval > 0;
  if (config_.has_net_param) {
    net_ = std::make_unique<Net>(config_.net_param, net_options(Phase::kTrain, config_.base_dir));
    if (want_test) test_net_ = std::make_unique<Net>(config_.net_param, net_options(Phase::kTest, config_.base_dir));
  } else if (!config_.net.empty()) {
    net_ = Net::from_file(config_.net, net_options(Phase::kTrain, ""));
    if (want_test) test_net_ = Net::from_file(config_.net, net_options(Phase::kTest, ""));
  } else {
    net_ = Net::from_file(config_.train_net, net_options(Phase::kTrain, ""));
    if (want_test && !config_.test_net.empty()) {
      test_net_ = Net::from_file(config_.test_net, net_options(Phase::kTest, ""));
    }
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
  if (scaler_) {
    // FP16: unscale, and skip the update when a gradient overflowed.
    const double scale = scaler_->scale();
    const bool finite =
        scale_gradients_check_finite(params, static_cast<float>(1.0 / (scale * static_cast<double>(config_.iter_size))));
    if (scaler_->update(!finite) == StepDecision::kSkip) {
      if (notice_) {
        std::ostringstream msg;
        msg << "iteration " << iter_ + 1 << ": gradient overflow (inf/NaN) at loss scale " << scale
            << ", update skipped, loss scale lowered to " << scaler_->scale();
        notice_(msg.str());
      }
      return finish_step(loss);
    }
  } else {
    // One pass scales and checks: a NaN/inf step never reaches the weights.
    const bool finite = scale_gradients_check_finite(params, 1.0f / static_cast<float>(config_.iter_size));
    if (!finite || !std::isfinite(loss)) {
      const std::string what = "iteration " + std::to_string(iter_ + 1) + ": the loss is " + format_loss(loss) +
                               (finite ? "" : " and some gradients are not finite") + "; " +
                               first_nonfinite(*net_);
      if (config_.nonfinite == NonFiniteAction::kStop) {
        fail<NumericError>(what, ". The update was not applied and no snapshot of these weights is written. "
                                 "Lower base_lr (or set clip_gradients), check the inputs and the loaded weights, "
                                 "or set `nonfinite: SKIP` in the solver to skip such steps");
      }
      ++nonfinite_skipped_;
      if (notice_) notice_(what + "; update skipped (nonfinite: SKIP), " + std::to_string(nonfinite_skipped_) +
                           " so far");
      return finish_step(loss);
    }
  }
  clip_gradients(params, config_.clip_gradients);
  optimizer_->update(params, last_lr_);
  return finish_step(loss);
}

// The end of every step, updated or skipped: the iteration counts and its
// loss joins the window the progress lines average.
float Solver::finish_step(double loss) {
  ++iter_;
  loss_window_.push_back(static_cast<float>(loss));
  while (static_cast<int64_t>(loss_window_.size()) > config_.average_loss) loss_window_.pop_front();
  return static_cast<float>(loss);
}

NamedValues Solver::test() {
  NamedValues sums;
  if (!test_net_) return sums;
  for (TrainingStrategy* t : strategies_) t->before_test();
  if (TrainingStrategy* tester = owner([](const TrainingStrategy& t) { return t.owns_test(); })) {
    sums = tester->run_test();
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

// Every rank sees the same (reduced) test outputs, so every rank decides the
// same and reaches the snapshot's collective work together.
void Solver::snapshot_if_best(const NamedValues& outputs) {
  const auto it = std::find_if(outputs.begin(), outputs.end(),
                               [&](const auto& kv) { return kv.first == config_.snapshot_best; });
  if (it == outputs.end()) {
    std::string names;
    for (const auto& kv : outputs) names += (names.empty() ? "'" : ", '") + kv.first + "'";
    fail<ConfigError>("snapshot_best: '", config_.snapshot_best, "' is not an output of the TEST net (",
                      names.empty() ? std::string("it has no scalar outputs") : "its outputs: " + names,
                      "); name one of them in the solver file");
  }
  const double v = it->second;
  if (!std::isfinite(v)) return;
  const bool better = best_iter_ < 0 || (config_.snapshot_best_is == BestIs::kHigher ? v > best_value_ : v < best_value_);
  if (!better) return;
  best_value_ = v;
  best_iter_ = iter_;
  if (last_snapshot_iter_ == iter_) {
    apply_retention();  // written before this test (e.g. a resume point): protect it now
    return;
  }
  write_snapshot_if_enabled();
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

SolverState Solver::capture_state(const SnapshotPaths& paths) {
  SolverState st;
  st.iter = iter_;
  st.solver_type = solver_type_name(config_.optimizer.type);
  st.optimizer_steps = optimizer_->steps();
  st.history = optimizer_->state_tensors();
  gather_split_history(*net_, st.history);  // tensor parallel: whole tensors in the file (collective)
  st.layer_states = net_->save_layer_states();
  if (test_net_) st.test_layer_states = test_net_->save_layer_states();
  st.loss_window.assign(loss_window_.begin(), loss_window_.end());
  st.config_fingerprint = config_.fingerprint();
  st.settings = config_.training_settings();
  st.weights_file = basename_of(paths.weights);
  if (options_.world_size > 1) st.layer_states[kWorldSizeStateKey] = std::to_string(options_.world_size);
  if (scaler_) {
    std::ostringstream ls;
    ls.precision(17);
    ls << scaler_->scale() << ' ' << scaler_->good_steps();
    st.layer_states[kLossScaleStateKey] = ls.str();
  }
  if (best_iter_ >= 0) {
    std::ostringstream best;
    best.precision(17);
    best << best_iter_ << ' ' << best_value_ << ' ' << config_.snapshot_best;
    st.layer_states[kBestStateKey] = best.str();
  }
  return st;
}

SnapshotPaths Solver::snapshot() {
  const SnapshotPaths paths = snapshot_paths(config_.snapshot_prefix, iter_);
  SolverState st = capture_state(paths);
  for (TrainingStrategy* t : strategies_) t->snapshot_state(st);
  return write_snapshot(st, paths);
}

SnapshotPaths Solver::write_snapshot(const SolverState& st, const SnapshotPaths& paths) {
  // Two-phase: both files are written completely under staging names first,
  // and only then renamed into place, so a failure while writing either one
  // (a full disk) leaves an existing snapshot pair of the same name untouched.
  const std::string staged_weights = paths.weights + ".staged";
  const std::string staged_state = paths.state + ".staged";
  try {
    const Metadata weights_md = {{"iter", std::to_string(iter_)},
                                 {"solver_type", solver_type_name(config_.optimizer.type)}};
    if (TrainingStrategy* assembler = owner([](const TrainingStrategy& t) { return t.assembles_snapshot(); })) {
      assembler->write_weights(staged_weights, weights_md);
    } else {
      save_weights(*net_, staged_weights, weights_md);
    }
    save_solver_state(staged_state, st);
  } catch (...) {
    std::remove(staged_weights.c_str());
    std::remove(staged_state.c_str());
    throw;
  }
  // Weights first: a state file only ever points at a complete weights file.
  for (const auto& [from, to] : {std::pair{staged_weights, paths.weights}, std::pair{staged_state, paths.state}}) {
    if (std::rename(from.c_str(), to.c_str()) != 0) {
      const std::string reason = std::strerror(errno);
      std::remove(staged_weights.c_str());
      std::remove(staged_state.c_str());
      fail<IoError>("cannot move snapshot file '", from, "' to '", to, "': ", reason);
    }
  }

  last_snapshot_iter_ = iter_;
  last_snapshot_ = paths.state;
  written_.push_back(paths);
  apply_retention();
  SnapshotInfo info{iter_, paths.weights, paths.state, elapsed_seconds()};
  for (TrainingObserver* o : observers_) o->on_snapshot(info);
  return paths;
}

// This run's older pairs go once a new one is in place: the newest
// snapshot_keep stay, and of the older ones the best (snapshot_best).
void Solver::apply_retention() {
  if (config_.snapshot_keep <= 0) return;
  const std::string best = best_iter_ >= 0 ? snapshot_paths(config_.snapshot_prefix, best_iter_).state : "";
  auto it = written_.begin();
  while (static_cast<int64_t>(written_.end() - it) > config_.snapshot_keep) {
    if (it->state == best) {
      ++it;
      continue;
    }
    std::remove(it->state.c_str());  // the state first: it points at the weights
    std::remove(it->weights.c_str());
    it = written_.erase(it);
  }
}

std::string Solver::write_snapshot_if_enabled() {
  if (last_snapshot_iter_ == iter_) return last_snapshot_;
  if (options_.snapshots == SnapshotWriting::kDisabled) {
    // Take part in the hook's collective work (every rank reaches each
    // snapshot point) and, in a tensor-parallel group, in gathering the split
    // history and weights in the order the writing rank does, then write nothing.
    const bool split = has_split_params(*net_);
    if (!strategies_.empty() || split) {
      SolverState st = capture_state(snapshot_paths(config_.snapshot_prefix, iter_));
      for (TrainingStrategy* t : strategies_) t->snapshot_state(st);
      if (split) gather_split_params(*net_);
    }
    last_snapshot_iter_ = iter_;
    return last_snapshot_;
  }
  return snapshot().state;
}

void Solver::adapt_layer_states(SolverState& st, ResumeInfo& info) const {
  info.snapshot_world_size = 1;
  auto it = st.layer_states.find(kWorldSizeStateKey);
  if (it != st.layer_states.end()) {
    char* end = nullptr;
    const long ws = std::strtol(it->second.c_str(), &end, 10);
    if (it->second.empty() || *end != '\0' || ws < 1) {
      fail<IoError>(info.state_path, ": bad world size '", it->second, "' in the layer states");
    }
    info.snapshot_world_size = static_cast<int>(ws);
  }
  const bool same_world = info.snapshot_world_size == options_.world_size;
  select_rank_states(st.layer_states, same_world ? options_.rank : 0);
  select_rank_states(st.test_layer_states, same_world ? options_.rank : 0);
  if (same_world) return;
  // Each rank read its own shard (i % world == rank); with another number of
  // ranks no saved position means anything, so the data layers start afresh.
  for (const std::string& name : source_layer_names(*net_)) {
    auto state = st.layer_states.find(name);
    if (state == st.layer_states.end()) continue;
    info.data_order_restarted |= !state->second.empty();  // Input layers keep no state
    st.layer_states.erase(state);
  }
  if (test_net_) {
    for (const std::string& name : source_layer_names(*test_net_)) st.test_layer_states.erase(name);
  }
}

ResumeInfo Solver::restore(const std::string& state_path) {
  SolverState st = load_solver_state(state_path);
  slice_split_history(*net_, st.history);  // tensor parallel: this rank's blocks
  ResumeInfo info;
  info.state_path = state_path;
  // The FP16 loss scaler's state; absent in snapshots of other precisions.
  std::string loss_scale_state;
  if (auto ls = st.layer_states.find(kLossScaleStateKey); ls != st.layer_states.end()) loss_scale_state = ls->second;
  std::string best_state;  // snapshot_best's record, when the run had one
  if (auto b = st.layer_states.find(kBestStateKey); b != st.layer_states.end()) best_state = b->second;
  adapt_layer_states(st, info);
  const std::string mine = solver_type_name(config_.optimizer.type);
  if (st.solver_type != mine) {
    fail<ConfigError>(state_path, ": this snapshot was written by the ", st.solver_type,
                      " solver, but the solver config asks for ", mine,
                      "; resume with the same type, or start from its weights (--weights) instead");
  }
  std::string weights = join_path(dirname_of(state_path), st.weights_file);
  if (st.weights_file.empty() || !file_exists(weights)) {
    const std::string by_name = weights_path_for_state(state_path);
    if (!file_exists(by_name)) {
      fail<IoError>(state_path, ": the snapshot's weights file ",
                    st.weights_file.empty() ? by_name : weights, " does not exist; it must lie beside the state file");
    }
    weights = by_name;
  }

  // Check the history before touching anything, so a failed restore leaves
  // the solver as it was (apart from nothing).
  std::vector<std::pair<std::string, Tensor>> mine_hist = optimizer_->state_tensors();
  std::set<std::string> expected;
  for (const auto& kv : mine_hist) expected.insert(kv.first);
  std::vector<std::string> unexpected, shape_errors;
  std::map<std::string, const Tensor*> from_file;
  for (const auto& [name, t] : st.history) {
    if (!expected.count(name)) {
      unexpected.push_back(name);
      continue;
    }
    from_file[name] = &t;
  }
  std::vector<std::string> missing;
  for (const auto& [name, t] : mine_hist) {
    auto it = from_file.find(name);
    if (it == from_file.end()) {
      missing.push_back(name);
    } else if (it->second->shape() != t.shape()) {
      shape_errors.push_back("'" + name + "': snapshot has " + shape_str(it->second->shape()) + ", net has " +
                             shape_str(t.shape()));
    }
  }
  if (!missing.empty() || !unexpected.empty()) {
    std::string msg = state_path + ": the optimizer history does not match the net's learnable parameters";
    if (!missing.empty()) msg += "\n  not in the snapshot: " + join(missing);
    if (!unexpected.empty()) msg += "\n  in the snapshot but not learnable in this net: " + join(unexpected);
    msg += "\n  (changing lr_mult or the layers breaks an exact resume; start from the weights with --weights instead)";
    throw ConfigError(msg);
  }
  if (!shape_errors.empty()) {
    throw ShapeError(state_path + ": optimizer history shapes differ from the net's parameters: " + join(shape_errors));
  }

  LoadOptions lo;
  lo.missing = MissingParams::kError;
  lo.unexpected = UnexpectedParams::kError;
  load_weights(*net_, weights, lo);
  for (auto& [name, t] : mine_hist) t.copy_from(*from_file.at(name));
  optimizer_->set_steps(st.optimizer_steps);
  if (scaler_ && !loss_scale_state.empty()) {
    std::istringstream ls(loss_scale_state);
    double scale = 0.0;
    int64_t good = 0;
    ls >> scale >> good;
    scaler_->set_state(scale, good);
  }
  if (!best_state.empty() && !config_.snapshot_best.empty()) {
    // Only a record of the same metric carries over.
    std::istringstream best(best_state);
    std::string metric;
    best >> best_iter_ >> best_value_ >> metric;
    if (best.fail() || metric != config_.snapshot_best) best_iter_ = -1;
  }
  net_->load_layer_states(st.layer_states);
  if (test_net_) test_net_->load_layer_states(st.test_layer_states);
  iter_ = st.iter;
  loss_window_.assign(st.loss_window.begin(), st.loss_window.end());
  while (static_cast<int64_t>(loss_window_.size()) > config_.average_loss) loss_window_.pop_front();
  last_snapshot_iter_ = iter_;
  last_snapshot_ = state_path;

  info.iter = iter_;
  info.weights_path = weights;
  info.config_changed = st.config_fingerprint != config_.fingerprint();
  if (info.config_changed && !st.settings.empty()) {
    info.settings_change = describe_settings_change(st.settings, config_.training_settings());
  }
  return info;
}

// ---- strategies ----

template <typename Pred>
TrainingStrategy* Solver::owner(Pred owns) const {
  for (TrainingStrategy* t : strategies_) {
    if (owns(*t)) return t;
  }
  return nullptr;
}

void Solver::attach(TrainingStrategy& strategy) {
  if (std::find(strategies_.begin(), strategies_.end(), &strategy) != strategies_.end()) return;
  struct Role {
    const char* what;
    bool (TrainingStrategy::*owns)() const;
  };
  for (const Role& role : {Role{"the step", &TrainingStrategy::owns_step}, Role{"the test", &TrainingStrategy::owns_test},
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
  for (TrainingObserver* o : observers_) o->on_start(start);

  const bool testing = test_net_ && config_.test_interval > 0;
  if (testing && iter_ == 0 && config_.test_initialization) run_test_and_report();

  SolveResult result;
  while (iter_ < config_.max_iter) {
    step();
    if (config_.display > 0 && iter_ % config_.display == 0) report_iteration();
    if (testing && iter_ % config_.test_interval == 0) run_test_and_report();
    if (config_.snapshot > 0 && iter_ % config_.snapshot == 0) write_snapshot_if_enabled();
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
