#include "parallel/pipeline.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <unistd.h>
#include <utility>

#include "framework/checkpoint.h"
#include "framework/error.h"
#include "framework/file_util.h"
#include "framework/net_spec.h"
#include "framework/safetensors.h"

namespace strata::parallel {

namespace {

using Clock = std::chrono::steady_clock;

// Message tags: boundary b's activation is 2b, its gradient 2b + 1.
constexpr int kSetupTag = 1 << 20;
constexpr int kSnapshotTag = (1 << 20) + 1;
constexpr int kTestSetupTag = (1 << 20) + 2;
constexpr int kTestResultTag = (1 << 20) + 3;
// TEST-phase boundary b's activation (the TEST plan's boundaries).
constexpr int kTestTagBase = 1 << 19;
constexpr int kMaxDims = 8;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The seed the Solver gives rank r's nets (framework/solver.cpp rank_seed;
// the feeder net is built here and must shuffle like the Solver's would).
uint64_t rank_seed(uint64_t seed, int rank) {
  if (rank == 0) return seed;
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(rank) + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
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

// The stage's compute net config with every layer marked TRAIN-only and one
// empty TEST-phase Input layer: the Solver's own TEST net (built from this
// config) is then an empty stand-in, and the real test runs through the
// stages in the before_test hook (PipelineParallel::run_test).
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

// The scalar outputs of a net, in output order (as the Solver reports them).
NamedValues net_scalar_outputs(Net& net) {
  NamedValues out;
  for (const std::string& name : net.output_names()) {
    const Blob& b = net.blob(name);
    if (b.numel() == 1) out.emplace_back(name, b.data.data<float>()[0]);
  }
  return out;
}

// Appends length-prefixed fields to a byte string (the snapshot message).
void put_u64(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
void put_bytes(std::string& out, const void* p, size_t n) {
  put_u64(out, n);
  out.append(static_cast<const char*>(p), n);
}
uint64_t get_u64(const std::string& in, size_t& pos) {
  STRATA_CHECK(pos + 8 <= in.size(), "truncated pipeline snapshot message");
  uint64_t v;
  std::memcpy(&v, in.data() + pos, 8);
  pos += 8;
  return v;
}
std::string get_bytes(const std::string& in, size_t& pos) {
  const uint64_t n = get_u64(in, pos);
  STRATA_CHECK(pos + n <= in.size(), "truncated pipeline snapshot message");
  std::string s = in.substr(pos, n);
  pos += n;
  return s;
}

enum Record : uint64_t { kWeight = 0, kHistory = 1, kLayerState = 2 };

void put_tensor(std::string& out, uint64_t kind, const std::string& name, const Tensor& t) {
  put_u64(out, kind);
  put_bytes(out, name.data(), name.size());
  put_u64(out, t.shape().size());
  for (int64_t d : t.shape()) put_u64(out, static_cast<uint64_t>(d));
  put_bytes(out, t.raw_data(), t.nbytes());
}

}  // namespace

// Sends queued tensors in order from a thread of its own, so that the
// schedule never blocks in a send (see the header).
struct PipelineParallel::Sender {
  Communicator& comm;
  std::mutex mu;
  std::condition_variable cv;
  struct Item {
    Tensor t;
    int dst;
    int tag;
  };
  std::deque<Item> queue;
  int busy = 0;
  bool stop = false;
  std::exception_ptr error;
  std::thread thread;

  explicit Sender(Communicator& c) : comm(c), thread([this] { loop(); }) {}
  ~Sender() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    cv.notify_all();
    thread.join();
  }
  void loop() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return stop || !queue.empty(); });
      if (queue.empty()) return;
      Item item = std::move(queue.front());
      queue.pop_front();
      ++busy;
      lock.unlock();
      try {
        if (!error) comm.send(item.t, item.dst, item.tag);
      } catch (...) {
        std::lock_guard<std::mutex> g(mu);
        error = std::current_exception();
      }
      lock.lock();
      --busy;
      cv.notify_all();
    }
  }
  void send(Tensor t, int dst, int tag) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (error) std::rethrow_exception(error);
      queue.push_back({std::move(t), dst, tag});
    }
    cv.notify_all();
  }
  // Waits until every queued tensor is sent (each send is bounded by the
  // communicator's timeout); rethrows a send's error.
  void flush() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return queue.empty() && busy == 0; });
    if (error) std::rethrow_exception(error);
  }
};

