#include "framework/timeline.h"
#include "parallel/model_parallel/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <utility>

#include "framework/error.h"
#include "framework/io/file_util.h"
#include "framework/config/net_spec.h"
#ifdef STRATA_WITH_CUDA
#include "framework/cuda/device_api.h"
#endif

#include "parallel/model_parallel/pipeline_internal.h"

namespace strata::parallel {

using namespace pipeline_internal;

namespace {

// The stage's compute net config with every layer marked TRAIN-only and one
// empty TEST-phase Input layer: the Solver's own TEST net (built from this
// config) is then an empty stand-in, and the real test runs through the
// stages in PipelineParallel::run_test, which the Solver calls instead.
ConfigNode with_test_stand_in(const ConfigNode& root) {
  ConfigNode out = ConfigNode::block(root.key(), root.loc());
  for (const ConfigNode& c : root.children()) {
    if (c.key() != "layer" || c.has("phase")) {
      out.add_child(c);
      continue;
    }
    ConfigNode layer = c;
    layer.add_child(ConfigNode::scalar("phase", "TRAIN", false, c.loc()));
    out.add_child(std::move(layer));
  }
  const SourceLocation loc = root.loc();
  ConfigNode stub = ConfigNode::block("layer", loc);
  stub.add_child(ConfigNode::scalar("name", "pipeline_test", true, loc));
  stub.add_child(ConfigNode::scalar("type", "Input", true, loc));
  stub.add_child(ConfigNode::scalar("top", "pipeline_test", true, loc));
  stub.add_child(ConfigNode::scalar("phase", "TEST", false, loc));
  ConfigNode param = ConfigNode::block("input_param", loc);
  ConfigNode shape = ConfigNode::block("shape", loc);
  shape.add_child(ConfigNode::scalar("dim", "0", false, loc));
  param.add_child(std::move(shape));
  stub.add_child(std::move(param));
  out.add_child(std::move(stub));
  return out;
}

}  // namespace

namespace pipeline_internal {

void add_into(Tensor& dst, const Tensor& src) {
  STRATA_CHECK(dst.numel() == src.numel() && dst.dtype() == DType::kF32 && src.dtype() == DType::kF32 &&
                   dst.device() == src.device(),
               "pipeline: a received gradient ", shape_str(src.shape()), " on ", src.device().str(),
               " does not fit its blob's ", shape_str(dst.shape()), " on ", dst.device().str());
  const int64_t n = src.numel();
  if (dst.device().is_cpu()) {
    float* d = dst.data<float>();
    const float* s = src.data<float>();
    for (int64_t i = 0; i < n; ++i) d[i] += s[i];
    return;
  }
#ifdef STRATA_WITH_CUDA
  cuda::axpy_f32(n, 1.0f, src.device_data<float>(), dst.device_data<float>(), dst.device().index);
#else
  fail<Error>("pipeline: a gradient on ", dst.device().str(), " in a build without CUDA");
#endif
}

int32_t name_hash(const std::string& s) {
  uint32_t h = 2166136261u;
  for (unsigned char c : s) h = (h ^ c) * 16777619u;
  return static_cast<int32_t>(h & 0x7fffffff);
}

// The net config a solver config trains, and the folder its paths resolve against.
std::pair<ConfigNode, std::string> train_net_config(const SolverConfig& config) {
  if (config.has_net_param) return {config.net_param, config.base_dir};
  const std::string path = !config.net.empty() ? config.net : config.train_net;
  return {parse_config_file(path), dirname_of(path)};
}

// The config of the TEST net when the run tests (test_interval > 0 and the
// config has TEST-phase layers), and the folder its paths resolve against.
bool test_net_config(const SolverConfig& config, ConfigNode& root, std::string& base_dir) {
  if (config.test_interval <= 0) return false;
  if (config.has_net_param || !config.net.empty()) {
    std::tie(root, base_dir) = train_net_config(config);
  } else if (!config.test_net.empty()) {
    root = parse_config_file(config.test_net);
    base_dir = dirname_of(config.test_net);
  } else {
    return false;
  }
  for (const ConfigNode& c : root.children()) {
    if (c.key() == "layer" && layer_in_phase(c, Phase::kTest)) return true;
  }
  return false;
}

}  // namespace pipeline_internal

PipelineParallel::PipelineParallel(const SolverConfig& config, Communicator& activations, Communicator& gradients,
                                   const PipelineOptions& options)
    : options_(options), act_(activations), grad_(gradients), stage_(activations.rank()), dp_(options.dp) {
  const int P = activations.world_size();
  if (options.config.stages != P || gradients.world_size() != P || gradients.rank() != stage_) {
    fail<ConfigError>("pipeline of ", options.config.stages, " stages over a pp group of ", P,
                      " ranks (gradient group: ", gradients.world_size(), "); they must agree");
  }
  auto [root, base_dir] = train_net_config(config);
  plan_ = plan_pipeline(root, P, options.stage_of_layer);
  ops_ = pipeline_ops(options.config.schedule, P, stage_, options.config.micro_batches);

  NetOptions net_options;
  net_options.phase = Phase::kTrain;
  net_options.base_dir = base_dir;
  net_options.seed = rank_seed(config.random_seed, options.dp_rank);
  net_options.rank = options.dp_rank;
  net_options.world_size = options.dp_size;
  net_options.comm = options.tp;
  net_options.device = options.device;
  if (!plan_.sources(stage_).empty()) feeder_ = std::make_unique<Net>(stage_feeder_config(plan_, stage_), net_options);

  exchange_setup(config);
  setup_test(config, net_options);

  for (int i = 1; i < max_in_flight(ops_); ++i) {
    auto net = std::make_unique<Net>(solver_->config().net_param, net_options);
    net->share_params_from(solver_->net());
    slots_.push_back(net.get());
    extra_slots_.push_back(std::move(net));
  }
  grad_in_.resize(plan_.boundaries.size());
  batched_ = options.transfers == StageTransfers::kBatched ||
             (options.transfers == StageTransfers::kAuto && act_.backend() == CommBackend::kNccl);
  if (batched_) {
    step_batches_ = stage_transfer_batches(plan_, stage_, ops_);  // carries_grad is known after setup
  } else {
    act_sender_ = std::make_unique<Sender>(act_);
    grad_sender_ = std::make_unique<Sender>(grad_);
  }
  solver_->attach(*this);
  set_up_ = true;
}

PipelineParallel::~PipelineParallel() {
  if (solver_) solver_->detach(*this);
}

// Stages build in order: each waits for the shapes its senders announce,
// builds its nets, and announces its own outgoing boundaries.
void PipelineParallel::exchange_setup(const SolverConfig& config) {
  std::map<std::string, Shape> shapes;
  if (feeder_) {
    for (int i : plan_.sources(stage_)) {
      for (const auto& t : plan_.layers[i].tops) shapes[t] = feeder_->blob(t).shape();
    }
  }
  std::string received;  // for error messages
  // The announcements this stage waits for, one exchange per sender in
  // ascending stage order (exchange_one_peer_at_a_time says why).
  const std::vector<int> incoming = plan_.incoming(stage_);
  std::vector<Tensor> announced(incoming.size());
  std::vector<PeerTransfer> recvs;
  for (size_t k = 0; k < incoming.size(); ++k) {
    announced[k] = Tensor({4 + kMaxDims}, DType::kI32);
    recvs.push_back({PeerTransfer::Kind::kRecv, &announced[k], plan_.boundaries[incoming[k]].from, kSetupTag});
  }
  if (!recvs.empty()) {
    std::string from;
    for (int b : incoming) from += (from.empty() ? "" : ", ") + std::to_string(plan_.boundaries[b].from);
    const auto what = [&] {
      return "receive the shapes of the " + std::to_string(recvs.size()) +
             " incoming boundary blob(s) from stage(s) " + from + " (each stage builds after those below it)";
    };
    waiting_for(what, [&] { exchange_one_peer_at_a_time(act_, recvs, PeerOrder::kAscending); });
  }
  for (size_t k = 0; k < incoming.size(); ++k) {
    const int b = incoming[k];
    PipelineBoundary& pb = plan_.boundaries[b];
    const int32_t* v = announced[k].data<int32_t>();
    if (v[0] != name_hash(pb.blob)) {
      fail<ConfigError>("pipeline stage ", stage_, ": boundary #", b, " should carry blob '", pb.blob, "' from stage ",
                        pb.from, ", but stage ", pb.from,
                        " sent a different blob; do all ranks run the same net with the same stages?");
    }
    pb.shape.assign(v + 2, v + 2 + v[1]);
    pb.carries_grad = v[3 + kMaxDims] != 0;
    shapes[pb.blob] = pb.shape;
    received += std::string(received.empty() ? "" : "; ") + "'" + pb.blob + "' " + shape_str(pb.shape) +
                " from stage " + std::to_string(pb.from);
  }

  SolverConfig sc = config;
  sc.net_param = stage_compute_config(plan_, stage_, shapes);
  sc.has_net_param = true;
  sc.base_dir = train_net_config(config).second;
  sc.net.clear();
  sc.train_net.clear();
  sc.test_net.clear();
  sc.iter_size = options_.config.micro_batches;
  ConfigNode test_root;
  std::string test_dir;
  if (test_net_config(config, test_root, test_dir)) {
    sc.net_param = with_test_stand_in(sc.net_param);  // the Solver calls the test hooks
  } else {
    sc.test_interval = 0;
  }
  SolverOptions so;
  so.rank = options_.dp_rank;
  so.world_size = options_.dp_size;
  so.comm = options_.tp;
  so.device = options_.device;
  so.snapshots = options_.snapshots == SnapshotWriting::kEnabled && stage_ == 0 ? SnapshotWriting::kEnabled
                                                                                 : SnapshotWriting::kDisabled;
  const std::string context = "\n  (pipeline stage " + std::to_string(stage_) + " of " +
                              std::to_string(plan_.stages) + ", receiving " + received +
                              "; the stages disagree on the shape at this boundary)";
  try {
    solver_ = std::make_unique<Solver>(sc, so);
  } catch (const ShapeError& e) {
    if (received.empty()) throw;
    throw ShapeError(e.what() + context);
  }
  slots_.push_back(&solver_->net());
  Net& net = solver_->net();
  // The boundaries are read and written between forward and backward: they
  // keep their own memory under the solver's blob_memory plan.
  std::vector<std::string> boundaries;
  for (const PipelineBoundary& pb : plan_.boundaries) {
    if ((pb.from == stage_ || pb.to == stage_) && net.has_blob(pb.blob)) boundaries.push_back(pb.blob);
  }
  net.keep_blobs(boundaries);
  const std::vector<int> outgoing = plan_.outgoing(stage_);
  std::vector<Tensor> announcements;
  announcements.reserve(outgoing.size());
  std::vector<PeerTransfer> sends;
  for (int b : outgoing) {
    PipelineBoundary& pb = plan_.boundaries[b];
    pb.shape = net.blob(pb.blob).shape();
    // A data layer's blob (labels, or the input) takes no gradient.
    bool from_source = false;
    for (const auto& l : plan_.layers) from_source = from_source || (l.name == pb.writer && l.source);
    pb.carries_grad = !from_source && net.layer_needs_backward(net.layer_index(pb.writer));
    if (static_cast<int>(pb.shape.size()) > kMaxDims) {
      fail<ShapeError>("pipeline boundary '", pb.blob, "' has ", pb.shape.size(), " dimensions; at most ", kMaxDims);
    }
    Tensor d({4 + kMaxDims}, DType::kI32);
    d.zero();
    int32_t* v = d.data<int32_t>();
    v[0] = name_hash(pb.blob);
    v[1] = static_cast<int32_t>(pb.shape.size());
    for (size_t k = 0; k < pb.shape.size(); ++k) v[2 + k] = static_cast<int32_t>(pb.shape[k]);
    v[3 + kMaxDims] = pb.carries_grad ? 1 : 0;
    announcements.push_back(d);
    sends.push_back({PeerTransfer::Kind::kSend, &announcements.back(), pb.to, kSetupTag});
  }
  if (!sends.empty()) {
    const auto what = [&] {
      return "send the shapes of " + std::to_string(sends.size()) + " outgoing boundary blob(s)";
    };
    waiting_for(what, [&] { exchange_one_peer_at_a_time(act_, sends, PeerOrder::kAscending); });
  }
  connect_links_downward();
}

// The announcements connected every link upward. The step's batches hold
// several peers at once and may send gradients down a link for the first
// time, so one small message goes down every link now, in the mirrored
// order: from each stage above, in descending order, then to each stage
// below, in descending order (exchange_one_peer_at_a_time).
void PipelineParallel::connect_links_downward() {
  std::set<int> above, below;
  for (int b : plan_.outgoing(stage_)) above.insert(plan_.boundaries[b].to);
  for (int b : plan_.incoming(stage_)) below.insert(plan_.boundaries[b].from);
  std::vector<Tensor> tokens(above.size() + below.size(), Tensor({1}, DType::kI32));
  std::vector<PeerTransfer> recvs, sends;
  size_t k = 0;
  for (int peer : above) recvs.push_back({PeerTransfer::Kind::kRecv, &tokens[k++], peer, kSetupTag});
  for (int peer : below) {
    tokens[k].zero();
    sends.push_back({PeerTransfer::Kind::kSend, &tokens[k++], peer, kSetupTag});
  }
  const auto what = [] { return std::string("connect the links to the stages below (one int down each)"); };
  waiting_for(what, [&] {
    exchange_one_peer_at_a_time(act_, recvs, PeerOrder::kDescending);
    exchange_one_peer_at_a_time(act_, sends, PeerOrder::kDescending);
  });
}

MemoryReport PipelineParallel::memory_report() const {
  MemoryReport r = slots_[0]->memory_report();
  for (size_t i = 1; i < slots_.size(); ++i) r.activation_bytes += slots_[i]->memory_report().activation_bytes;
  if (feeder_) r.activation_bytes += feeder_->memory_report().activation_bytes;
  if (test_net_) r.activation_bytes += test_net_->memory_report().activation_bytes;
  if (test_feeder_) r.activation_bytes += test_feeder_->memory_report().activation_bytes;
  return r;
}

std::string PipelineParallel::times_line() const {
  const PipelineTimeTotals& t = totals_;
  char buf[256];
  const double n = static_cast<double>(std::max<int64_t>(1, t.steps));
  std::snprintf(buf, sizeof buf,
                "pipeline stage %d: %lld timed steps, step %.2f ms, compute %.2f ms, idle %.1f%% (theory %.1f%%)",
                stage_, static_cast<long long>(t.steps), 1e3 * t.step_seconds / n, 1e3 * t.compute_seconds / n,
                100.0 * t.idle_share(), 100.0 * theoretical_bubble(plan_.stages, options_.config.micro_batches));
  return buf;
}

float PipelineParallel::run_step() {
  const Clock::time_point start = Clock::now();
  compute_acc_ = 0.0;
  double loss = 0.0;
  for (size_t i = 0; i <= ops_.size(); ++i) {
    if (batched_ && !step_batches_[i].empty()) {  // the last op's sends, this op's receives
      waiting_for([&] { return describe_batch(step_batches_[i], i); }, [&] { exchange_batch(step_batches_[i]); });
    }
    if (i == ops_.size()) break;
    const PipeOp& op = ops_[i];
    if (op.kind == PipeOpKind::kForward) {
      loss += forward(op.micro);
    } else {
      backward(op.micro);
    }
  }
  if (!batched_) {
    const auto what = [] {
      return std::string("the end of the step: the queued sends of activations and gradients to the other stages");
    };
    waiting_for(what, [&] {
      act_sender_->flush();
      grad_sender_->flush();
    });
  }
  Tensor l({1});
  l.data<float>()[0] = static_cast<float>(loss / options_.config.micro_batches);
  const auto what = [&] {
    return "the end of the step: the loss, summed over the " + std::to_string(plan_.stages) +
           " stages (an allreduce over the pp group)";
  };
  waiting_for(what, [&] { act_.allreduce(l, ReduceOp::kSum); });
  times_.step_seconds = seconds_since(start);
  times_.compute_seconds = compute_acc_;
  if (++steps_run_ > 1) {  // the first step allocates: not timed
    ++totals_.steps;
    totals_.step_seconds += times_.step_seconds;
    totals_.compute_seconds += times_.compute_seconds;
  }
  return l.data<float>()[0];
}

float PipelineParallel::forward(int micro) {
  Net& net = slot(micro);
  if (feeder_) {
    const Clock::time_point t = Clock::now();
    feeder_->forward();
    for (int i : plan_.sources(stage_)) {
      for (const auto& top : plan_.layers[i].tops) {
        Blob& dst = net.blob(top);
        const Blob& src = feeder_->blob(top);
        dst.resize(src.shape());
        dst.data.copy_from(src.data);
      }
    }
    compute_acc_ += seconds_since(t);
  }
  for (int b : batched_ ? std::vector<int>() : plan_.incoming(stage_)) {  // kBatched: received already
    const PipelineBoundary& pb = plan_.boundaries[b];
    Blob& blob = net.blob(pb.blob);
    blob.resize(pb.shape);
    const TimelineScope event("pipeline", Timeline::on() ? "recv " + pb.blob + " from stage " + std::to_string(pb.from)
                                                         : std::string());
    const auto what = [&] {
      return "receive the activation '" + pb.blob + "' of micro-batch " + std::to_string(micro) + " from stage " +
             std::to_string(pb.from);
    };
    waiting_for(what, [&] { act_.recv(blob.data, pb.from, 2 * b); });
  }
  const Clock::time_point t = Clock::now();
  const float loss = net.forward();
  compute_acc_ += seconds_since(t);
  for (int b : plan_.outgoing(stage_)) {
    const PipelineBoundary& pb = plan_.boundaries[b];
    const Blob& blob = net.blob(pb.blob);
    if (blob.shape() != pb.shape) {
      fail<ShapeError>("pipeline boundary '", pb.blob, "' (stage ", pb.from, " -> ", pb.to, ") was set up as ",
                       shape_str(pb.shape), " but micro-batch ", micro, " has ", shape_str(blob.shape()),
                       "; every micro-batch must have the same shape");
    }
    if (!batched_) act_sender_->send(blob.data.clone(), pb.to, 2 * b);  // kBatched: with the next batch
  }
  return loss;
}

void PipelineParallel::backward(int micro) {
  Net& net = slot(micro);
  // Gradients of what this stage sent, from each receiver.
  std::map<int, std::vector<int>> inject;  // writer layer index -> boundaries
  for (int b : plan_.outgoing(stage_)) {
    const PipelineBoundary& pb = plan_.boundaries[b];
    net.blob(pb.blob).diff.zero();
    if (!pb.carries_grad) continue;
    if (!batched_) {  // kBatched: received already
      Tensor& g = grad_buffer(b);
      const TimelineScope event("pipeline", Timeline::on() ? "recv gradient of " + pb.blob + " from stage " +
                                                                 std::to_string(pb.to)
                                                           : std::string());
      const auto what = [&] {
        return "receive the gradient of '" + pb.blob + "' for micro-batch " + std::to_string(micro) + " from stage " +
               std::to_string(pb.to);
      };
      waiting_for(what, [&] { grad_.recv(g, pb.to, 2 * b + 1); });
    }
    inject[net.layer_index(pb.writer)].push_back(b);
  }
  for (int b : plan_.incoming(stage_)) net.blob(plan_.boundaries[b].blob).diff.zero();
  // Backward from the top down to each writer of a sent blob; its received
  // gradient is added after the stage's own readers of the blob wrote
  // theirs, before the writer's backward reads it.
  const Clock::time_point t = Clock::now();
  int hi = net.num_layers() - 1;
  for (auto it = inject.rbegin(); it != inject.rend(); ++it) {
    const int p = it->first;
    net.backward(p + 1, hi);
    for (int b : it->second) add_into(net.blob(plan_.boundaries[b].blob).diff, grad_in_[static_cast<size_t>(b)]);
    hi = p;
  }
  net.backward(0, hi);
  compute_acc_ += seconds_since(t);
  for (int b : plan_.incoming(stage_)) {
    const PipelineBoundary& pb = plan_.boundaries[b];
    if (!pb.carries_grad || batched_) continue;  // kBatched: with the next batch
    grad_sender_->send(net.blob(pb.blob).diff.clone(), pb.from, 2 * b + 1);
  }
}

Tensor& PipelineParallel::grad_buffer(int b) {
  const PipelineBoundary& pb = plan_.boundaries[static_cast<size_t>(b)];
  Tensor& g = grad_in_[static_cast<size_t>(b)];
  if (g.device() != options_.device || !g.defined()) {
    g = Tensor(pb.shape, DType::kF32, options_.device);
  } else {
    g.resize(pb.shape);
  }
  return g;
}

// One batch of kBatched transfers: a stage's sends of the pass just run and
// its receives for the next (pipeline_transfers.h), in one exchange.
void PipelineParallel::exchange_batch(const std::vector<StageTransfer>& batch) {
  if (batch.empty()) return;
  std::vector<PeerTransfer> sends, recvs;
  for (const StageTransfer& t : batch) {
    const PipelineBoundary& pb = plan_.boundaries[static_cast<size_t>(t.boundary)];
    const int tag = 2 * t.boundary + (t.gradient ? 1 : 0);
    if (t.kind == StageTransfer::Kind::kSend) {
      Blob& blob = slot(t.micro).blob(pb.blob);
      sends.push_back({PeerTransfer::Kind::kSend, t.gradient ? &blob.diff : &blob.data, t.peer, tag});
      continue;
    }
    Tensor* dst = nullptr;
    if (t.gradient) {
      dst = &grad_buffer(t.boundary);
    } else {
      Blob& blob = slot(t.micro).blob(pb.blob);
      blob.resize(pb.shape);
      dst = &blob.data;
    }
    recvs.push_back({PeerTransfer::Kind::kRecv, dst, t.peer, tag});
  }
  const TimelineScope event("pipeline", Timeline::on() ? "exchange of " + std::to_string(batch.size()) + " tensors"
                                                       : std::string());
  exchange_batch_transfers(act_, std::move(sends), recvs);
}

void PipelineParallel::waiting_for(const std::function<std::string()>& what,
                                   const std::function<void()>& wait) const {
  try {
    wait();
  } catch (const ConfigError&) {
    throw;  // a mistake in the run's setup, already named
  } catch (const Error& e) {
    const std::string when = set_up_ ? "iteration " + std::to_string(solver_->iter() + 1) : std::string("setup");
    throw Error("pipeline stage " + std::to_string(stage_) + " of " + std::to_string(plan_.stages) + " (" +
                act_.describe() + "), " + when + ": " + what() + ": " + e.what());
  }
}

std::string PipelineParallel::describe_transfer(const StageTransfer& t) const {
  const std::string blob = plan_.boundaries[static_cast<size_t>(t.boundary)].blob;
  const std::string what = t.gradient ? "the gradient of '" + blob + "' for" : "the activation '" + blob + "' of";
  const bool send = t.kind == StageTransfer::Kind::kSend;
  return std::string(send ? "send " : "receive ") + what + " micro-batch " + std::to_string(t.micro) +
         (send ? " to stage " : " from stage ") + std::to_string(t.peer);
}

std::string PipelineParallel::describe_batch(const std::vector<StageTransfer>& batch, size_t before_op) const {
  std::string s = "the exchange ";
  if (before_op < ops_.size()) {
    const PipeOp& op = ops_[before_op];
    s += std::string("before the ") + (op.kind == PipeOpKind::kForward ? "forward" : "backward") +
         " of micro-batch " + std::to_string(op.micro);
  } else {
    s += "after the step's last op";
  }
  s += " (";
  for (size_t k = 0; k < batch.size(); ++k) s += (k ? "; " : "") + describe_transfer(batch[k]);
  return s + ")";
}

}  // namespace strata::parallel
