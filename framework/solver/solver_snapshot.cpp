// The Solver's snapshots: what a state file holds, writing a snapshot pair
// atomically, retention (snapshot_keep, snapshot_best) and resuming from one.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "framework/timeline.h"
#include "framework/error.h"
#include "framework/io/file_util.h"
#include "framework/solver/solver.h"

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

// Reserved layer-state key holding the FP16 loss scaler ("<scale> <good steps>").
constexpr const char* kLossScaleStateKey = "@loss_scale";
// Reserved layer-state key holding snapshot_best's record ("<iteration> <value>").
constexpr const char* kBestStateKey = "@best";

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
// Returns whether the states held this rank's own entries ("@rank<r>/..."; rank 0's are the plain ones).
bool select_rank_states(std::map<std::string, std::string>& states, int rank) {
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
  return found || rank == 0;
}

}  // namespace

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
  const TimelineScope event("snapshot", "snapshot");
  settle_results();  // the optimizer's and the scaler's counts as the device left them
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
  const bool own = select_rank_states(st.layer_states, same_world ? options_.rank : 0);
  select_rank_states(st.test_layer_states, same_world ? options_.rank : 0);
  if (same_world && own) return;
  // Each rank read its own shard (i % world == rank); with another number of
  // ranks no saved position means anything, so the data layers start afresh;
  // so do they on a rank whose position the snapshot lacks (a parameter-server
  // worker: worker 0 writes the snapshot alone).
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
  settle_results();
  // A captured step points into the ledger and may into the tensors a restore replaces: capture it again.
  graph_.reset();
  ledger_.reset();  // the next step starts from the restored scale and update count
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

}  // namespace strata