PipelineParallel::PipelineParallel(const SolverConfig& config, Communicator& activations, Communicator& gradients,
                                   const PipelineOptions& options)
    : options_(options), act_(activations), grad_(gradients), stage_(activations.rank()) {
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
  act_sender_ = std::make_unique<Sender>(act_);
  grad_sender_ = std::make_unique<Sender>(grad_);
  solver_->set_step_runner([this] { return run_step(); });
}

PipelineParallel::~PipelineParallel() {
  if (solver_) {
    solver_->set_step_runner(nullptr);
    solver_->set_weights_writer(nullptr);
  }
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
  for (int b : plan_.incoming(stage_)) {
    PipelineBoundary& pb = plan_.boundaries[b];
    Tensor d({4 + kMaxDims}, DType::kI32);
    act_.recv(d, pb.from, kSetupTag);
    const int32_t* v = d.data<int32_t>();
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
  for (int b : plan_.outgoing(stage_)) {
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
    act_.send(d, pb.to, kSetupTag);
  }
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
  for (const PipeOp& op : ops_) {
    if (op.kind == PipeOpKind::kForward) {
      loss += forward(op.micro);
    } else {
      backward(op.micro);
    }
  }
  act_sender_->flush();
  grad_sender_->flush();
  Tensor l({1});
  l.data<float>()[0] = static_cast<float>(loss / options_.config.micro_batches);
  act_.allreduce(l, ReduceOp::kSum);
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
  Net& net = *slots_[static_cast<size_t>(micro) % slots_.size()];
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
  for (int b : plan_.incoming(stage_)) {
    const PipelineBoundary& pb = plan_.boundaries[b];
    Blob& blob = net.blob(pb.blob);
    blob.resize(pb.shape);
    act_.recv(blob.data, pb.from, 2 * b);
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
    act_sender_->send(blob.data.clone(), pb.to, 2 * b);
  }
  return loss;
}

void PipelineParallel::backward(int micro) {
  Net& net = *slots_[static_cast<size_t>(micro) % slots_.size()];
  // Gradients of what this stage sent, from each receiver.
  std::map<int, std::vector<int>> inject;  // writer layer index -> boundaries
  for (int b : plan_.outgoing(stage_)) {
    const PipelineBoundary& pb = plan_.boundaries[b];
    net.blob(pb.blob).diff.zero();
    if (!pb.carries_grad) continue;
    Tensor& g = grad_in_[static_cast<size_t>(b)];
    g.resize(pb.shape);
    grad_.recv(g, pb.to, 2 * b + 1);
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
    for (int b : it->second) {
      Tensor& diff = net.blob(plan_.boundaries[b].blob).diff;
      const Tensor& g = grad_in_[static_cast<size_t>(b)];
      float* d = diff.data<float>();
      const float* s = g.data<float>();
      for (int64_t i = 0; i < g.numel(); ++i) d[i] += s[i];
    }
    hi = p;
  }
  net.backward(0, hi);
  compute_acc_ += seconds_since(t);
  for (int b : plan_.incoming(stage_)) {
    const PipelineBoundary& pb = plan_.boundaries[b];
    if (!pb.carries_grad) continue;
    grad_sender_->send(net.blob(pb.blob).diff.clone(), pb.from, 2 * b + 1);
  }
}

void PipelineParallel::install_snapshot_hooks(Communicator* dp) {
  if (dp) dp_ = dp;
  solver_->set_snapshot_state_hook([this](SolverState& st) { gather_snapshot(st); });
  if (stage_ == 0 && options_.snapshots == SnapshotWriting::kEnabled) {
    solver_->set_weights_writer([this](const std::string& path, const Metadata& md) { write_weights(path, md); });
  }
}

// Every stage's parameters, history and layer states go to stage 0.
void PipelineParallel::gather_snapshot(SolverState& st) {
  const bool writer = options_.snapshots == SnapshotWriting::kEnabled;
  // Layer states with full-net names: the compute net's own layers and the
  // feeder's data layers (not the pipeline's Input layers).
  std::map<std::string, std::string> states;
  for (const auto& [name, value] : slots_[0]->save_layer_states()) {
    if (name.rfind("pipeline_", 0) != 0) states[name] = value;
  }
  std::map<std::string, std::string> data_states;  // the feeder's data layers
  if (feeder_) {
    for (const auto& [name, value] : feeder_->save_layer_states()) {
      if (name.rfind("pipeline_", 0) != 0) data_states[name] = value;
    }
    states.insert(data_states.begin(), data_states.end());
  }
  // Data-parallel pipelines: each dp rank's data cursors go to dp rank 0 as
  // "@rank<r>/<layer>" (as DataParallel keeps them), so that every rank
  // resumes its own shard.
  if (feeder_ && dp_ && dp_->world_size() > 1) {
    if (dp_->rank() != 0) {
      std::string msg;
      for (const auto& [name, value] : data_states) {
        put_bytes(msg, name.data(), name.size());
        put_bytes(msg, value.data(), value.size());
      }
      Tensor len({1}, DType::kI32);
      len.data<int32_t>()[0] = static_cast<int32_t>(msg.size());
      dp_->send(len, 0, kSnapshotTag);
      Tensor body({std::max<int64_t>(1, static_cast<int64_t>(msg.size()))}, DType::kU8);
      if (!msg.empty()) std::memcpy(body.raw_data(), msg.data(), msg.size());
      dp_->send(body, 0, kSnapshotTag);
    } else {
      for (int r = 1; r < dp_->world_size(); ++r) {
        Tensor len({1}, DType::kI32);
        dp_->recv(len, r, kSnapshotTag);
        Tensor body({std::max<int64_t>(1, len.data<int32_t>()[0])}, DType::kU8);
        dp_->recv(body, r, kSnapshotTag);
        const std::string msg(static_cast<const char*>(body.raw_data()), static_cast<size_t>(len.data<int32_t>()[0]));
        size_t pos = 0;
        while (pos < msg.size()) {
          const std::string name = get_bytes(msg, pos);
          states[rank_state_prefix(r) + name] = get_bytes(msg, pos);
        }
      }
    }
  }
  // Tensor parallelism: whole tensors in the file (the history in `st` was
  // gathered by the Solver's capture_state). gather_split_params is a
  // collective over the stage's tp group: the Solver calls it once more
  // after this hook on every rank whose Solver writes no files (every rank
  // of stages > 0, and the non-writers of stage 0), so on stages > 0 all
  // ranks call it here too, and on stage 0 only the writer (whose Solver
  // does not).
  std::map<int, Tensor> full;
  if (writer || stage_ != 0) full = gather_split_params(*slots_[0]);
  if (!writer) return;  // another pipeline (dp rank > 0) or tp rank writes
  const std::vector<NetParam>& params = slots_[0]->params();
  auto whole = [&](int i) -> const Tensor& {
    auto it = full.find(i);
    return it != full.end() ? it->second : params[static_cast<size_t>(i)].blob->data;
  };
  if (stage_ != 0) {
    std::string msg;
    for (int i = 0; i < static_cast<int>(params.size()); ++i) put_tensor(msg, kWeight, params[i].name, whole(i));
    for (const auto& [name, t] : st.history) put_tensor(msg, kHistory, name, t);
    for (const auto& [name, value] : states) {
      put_u64(msg, kLayerState);
      put_bytes(msg, name.data(), name.size());
      put_bytes(msg, value.data(), value.size());
    }
    Tensor len({1}, DType::kI32);
    len.data<int32_t>()[0] = static_cast<int32_t>(msg.size());
    STRATA_CHECK(msg.size() < (size_t{1} << 31), "pipeline snapshot message over 2 GiB");
    act_.send(len, 0, kSnapshotTag);
    Tensor body({static_cast<int64_t>(msg.size())}, DType::kU8);
    if (!msg.empty()) std::memcpy(body.raw_data(), msg.data(), msg.size());
    act_.send(body, 0, kSnapshotTag);
    return;
  }
  snapshot_weights_.clear();
  std::set<std::string> names;
  for (int i = 0; i < static_cast<int>(params.size()); ++i) {
    if (names.insert(params[i].name).second) snapshot_weights_.emplace_back(params[i].name, whole(i));
  }
  // Keep the Solver's "@world_size" (the dp size): a resume with another
  // number of data-parallel ranks then restarts the data order.
  auto ws = st.layer_states.find(kWorldSizeStateKey);
  const std::string world_size = ws == st.layer_states.end() ? "" : ws->second;
  st.layer_states.clear();
  for (auto& kv : states) st.layer_states.insert(kv);
  // The TEST data layers' cursors (stage 0's: where the data layers are).
  st.test_layer_states.clear();
  if (test_feeder_) {
    for (const auto& [name, value] : test_feeder_->save_layer_states()) {
      if (name.rfind("pipeline_", 0) != 0) st.test_layer_states[name] = value;
    }
  }
  if (!world_size.empty()) st.layer_states[kWorldSizeStateKey] = world_size;
  for (int s = 1; s < plan_.stages; ++s) {
    Tensor len({1}, DType::kI32);
    act_.recv(len, s, kSnapshotTag);
    Tensor body({len.data<int32_t>()[0]}, DType::kU8);
    act_.recv(body, s, kSnapshotTag);
    const std::string msg(static_cast<const char*>(body.raw_data()), body.nbytes());
    size_t pos = 0;
    while (pos < msg.size()) {
      const uint64_t kind = get_u64(msg, pos);
      const std::string name = get_bytes(msg, pos);
      if (kind == kLayerState) {
        st.layer_states[name] = get_bytes(msg, pos);
        continue;
      }
      Shape shape(get_u64(msg, pos));
      for (auto& d : shape) d = static_cast<int64_t>(get_u64(msg, pos));
      const std::string data = get_bytes(msg, pos);
      Tensor t(shape);
      STRATA_CHECK(data.size() == t.nbytes(), "pipeline snapshot: '", name, "' has ", data.size(), " bytes");
      if (!data.empty()) std::memcpy(t.raw_data(), data.data(), data.size());
      if (kind == kWeight) {
        if (names.insert(name).second) snapshot_weights_.emplace_back(name, std::move(t));
      } else {
        st.history.emplace_back(name, std::move(t));
      }
    }
  }
}

void PipelineParallel::write_weights(const std::string& path, const Metadata& md) {
  std::vector<TensorToWrite> tensors;
  for (const auto& [name, t] : snapshot_weights_) tensors.push_back({name, DType::kF32, t.shape(), t.raw_data()});
  // The same metadata as save_weights of the unsplit net: the files are alike.
  Metadata m = md;
  m.emplace("format", "strata");
  m.emplace("net", solver_->net().name());
  write_safetensors(path, tensors, m);
}

// TEST phase: stages build in order, as in exchange_setup, from the TEST
// plan; forward only, so no gradient flags.
void PipelineParallel::setup_test(const SolverConfig& config, const NetOptions& train_options) {
  ConfigNode root;
  std::string base_dir;
  if (!test_net_config(config, root, base_dir)) return;
  test_plan_ = plan_test_pipeline(root, plan_);
  NetOptions o = train_options;
  o.phase = Phase::kTest;
  o.base_dir = base_dir;
  std::map<std::string, Shape> shapes;
  if (!test_plan_.sources(stage_).empty()) {
    test_feeder_ = std::make_unique<Net>(stage_feeder_config(test_plan_, stage_), o);
    for (int i : test_plan_.sources(stage_)) {
      for (const auto& t : test_plan_.layers[i].tops) shapes[t] = test_feeder_->blob(t).shape();
    }
  }
  std::string received;
  for (int b : test_plan_.incoming(stage_)) {
    PipelineBoundary& pb = test_plan_.boundaries[b];
    Tensor d({4 + kMaxDims}, DType::kI32);
    act_.recv(d, pb.from, kTestSetupTag);
    const int32_t* v = d.data<int32_t>();
    if (v[0] != name_hash(pb.blob)) {
      fail<ConfigError>("pipeline stage ", stage_, ": TEST boundary #", b, " should carry blob '", pb.blob,
                        "' from stage ", pb.from, ", but stage ", pb.from, " sent a different blob");
    }
    pb.shape.assign(v + 2, v + 2 + v[1]);
    pb.carries_grad = false;
    shapes[pb.blob] = pb.shape;
    received += std::string(received.empty() ? "" : "; ") + "'" + pb.blob + "' " + shape_str(pb.shape) +
                " from stage " + std::to_string(pb.from);
  }
  try {
    test_net_ = std::make_unique<Net>(stage_compute_config(test_plan_, stage_, shapes), o);
  } catch (const ShapeError& e) {
    if (received.empty()) throw;
    throw ShapeError(std::string(e.what()) + "\n  (TEST net of pipeline stage " + std::to_string(stage_) + ", receiving " +
                     received + "; the stages disagree on the shape at this boundary)");
  }
  test_net_->share_params_from(solver_->net());
  for (int b : test_plan_.outgoing(stage_)) {
    PipelineBoundary& pb = test_plan_.boundaries[b];
    pb.shape = test_net_->blob(pb.blob).shape();
    pb.carries_grad = false;
    if (static_cast<int>(pb.shape.size()) > kMaxDims) {
      fail<ShapeError>("pipeline TEST boundary '", pb.blob, "' has ", pb.shape.size(), " dimensions; at most ",
                       kMaxDims);
    }
    Tensor d({4 + kMaxDims}, DType::kI32);
    d.zero();
    int32_t* v = d.data<int32_t>();
    v[0] = name_hash(pb.blob);
    v[1] = static_cast<int32_t>(pb.shape.size());
    for (size_t k = 0; k < pb.shape.size(); ++k) v[2 + k] = static_cast<int32_t>(pb.shape[k]);
    act_.send(d, pb.to, kTestSetupTag);
  }
}

// test_iter batches through the stages, forward only; the last stage's
// scalar outputs, averaged, reach every stage (and are averaged over dp).
NamedValues PipelineParallel::run_test() {
  const int64_t batches = solver_->config().test_iter;
  const bool last = stage_ == plan_.stages - 1;
  NamedValues sums;
  for (int64_t it = 0; it < batches; ++it) {
    if (test_feeder_) {
      test_feeder_->forward();
      for (int i : test_plan_.sources(stage_)) {
        for (const auto& top : test_plan_.layers[i].tops) {
          Blob& dst = test_net_->blob(top);
          const Blob& src = test_feeder_->blob(top);
          dst.resize(src.shape());
          dst.data.copy_from(src.data);
        }
      }
    }
    for (int b : test_plan_.incoming(stage_)) {
      const PipelineBoundary& pb = test_plan_.boundaries[b];
      Blob& blob = test_net_->blob(pb.blob);
      blob.resize(pb.shape);
      act_.recv(blob.data, pb.from, kTestTagBase + b);
    }
    test_net_->forward();
    for (int b : test_plan_.outgoing(stage_)) {
      const PipelineBoundary& pb = test_plan_.boundaries[b];
      const Blob& blob = test_net_->blob(pb.blob);
      if (blob.shape() != pb.shape) {
        fail<ShapeError>("pipeline TEST boundary '", pb.blob, "' (stage ", pb.from, " -> ", pb.to,
                         ") was set up as ", shape_str(pb.shape), " but batch ", it, " has ",
                         shape_str(blob.shape()), "; every TEST batch must have the same shape");
      }
      act_sender_->send(blob.data.clone(), pb.to, kTestTagBase + b);
    }
    if (!last) continue;
    const NamedValues now = net_scalar_outputs(*test_net_);
    if (sums.empty()) {
      sums = now;
    } else {
      for (size_t k = 0; k < sums.size() && k < now.size(); ++k) sums[k].second += now[k].second;
    }
  }
  act_sender_->flush();
  // The last stage's results to every stage, as text ("name\tvalue\n"...).
  std::string text;
  if (last) {
    char buf[64];
    for (const auto& [name, sum] : sums) {
      std::snprintf(buf, sizeof buf, "%.17g", batches > 0 ? sum / static_cast<double>(batches) : 0.0);
      text += name + "\t" + buf + "\n";
    }
  }
  Tensor len({1}, DType::kI32);
  len.data<int32_t>()[0] = static_cast<int32_t>(text.size());
  act_.broadcast(len, plan_.stages - 1);
  Tensor body({std::max<int32_t>(1, len.data<int32_t>()[0])}, DType::kU8);
  if (last && !text.empty()) std::memcpy(body.raw_data(), text.data(), text.size());
  act_.broadcast(body, plan_.stages - 1);
  text.assign(static_cast<const char*>(body.raw_data()), static_cast<size_t>(len.data<int32_t>()[0]));
  NamedValues out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t tab = text.find('\t', pos), nl = text.find('\n', pos);
    STRATA_CHECK(tab != std::string::npos && nl != std::string::npos && tab < nl, "bad pipeline test result");
    out.emplace_back(text.substr(pos, tab - pos), std::strtod(text.c_str() + tab + 1, nullptr));
    pos = nl + 1;
  }
  if (dp_ && dp_->world_size() > 1 && !out.empty()) {
    Tensor t({static_cast<int64_t>(out.size())});
    for (size_t i = 0; i < out.size(); ++i) t.data<float>()[i] = static_cast<float>(out[i].second);
    dp_->allreduce(t, ReduceOp::kAverage);
    for (size_t i = 0; i < out.size(); ++i) out[i].second = t.data<float>()[i];
  }
  return out;
}

