#include "framework/net.h"
#include "framework/net_storage.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <limits>
#include <new>
#include <set>

#include "framework/byte_size.h"
#include "framework/cuda/device_timeline.h"
#include "framework/error.h"
#include "framework/io/file_util.h"
#include "framework/layer_registry.h"
#include "framework/memory_cap.h"
#include "framework/memory_plan.h"
#include "framework/config/net_spec.h"
#include "framework/timeline.h"
#ifdef STRATA_WITH_CUDA
#include "framework/cuda/device_api.h"
#endif

namespace strata {

namespace {

uint64_t mix_seed(uint64_t seed, uint64_t index) {
  // splitmix64: decorrelates per-layer seeds drawn from one run seed.
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (index + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

Net::Net(const ConfigNode& root, const NetOptions& options) : options_(options) { build(root); }

Net::~Net() = default;

namespace {

// The GPU side of a layer's timeline event (device_timeline.h); the spans
// exist only in a CUDA build with the timeline on.
#ifdef STRATA_WITH_CUDA
int device_span_begin(cuda::DeviceTimeline* t) { return t->begin(); }
void device_span_end(cuda::DeviceTimeline* t, int token, const char* category, const std::string& name) {
  t->end(token, category, name);
}
#else
int device_span_begin(cuda::DeviceTimeline*) { return -1; }
void device_span_end(cuda::DeviceTimeline*, int, const char*, const std::string&) {}
#endif

}  // namespace

cuda::DeviceTimeline* Net::device_timeline() {
#ifdef STRATA_WITH_CUDA
  if (!on_cuda() || !Timeline::on()) return nullptr;
  if (!device_timeline_) device_timeline_ = std::make_unique<cuda::DeviceTimeline>(options_.device.index);
  return device_timeline_.get();
#else
  return nullptr;
#endif
}

void Net::flush_device_timeline() {
#ifdef STRATA_WITH_CUDA
  if (device_timeline_) device_timeline_->flush();
#endif
}

std::unique_ptr<Net> Net::from_file(const std::string& path, NetOptions options) {
  const ConfigNode root = parse_config_file(path);
  if (options.base_dir.empty()) options.base_dir = dirname_of(path);
  return std::make_unique<Net>(root, options);
}

void Net::build(const ConfigNode& root) {
  name_ = root.get_string("name", "net");
  if (on_cuda()) {
#ifdef STRATA_WITH_CUDA
    cuda::check_device_index(options_.device.index);
#else
    fail<ConfigError>("net '", name_, "': device ", options_.device.str(),
                      " requested, but this build of strata has no CUDA backend (built without nvcc or "
                      "with -DSTRATA_CUDA=OFF); use --device cpu");
#endif
  }
  state_ = net_state_of(root, options_.phase, options_.state);
  options_.phase = state_.phase;
  std::vector<LayerSpec> specs = net_layer_specs(root, state_);
  if (specs.empty()) fail<ConfigError>("net '", name_, "' has no layers in phase ", phase_name(options_.phase));
  for (int i = 0; i < static_cast<int>(specs.size()); ++i) {
    connect_layer(specs[i], i);
    specs[i] = LayerSpec();  // the layer keeps its own copy; a net of many layers should not hold two
  }
  if (on_cuda()) {
    // No silent fallback to the CPU: name every layer that cannot run here.
    std::vector<std::string> missing;
    for (const auto& l : layers_) {
      if (!l->has_cuda()) missing.push_back("'" + l->name() + "' (" + l->type() + ") at " + l->spec().node.loc().str());
    }
    if (!missing.empty()) {
      fail<ConfigError>("net '", name_, "' cannot run on ", options_.device.str(), ": ", missing.size(),
                        " layer(s) have no CUDA implementation: ", join(missing), "; run it with --device cpu");
    }
  }
  // What dtype each layer's calls will see, before the layers size anything.
  assign_call_dtypes(blobs_to_reduce());
  assign_call_layouts(blobs_channels_last());  // and layout
  // Which layers' tops a later layer overwrites in place.
  for (int i = 0; i < num_layers(); ++i) {
    bool overwritten = false;
    for (int j = i + 1; j < num_layers() && !overwritten; ++j) {
      for (Blob* t : tops_[static_cast<size_t>(j)]) {
        const BlobVec& b = bottoms_[static_cast<size_t>(j)];
        const bool in_place = std::find(b.begin(), b.end(), t) != b.end();
        const BlobVec& mine = tops_[static_cast<size_t>(i)];
        if (in_place && std::find(mine.begin(), mine.end(), t) != mine.end()) overwritten = true;
      }
    }
    layers_[static_cast<size_t>(i)]->set_tops_overwritten_later(overwritten);
  }
  // Shapes first, memory after: blobs and layer scratch created while the
  // plan is open are only sized, so the total can be checked before any of
  // it is taken (framework/memory_plan.h).
  MemoryPlan plan;
  for (int i = 0; i < num_layers(); ++i) {
    plan.set_owner(i);
    naming_layer_on_failure(i, "setup", [&] {
      setup_layer(i);
      move_params_to_device(i);
    });
    register_params(i);
  }
  force_backward_ = root.get_bool("force_backward", false);
  compute_backward_needs(force_backward_);
  read_recompute_ranges(root);
  plan.set_owner(-1);  // the arena is every layer's
  plan_blob_memory();  // before the check: it counts the arena, not every blob on its own
  plan_scratch();
  plan_gradients();
  if (options_.optimizer_slots > 0) {
    for (const NetParam& p : params_) {
      if (p.learnable != Learnable::kYes || p.lr_mult == 0.0f) continue;
      plan.add_estimate(p.owner_layer, static_cast<size_t>(options_.optimizer_slots) * p.blob->data.nbytes());
    }
  }
  check_memory_plan(plan);
  // On the host, storage the plan sized is taken on first use: scratch a
  // layer sizes for its backward (attention, patch embedding) is never taken
  // when a frozen layer runs none. A device takes all of it now, so that its
  // caching allocator has it before training starts.
  if (on_cuda()) {
    try {
      plan.allocate();
    } catch (const std::bad_alloc&) {
      fail<OutOfMemoryError>("net '", name_, "': allocating its planned ", format_bytes(plan.totals().total()),
                             " failed (out of memory); reduce batch_size or the model's size");
    }
  }
  std::set<const void*> not_layers = blob_and_param_storages();
  const std::set<const void*> scratch = scratch_storages();
  not_layers.insert(scratch.begin(), scratch.end());
  if (cast_buffer_.storage_id()) not_layers.insert(cast_buffer_.storage_id());  // counted as workspace
  layer_bytes_ = plan.bytes_except(not_layers);
  if (const char* trace = std::getenv("STRATA_MEMORY_TRACE")) {
    const std::string t = trace;
    if (t == "1") {
      memory_trace_passes_ = 4;  // two forwards and two backwards: the first step and a steady one
      memory_trace_updates_ = 2;
      trace_memory("setup", -1);
    } else if (!t.empty() && t != "0") {
      fail<ConfigError>("STRATA_MEMORY_TRACE is '", t, "': expected 1 (print what the first two training steps "
                        "allocate, layer by layer) or 0");
    }
  }

  std::set<std::string> read;
  for (const auto& names : bottom_names_) read.insert(names.begin(), names.end());
  for (const auto& n : blob_names_) {
    if (!read.count(n)) output_names_.push_back(n);
  }
}

void Net::connect_layer(const LayerSpec& spec, int index) {
  LayerContext ctx;
  ctx.phase = options_.phase;
  ctx.base_dir = options_.base_dir;
  ctx.seed = mix_seed(options_.seed, static_cast<uint64_t>(index));
  ctx.rank = options_.rank;
  ctx.world_size = options_.world_size;
  ctx.comm = options_.comm;
  ctx.device = options_.device;
  const LayerRegistration& reg = LayerRegistry::instance().find(spec.type);
  std::unique_ptr<Layer> layer = reg.create(spec, ctx);
  if (spec.tops.empty() && layer->min_tops() > 0 && layer->default_loss_weight(0) != 0.0f) {
    // Caffe gives a loss layer written without a top one (its AutoTopBlobs):
    // the loss still counts. Named after the layer, it also shows as an output.
    LayerSpec with_top = spec;
    std::string top = spec.name;
    while (blobs_.count(top)) top += "_loss";
    with_top.tops.assign(static_cast<size_t>(layer->min_tops()), top);
    for (int t = 1; t < layer->min_tops(); ++t) with_top.tops[static_cast<size_t>(t)] += "_" + std::to_string(t);
    connect_layer(with_top, index);
    return;
  }
  const std::string where = "layer '" + spec.name + "' (" + spec.type + ") at " + spec.node.loc().str();

  auto check_count = [&](size_t n, int lo, int hi, const char* what) {
    const bool ok = static_cast<int>(n) >= lo && (hi < 0 || static_cast<int>(n) <= hi);
    if (ok) return;
    std::string want = hi < 0 ? "at least " + std::to_string(lo)
                              : (lo == hi ? std::to_string(lo)
                                          : std::to_string(lo) + " to " + std::to_string(hi));
    fail<ConfigError>(where, " takes ", want, " ", what, ", got ", n);
  };
  check_count(spec.bottoms.size(), layer->min_bottoms(), layer->max_bottoms(), "bottom blobs");
  check_count(spec.tops.size(), layer->min_tops(), layer->max_tops(), "top blobs");

  BlobVec bottoms, tops;
  for (const auto& b : spec.bottoms) {
    auto it = blobs_.find(b);
    if (it == blobs_.end()) {
      fail<ConfigError>(where, ": bottom '", b, "' is not produced by any earlier layer in phase ",
                        phase_name(options_.phase), " (blobs so far: ", join(blob_names_), ")");
    }
    bottoms.push_back(it->second.get());
  }
  for (size_t t = 0; t < spec.tops.size(); ++t) {
    const std::string& name = spec.tops[t];
    const bool in_place =
        std::find(spec.bottoms.begin(), spec.bottoms.end(), name) != spec.bottoms.end();
    if (in_place) {
      if (!layer->supports_in_place() || t >= spec.bottoms.size() || spec.bottoms[t] != name) {
        fail<ConfigError>(where, ": top '", name, "' is also a bottom, but ", spec.type,
                          " cannot run in place; give the top its own name");
      }
      tops.push_back(blobs_[name].get());
      continue;
    }
    if (blobs_.count(name)) {
      if (blob_producer_[name] == index) {  // this layer is not in layers_ yet
        fail<ConfigError>(where, ": top '", name, "' is given twice; give each top its own name");
      }
      const Layer& other = *layers_[blob_producer_[name]];
      fail<ConfigError>(where, ": top '", name, "' is already produced by layer '", other.name(),
                        "'; blob names must be unique except for in-place layers");
    }
    auto blob = std::make_shared<Blob>();
    if (on_cuda()) {
      // Empty tensors that remember the device: the layer's first resize allocates there.
      blob->data = Tensor(Shape{0}, DType::kF32, options_.device);
      blob->diff = Tensor(Shape{0}, DType::kF32, options_.device);
    }
    blobs_[name] = blob;
    blob_producer_[name] = index;
    blob_names_.push_back(name);
    tops.push_back(blob.get());
  }
  std::vector<float> weights(spec.tops.size(), 0.0f);
  for (size_t t = 0; t < weights.size(); ++t) {
    weights[t] = spec.loss_weights.empty() ? layer->default_loss_weight(static_cast<int>(t))
                                           : spec.loss_weights[t];
  }
  layers_.push_back(std::move(layer));
  bottoms_.push_back(bottoms);
  tops_.push_back(tops);
  bottom_names_.push_back(spec.bottoms);
  top_names_.push_back(spec.tops);
  loss_weights_.push_back(weights);
}

std::string Net::layer_where(int i) const {
  const Layer& l = *layers_[i];
  return "layer '" + l.name() + "' (" + l.type() + ") at " + l.spec().node.loc().str();
}

template <typename Body>
void Net::naming_layer_on_failure(int i, const char* stage, const Body& body) {
  try {
    body();
  } catch (const std::bad_alloc&) {
    fail<OutOfMemoryError>(layer_where(i), ": out of memory during ", stage, " (tensor storage in use: ",
                           format_bytes(memory_in_use()),
                           "); reduce batch_size or the model's size, or free memory on this machine");
  } catch (const OutOfMemoryError& e) {
    const std::string what = e.what();
    if (what.rfind("layer '", 0) == 0 || what.rfind("net '", 0) == 0) throw;  // already says where
    fail<OutOfMemoryError>(layer_where(i), ", during ", stage, ": ", what);
  } catch (const Error& e) {
    // A blob stored in bf16/f16 read as f32: the call got no f32 copy of
    // it, as the layer does not declare that it reads it (net_storage.cpp).
    const std::string what = e.what();
    if (reduced_.empty() || what.find("but was accessed as f32") == std::string::npos) throw;
    fail<Error>(layer_where(i), ", during ", stage, ": ", what, ". The net stores its activations in ",
                dtype_name(options_.storage_dtype), " and hands a layer f32 copies of the blobs it declares it reads: "
                "declare the read (Layer::backward_reads), or take the stored dtype (Layer::takes_storage)");
  }
}

void Net::setup_layer(int i) {
  Layer& layer = *layers_[i];
  try {
    layer.setup(bottoms_[i], tops_[i]);
    layer.reshape(bottoms_[i], tops_[i]);
  } catch (const ShapeError& e) {
    // Name where each bottom came from, so a mismatch names both layers.
    std::string msg = e.what();
    for (size_t b = 0; b < bottom_names_[i].size(); ++b) {
      std::string bn = bottom_names_[i][b];
      int p = blob_producer_[bn];
      // Look through automatically inserted Splits (no `name` in their node) to the blob the config names.
      while (layers_[p]->type() == "Split" && !layers_[p]->spec().node.has("name")) {
        bn = bottom_names_[p][0];
        p = blob_producer_[bn];
      }
      const Layer& producer = *layers_[p];
      msg += "\n  bottom '" + bn + "' " + shape_str(bottoms_[i][b]->shape()) + " comes from layer '" +
             producer.name() + "' (" + producer.type() + ")";
    }
    if (msg.find("layer '" + layer.name() + "'") == std::string::npos) msg = layer_where(i) + ": " + msg;
    throw ShapeError(msg);
  }
  // A layer whose own check let an empty top through from non-empty bottoms
  // (an output size that rounds to zero) would only fail later, somewhere else.
  bool bottoms_empty = bottoms_[i].empty();
  for (const Blob* b : bottoms_[i]) bottoms_empty = bottoms_empty || b->numel() == 0;
  for (size_t t = 0; t < tops_[i].size() && !bottoms_empty; ++t) {
    if (tops_[i][t]->numel() != 0) continue;
    std::string bottoms;
    for (size_t b = 0; b < bottoms_[i].size(); ++b) {
      bottoms += (b ? ", '" : "'") + bottom_names_[i][b] + "' " + shape_str(bottoms_[i][b]->shape());
    }
    fail<ShapeError>(layer_where(i), ": top '", top_names_[i][t], "' has shape ", shape_str(tops_[i][t]->shape()),
                     ", with no elements, from bottom ", bottoms,
                     "; the layer's output size rounds down to zero: make its kernel, stride or "
                     "output size smaller, or its input larger");
  }
  for (size_t t = 0; t < tops_[i].size(); ++t) {
    if (loss_weights_[i][t] != 0.0f && tops_[i][t]->numel() != 1) {
      fail<ConfigError>("layer '", layer.name(), "': top '", top_names_[i][t], "' has loss_weight ",
                        loss_weights_[i][t], " but shape ", shape_str(tops_[i][t]->shape()),
                        "; only scalar tops can be losses");
    }
  }
}

void Net::compute_backward_needs(bool force_backward) {
  const int n = num_layers();
  // Which blobs influence a loss: walk backwards from tops with a loss weight.
  std::set<const Blob*> under_loss;
  std::vector<bool> layer_under_loss(n, false);
  for (int i = n - 1; i >= 0; --i) {
    bool contributes = force_backward;
    for (size_t t = 0; t < tops_[i].size(); ++t) {
      if (loss_weights_[i][t] != 0.0f || under_loss.count(tops_[i][t])) contributes = true;
    }
    layer_under_loss[i] = contributes;
    if (contributes) {
      // A bottom cut off by propagate_down: false takes no gradient from this layer.
      const std::vector<bool>& pd = layers_[i]->spec().propagate_down;
      for (size_t b = 0; b < bottoms_[i].size(); ++b) {
        if (pd.empty() || pd[b] || force_backward) under_loss.insert(bottoms_[i][b]);
      }
    }
  }
  // Which blobs carry a gradient back to a learnable parameter.
  std::set<const Blob*> needs_grad;
  layer_need_backward_.assign(n, false);
  bottom_need_backward_.assign(n, {});
  for (int i = 0; i < n; ++i) {
    const Layer& layer = *layers_[i];
    const LayerSpec& spec = layer.spec();
    bool learns = false;
    for (int id : layer_param_ids_[i]) {
      if (params_[id].learnable == Learnable::kYes && params_[id].lr_mult != 0.0f) learns = true;
    }
    std::vector<bool> bn(bottoms_[i].size(), false);
    bool any_bottom = false;
    for (size_t b = 0; b < bottoms_[i].size(); ++b) {
      const bool allowed = layer.can_backward_to(static_cast<int>(b)) &&
                           (spec.propagate_down.empty() || spec.propagate_down[b]);
      bn[b] = allowed && (needs_grad.count(bottoms_[i][b]) > 0 || force_backward);
      any_bottom = any_bottom || bn[b];
    }
    const bool need = layer_under_loss[i] && (learns || any_bottom);
    layer_need_backward_[i] = need;
    if (!need) bn.assign(bn.size(), false);
    bottom_need_backward_[i] = bn;
    if (need) {
      for (const Blob* t : tops_[i]) needs_grad.insert(t);
    }
  }
  // A parameter's gradient is final after the backward of the lowest layer using it.
  params_ready_after_.assign(n, {});
  for (auto& p : params_) p.last_backward_layer = -1;
  for (int i = 0; i < n; ++i) {
    if (!layer_need_backward_[i]) continue;
    for (int id : layer_param_ids_[i]) {
      if (params_[id].last_backward_layer < 0) params_[id].last_backward_layer = i;
    }
  }
  for (int id = 0; id < static_cast<int>(params_.size()); ++id) {
    if (params_[id].last_backward_layer >= 0) params_ready_after_[params_[id].last_backward_layer].push_back(id);
  }
}

int Net::layer_index(const std::string& name) const {
  for (int i = 0; i < num_layers(); ++i) {
    if (layers_[i]->name() == name) return i;
  }
  std::vector<std::string> names;
  for (const auto& l : layers_) names.push_back(l->name());
  fail<ConfigError>("net '", name_, "' has no layer '", name, "' (layers: ", join(names), ")");
}

bool Net::has_blob(const std::string& name) const { return blobs_.count(name) > 0; }

Blob& Net::blob(const std::string& name) {
  auto it = blobs_.find(name);
  if (it == blobs_.end()) {
    fail<ConfigError>("net '", name_, "' has no blob '", name, "' (blobs: ", join(blob_names_), ")");
  }
  return *it->second;
}

std::vector<std::string> Net::input_names() const {
  std::vector<std::string> out;
  for (int i = 0; i < num_layers(); ++i) {
    if (layers_[i]->type() == "Input") out.insert(out.end(), top_names_[i].begin(), top_names_[i].end());
  }
  return out;
}

void Net::reshape() {
  {
    // Only sized: a blob that outgrew its place gets a storage that is never
    // taken, because the plan below gives it a place again.
    MemoryPlan sized_only;
    for (int i = 0; i < num_layers(); ++i) {
      naming_layer_on_failure(i, "reshape", [&] { layers_[static_cast<size_t>(i)]->reshape(bottoms_[i], tops_[i]); });
    }
  }
  plan_scratch();  // grows when a layer needs more now
  if (options_.blob_memory == BlobMemory::kSeparate) {
    if (has_casts()) plan_casts();  // the copies' buffer, likewise
    return;
  }
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = *layers_[i];
    // What a layer keeps, or its scratch (every call's place is the forward's
    // size), outgrew its place.
    const size_t scratch_place = i < scratch_places_.size() ? scratch_places_[i][0].nbytes() : 0;
    if (l.kept_bytes() > l.kept_place_.nbytes() || l.scratch_bytes() > scratch_place) {
      plan_blob_memory();
      return;
    }
    // Or the f32 copies of a call's blobs outgrew theirs.
    for (Call call : {Call::kForward, Call::kRecompute, Call::kBackward}) {
      const Tensor* place = i < cast_places_.size() ? &cast_places_[i][static_cast<size_t>(call)] : nullptr;
      if (place && place->nbytes() > 0 && cast_bytes(static_cast<int>(i), call) > place->nbytes()) {
        plan_blob_memory();
        return;
      }
    }
  }
  for (const Tensor* t : in_arena_) {
    if (!t->shares_storage_with(blob_arena_) && t->nbytes() > 0) {
      plan_blob_memory();
      return;
    }
  }
}

class Net::ScratchBinding {
 public:
  ScratchBinding(Net& net, int i, Call call) : layer_(*net.layers_[static_cast<size_t>(i)]) {
    if (net.scratch_places_.empty()) return;
    layer_.scratch_place_ = net.scratch_places_[static_cast<size_t>(i)][static_cast<size_t>(call)];
    const size_t floats = layer_.scratch_place_.nbytes() / sizeof(float);
    if (net.options_.blob_memory == BlobMemory::kByLifetimeChecked && floats > 0) {
      layer_.scratch_place_.view_bytes(0, floats * sizeof(float), {static_cast<int64_t>(floats)}, DType::kF32)
          .fill(std::numeric_limits<float>::quiet_NaN());
    }
  }
  ~ScratchBinding() { layer_.scratch_place_ = Tensor(); }
  ScratchBinding(const ScratchBinding&) = delete;
  ScratchBinding& operator=(const ScratchBinding&) = delete;

 private:
  Layer& layer_;
};

void Net::run_forward(int i, Call call) {
  Layer& layer = *layers_[static_cast<size_t>(i)];
  if (pass_hooks_.before_forward) pass_hooks_.before_forward(i);
  if (static_cast<size_t>(i) < absorbed_.size() && absorbed_[static_cast<size_t>(i)]) {
    // Another layer runs its forward (fuse_epilogues): the layer before it
    // applied this activation as it wrote, or the layer reading this sum
    // computes it. Its tops still take their shapes.
    naming_layer_on_failure(i, "forward", [&] { layer.reshape(bottoms_[i], tops_[i]); });
    if (pass_hooks_.after_forward) pass_hooks_.after_forward(i);
    return;
  }
  const ScratchBinding scratch(*this, i, call);
  CastBinding copies(*this, i, call);  // f32 copies of blobs stored in bf16/f16 (net_storage.cpp)
  naming_layer_on_failure(i, "forward", [&] {
    layer.reshape(bottoms_[i], tops_[i]);
    if (on_cuda()) {
      layer.forward_cuda(bottoms_[i], tops_[i]);
    } else {
      layer.forward_cpu(bottoms_[i], tops_[i]);
    }
  });
  copies.finish();
  if (pass_hooks_.after_forward) pass_hooks_.after_forward(i);
}

void Net::add_to_loss_sink(const Tensor& loss, float weight) {
#ifdef STRATA_WITH_CUDA
  if (on_cuda()) {
    cuda::add_weighted_loss(loss_sink_, loss.device_data<float>(), weight, options_.device.index);
    return;
  }
#endif
  *loss_sink_ += static_cast<double>(weight) * static_cast<double>(loss.data<float>()[0]);
}

void Net::seed_loss_gradient(Tensor& diff, float weight) {
#ifdef STRATA_WITH_CUDA
  if (on_cuda()) {
    cuda::fill_f32_scaled(diff.device_data<float>(), diff.numel(), weight, loss_scale_source_, options_.device.index);
    return;
  }
#endif
  diff.fill(weight * static_cast<float>(*loss_scale_source_));
}

float Net::forward(int from, int to) {
  STRATA_CHECK(from >= 0 && to < num_layers() && from <= to + 1, "bad layer range [", from, ", ", to, "]");
  // The host net planned a new arena (a larger batch): lie in that one, and let the old one go.
  if (host_arena_ && options_.arena_host->blob_arena_.storage_id() != host_arena_) plan_blob_memory();
  double loss = 0.0;
  std::vector<const float*> device_losses;  // CUDA: read once, after the last layer
  std::vector<float> device_weights;
  for (int i = from; i <= to; ++i) {
    Layer& layer = *layers_[i];
    const TimelineScope event("forward", layer.name());
    cuda::DeviceTimeline* gpu = device_timeline();
    const int gpu_span = gpu ? device_span_begin(gpu) : -1;
    for (auto& [tensor, place] : first_places_[static_cast<size_t>(i)]) *tensor = place;
    if (range_of_[static_cast<size_t>(i)] >= 0) state_before_[static_cast<size_t>(i)] = layer.save_state();
    run_forward(i, Call::kForward);
    if (gpu) device_span_end(gpu, gpu_span, phase() == Phase::kTrain ? "gpu forward" : "gpu test", layer.name());
    poison_after(forward_step_[static_cast<size_t>(i)]);
    if (memory_trace_passes_ > 0) trace_memory("forward", i);
    for (size_t t = 0; t < tops_[i].size(); ++t) {
      const float w = loss_weights_[i][t];
      if (w == 0.0f) continue;
      if (loss_sink_) {
        add_to_loss_sink(tops_[i][t]->data, w);
        continue;
      }
      if (on_cuda()) {
        device_losses.push_back(tops_[i][t]->data.device_data<float>());
        device_weights.push_back(w);
        continue;
      }
      loss += static_cast<double>(w) * tops_[i][t]->data.data<float>()[0];
    }
  }
#ifdef STRATA_WITH_CUDA
  if (!device_losses.empty()) {
    std::vector<float> values(device_losses.size());
    cuda::read_scalars(device_losses, values.data(), options_.device.index);
    for (size_t k = 0; k < values.size(); ++k) loss += static_cast<double>(device_weights[k]) * values[k];
  }
#endif
  end_memory_trace_pass();
  return static_cast<float>(loss);
}

void Net::backward(int from, int to) {
  STRATA_CHECK(from >= 0 && to < num_layers() && from <= to + 1, "bad layer range [", from, ", ", to, "]");
  if (planned_forward_only_) {
    fail<ConfigError>("net '", name_, "' is planned for forward passes only (a TEST net without force_backward "
                      "whose blobs share memory by lifetime): backward would read values already gone; give it "
                      "`force_backward: true`, or build it with blob_memory SEPARATE");
  }
  for (const RecomputeRange& r : recompute_) {
    if ((r.first < from && from <= r.last) || (r.first <= to && to < r.last)) {
      fail<ConfigError>("net '", name_, "': the recompute range from '", layers_[r.first]->name(), "' to '",
                        layers_[r.last]->name(), "' crosses the edge of the layers run here (", from, " to ", to,
                        ", a pipeline stage): keep each range inside one stage");
    }
  }
  for (int i = to; i >= from; --i) {
    const int range = range_of_[static_cast<size_t>(i)];
    if (range >= 0 && recompute_[static_cast<size_t>(range)].last == i) recompute(range);
    if (!layer_need_backward_[i]) {
      poison_after(backward_step_[static_cast<size_t>(i)]);
      if (pass_hooks_.after_backward) pass_hooks_.after_backward(i);
      continue;
    }
    if (pass_hooks_.before_backward) pass_hooks_.before_backward(i);
    for (size_t t = 0; t < tops_[i].size(); ++t) {
      const float w = loss_weights_[i][t];
      if (w == 0.0f) continue;
      if (loss_scale_source_) {
        seed_loss_gradient(tops_[i][t]->diff, w);
      } else {
        tops_[i][t]->diff.fill(w * loss_scale_);
      }
    }
    const TimelineScope event("backward", layers_[i]->name());
    cuda::DeviceTimeline* gpu = device_timeline();
    const int gpu_span = gpu ? device_span_begin(gpu) : -1;
    const ScratchBinding scratch(*this, i, Call::kBackward);
    CastBinding copies(*this, i, Call::kBackward);
    naming_layer_on_failure(i, "backward", [&] {
      if (on_cuda()) {
        layers_[i]->backward_cuda(tops_[i], bottom_need_backward_[i], bottoms_[i]);
      } else {
        layers_[i]->backward_cpu(tops_[i], bottom_need_backward_[i], bottoms_[i]);
      }
    });
    copies.finish();
    if (gpu) device_span_end(gpu, gpu_span, "gpu backward", layers_[i]->name());
    if (pass_hooks_.after_backward) pass_hooks_.after_backward(i);
    if (grad_ready_) {
      for (int id : params_ready_after_[i]) grad_ready_(id);
    }
    poison_after(backward_step_[static_cast<size_t>(i)]);
    if (memory_trace_passes_ > 0) trace_memory("backward", i);
  }
  end_memory_trace_pass();
}

float Net::forward_backward() {
  const float loss = forward();
  backward();
  return loss;
}

void Net::set_grad_ready_callback(std::function<void(int)> callback) { grad_ready_ = std::move(callback); }

std::map<std::string, std::string> Net::save_layer_states() const {
  std::map<std::string, std::string> out;
  for (const auto& l : layers_) out[l->name()] = l->save_state();
  return out;
}

void Net::load_layer_states(const std::map<std::string, std::string>& states) {
  for (auto& l : layers_) {
    auto it = states.find(l->name());
    if (it != states.end()) l->load_state(it->second);
  }
}

}  // namespace strata