void PipelineParallel::install_test_hooks(Communicator* dp, std::function<void()> before_test) {
  if (dp) dp_ = dp;
  if (!test_net_) return;
  solver_->set_before_test([this, before_test = std::move(before_test)] {
    if (before_test) before_test();
    test_result_ = run_test();
    test_pending_ = true;
  });
  // The Solver's own TEST net is an empty stand-in: its (empty) outputs are
  // replaced by the pipeline's; TRAIN outputs are averaged over dp as
  // DataParallel does.
  solver_->set_outputs_reducer([this](NamedValues& values) {
    if (test_pending_) {
      values = test_result_;
      test_pending_ = false;
      return;
    }
    if (!dp_ || dp_->world_size() == 1 || values.empty()) return;
    Tensor t({static_cast<int64_t>(values.size())});
    for (size_t i = 0; i < values.size(); ++i) t.data<float>()[i] = static_cast<float>(values[i].second);
    dp_->allreduce(t, ReduceOp::kAverage);
    for (size_t i = 0; i < values.size(); ++i) values[i].second = t.data<float>()[i];
  });
}

// The snapshot names every parameter of the whole net; this stage writes
// its own parameters and their history into a private snapshot pair and
// restores that with Solver::restore (which checks names and shapes, and
// restores the iteration, loss window and layer states).
ResumeInfo PipelineParallel::restore(const std::string& state_path) {
  SolverState st = load_solver_state(state_path);
  std::string weights = join_path(dirname_of(state_path), st.weights_file);
  if (st.weights_file.empty() || !file_exists(weights)) weights = weights_path_for_state(state_path);
  if (!file_exists(weights)) {
    fail<IoError>(state_path, ": the snapshot's weights file ", weights, " does not exist; it must lie beside the "
                  "state file");
  }
  SafetensorsReader reader(weights);
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (const NetParam& p : slots_[0]->params()) {
    if (seen.insert(p.name).second) names.push_back(p.name);
  }
  std::vector<TensorToWrite> tensors;
  std::vector<std::string> missing;
  for (const std::string& name : names) {
    const TensorView* v = reader.find(name);
    if (!v) {
      missing.push_back(name);
      continue;
    }
    tensors.push_back({name, v->dtype, v->shape, v->data});
  }
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    fail<ConfigError>(state_path, ": pipeline stage ", stage_, " needs parameters that ", weights,
                      " does not hold: ", list, "; was it written for another net?");
  }
  std::set<std::string> own_history;
  for (const auto& kv : solver_->optimizer().state_tensors()) own_history.insert(kv.first);
  std::vector<std::pair<std::string, Tensor>> history;
  for (auto& kv : st.history) {
    if (own_history.count(kv.first)) history.push_back(std::move(kv));
  }
  st.history = std::move(history);
  const std::map<std::string, std::string> all_states = st.layer_states;
  const std::map<std::string, std::string> test_states = st.test_layer_states;

  namespace fs = std::filesystem;
  // Unique per call: ranks may be threads of one process (tests).
  static std::atomic<int> calls{0};
  const fs::path dir = fs::temp_directory_path() / ("strata_pipeline_resume_" + std::to_string(::getpid()) + "_" +
                                                    std::to_string(calls++));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail<IoError>("cannot create temporary folder '", dir.string(), "': ", ec.message());
  const std::string base = fs::path(state_path).filename().string();
  const std::string stage_state = (dir / base).string();
  st.weights_file = base + ".weights.safetensors";
  ResumeInfo info;
  try {
    write_safetensors((dir / st.weights_file).string(), tensors, reader.metadata());
    save_solver_state(stage_state, st);
    info = solver_->restore(stage_state);
  } catch (...) {
    fs::remove_all(dir, ec);
    throw;
  }
  fs::remove_all(dir, ec);
  info.state_path = state_path;
  info.weights_path = weights;
  // The data layers live in the feeders, under their own names: dp rank 0
  // takes the plain entries, dp rank r its "@rank<r>/" ones. With another
  // number of pipelines the data order restarts.
  const bool same_world = info.snapshot_world_size == options_.dp_size;
  auto mine = [&](const std::map<std::string, std::string>& states) {
    std::map<std::string, std::string> out;
    const std::string prefix = rank_state_prefix(options_.dp_rank);
    for (const auto& [name, value] : states) {
      if (options_.dp_rank == 0 && !name.empty() && name[0] != '@') out[name] = value;
      if (options_.dp_rank != 0 && name.rfind(prefix, 0) == 0) out[name.substr(prefix.size())] = value;
    }
    return out;
  };
  if (feeder_) {
    const std::map<std::string, std::string> own = mine(all_states);
    if (same_world && !own.empty()) {
      feeder_->load_layer_states(own);
    } else {
      for (int i : plan_.sources(stage_)) {
        auto it = all_states.find(plan_.layers[i].name);
        info.data_order_restarted |= it != all_states.end() && !it->second.empty();
      }
    }
  }
  // Only dp rank 0's TEST cursors are kept; other pipelines start theirs afresh.
  if (test_feeder_ && same_world && options_.dp_rank == 0) test_feeder_->load_layer_states(mine(test_states));
  return info;
}

}  // namespace strata::parallel
