// Net: layers connected by named blobs, built from a `name: ... layer { }`
// config for one phase. Runs forward and backward over the whole net or over
// a range of layers (what pipeline stages need), and reports each
// parameter's final gradient through a callback (what overlapped allreduce
// needs).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/layer.h"
#include "framework/config/net_spec.h"
#include "framework/scratch.h"

namespace strata {

namespace cuda {
class DeviceTimeline;
}

// How the blobs' values and gradients get memory.
//   kSeparate:          each its own for the whole run (Caffe's layout), and
//                       each layer its own scratch (framework/scratch.h).
//   kByLifetime:        one arena per net; each value and gradient lives
//                       from its first write to its last read (what each
//                       layer declares its backward reads decides it), and
//                       buffers whose lifetimes do not meet share bytes
//                       (framework/net_plan.cpp); each layer call's
//                       scratch (framework/scratch.h: im2col columns,
//                       cuDNN's workspace) has a place in the same arena,
//                       alive for that call's step only. Same results, less
//                       memory.
//                       A TEST net without force_backward is planned for
//                       forward passes only: a value lives until the last
//                       forward that reads it, and no gradient is kept.
//   kByLifetimeChecked: the same lifetimes, checked: no buffer shares bytes,
//                       and each is filled with NaN right after its last
//                       use, so that a read after it (a layer that reads more
//                       than it declares) always finds NaN; a call's scratch
//                       is filled with NaN before the call.
enum class BlobMemory { kSeparate, kByLifetime, kByLifetimeChecked };

class Net;

struct NetOptions {
  Phase phase = Phase::kTrain;
  // The solver's train_state or test_state (level, stages; a phase given
  // there replaces `phase`), merged over the net file's own `state { }` as
  // Caffe's Solver does. Layers are chosen by their include/exclude rules
  // against the result (framework/config/net_spec.h).
  NetStateSpec state;
  std::string base_dir;  // folder of the config file; relative paths resolve against it
  uint64_t seed = 1;
  int rank = 0;
  int world_size = 1;
  Communicator* comm = nullptr;
  // Where blobs and parameters live and layers run. On a CUDA device every
  // layer must have a CUDA implementation (ConfigError naming the ones that
  // do not); fillers still run on the host and the values are copied over.
  Device device;
  // Param-sized tensors the optimizer keeps per learnable parameter (SGD's
  // momentum: 1, Adam's moments: 2), counted in the memory plan checked
  // before anything is allocated. 0 for a net nobody trains.
  int optimizer_slots = 0;
  BlobMemory blob_memory = BlobMemory::kSeparate;
  // A net that runs one after another with this one, never during its step
  // (the TRAIN net of the Solver's TEST net). When this net is planned for
  // forward passes only, the two share one arena, the larger of the two
  // (a planned arena holds nothing between steps): this net lies in the
  // host's, or, when it needs more, the host moves into this one's. The TEST
  // net then costs no memory beyond the blobs it keeps whole.
  Net* arena_host = nullptr;
  // What activations and their gradients are stored in between layer calls:
  // f32 (the default), bf16 or f16 (the solver's precision BF16 or FP16).
  // Parameters and their gradients stay f32, and so do the blobs that code
  // outside the layers reads or writes: the inputs (tops of layers without
  // bottoms), the outputs, the losses and keep_blobs(). A layer that
  // computes in f32 alone (Layer::takes_storage) gets f32 copies of its
  // blobs for each call, converted at the call's edges, placed like its
  // scratch (framework/net_storage.cpp).
  DType storage_dtype = DType::kF32;
  // Fuse an in-place activation into the layer before it where both declare
  // they can (Layer::as_epilogue, Layer::takes_epilogue): the producer
  // applies it as it writes its output and the activation's forward is
  // skipped (its backward runs as it is), the same bits as unfused
  // (framework/net_fusion.cpp). Off: every layer runs its own forward.
  bool fuse_epilogues = true;
  // Store image blobs channels-last (NHWC, framework/layout.h) where layers
  // run faster so: the blobs between layers that take NHWC, grown from the
  // layers that run faster in it (Layer::channels_last: a convolution), and
  // not the ones code outside the layers touches (inputs, outputs, losses,
  // keep_blobs). A layer that takes NCHW alone gets NCHW copies of them for
  // each call, converted at the call's edges with the dtype casts, so a
  // chain of such layers converts once where it starts and once where it
  // ends. Off: every blob NCHW.
  bool channels_last = false;
};

// Which blobs a net stores in a reduced dtype, and what converting them
// around the layers that compute in f32 takes (Net::storage_report).
struct StorageReport {
  DType dtype = DType::kF32;  // NetOptions::storage_dtype
  int reduced = 0;            // blobs stored in dtype, value and gradient
  int kept_f32 = 0;           // blobs kept f32 (inputs, outputs, losses, labels, keep_blobs)
  int cast_layers = 0;        // layers that take f32 alone and touch a reduced blob
  int cast_calls = 0;         // their calls (forward, recompute, backward) with f32 copies
  size_t cast_bytes = 0;      // the largest call's f32 copies
  int channels_last = 0;      // blobs stored NHWC (NetOptions::channels_last)
  int layout_layers = 0;      // layers called in another layout than one of their blobs is stored in
  std::string str() const;    // "activations and gradients stored in bf16: ..."; "" for f32
};

// What the blob memory plan of a net did (all zero under kSeparate).
struct BlobPlanReport {
  size_t separate_bytes = 0;  // what the planned buffers would take each on its own (a layer's scratch once)
  size_t arena_bytes = 0;     // what they take in the arena
  size_t peak_bytes = 0;      // the most of them alive at one step (the arena's lower bound)
  int planned = 0;            // values, gradients and layers' kept data placed in the arena
  int kept = 0;               // blobs kept whole (outputs, inputs, kept_blobs)
  bool forward_only = false;  // a TEST net's plan: values only, no backward
  int recomputed = 0;         // values made inside recompute ranges (placed twice: forward, recompute)
  std::string host;           // the net this one shares its arena with (NetOptions::arena_host), "" for none
  int scratch_calls = 0;      // layer calls whose scratch has a place in the arena
  size_t scratch_bytes = 0;   // the largest of those
  // At the step with the most bytes alive (peak_bytes): what they are.
  std::string peak_step;      // "backward 'conv5_3'"
  size_t peak_values = 0, peak_gradients = 0, peak_kept = 0, peak_scratch = 0;
  std::string str() const;    // "values, gradients and what layers keep for backward, by lifetime: 1.2 GiB in one arena ..."
};

// Layers [first, last] recomputed in backward: `recompute { from: "a" to: "b" }`
// in the net file. The first forward keeps none of the values made inside
// the range for backward (under BlobMemory::kByLifetime they are released
// as soon as the forwards that read them are done); backward runs the
// range's forward again just before the backward of its last layer, with
// each layer's random state as it was, so the results are the same bits.
struct RecomputeRange {
  int first = 0;
  int last = 0;
};

// One unique parameter of the net (shared weights appear once).
struct NetParam {
  std::string name;  // "conv1.weight", or the share name given in `param { name: }`
  std::shared_ptr<Blob> blob;
  float lr_mult = 1.0f;
  float decay_mult = 1.0f;
  Learnable learnable = Learnable::kYes;
  int owner_layer = -1;
  int last_backward_layer = -1;  // the lowest layer index whose backward writes its gradient
};

struct MemoryReport {
  size_t param_bytes = 0;       // learnable values
  size_t grad_bytes = 0;        // learnable gradients
  size_t buffer_bytes = 0;      // non-learnable state (BatchNorm statistics)
  size_t activation_bytes = 0;  // blob values and gradients, shared storage counted once
  size_t optimizer_bytes = 0;   // optimizer history (NetOptions::optimizer_slots per learnable value)
  size_t layer_bytes = 0;       // tensors layers keep for themselves: loaded data sets, masks
  size_t workspace_bytes = 0;   // the scratch of one layer call, shared by the layers (framework/scratch.h)
  size_t total() const {
    return param_bytes + grad_bytes + buffer_bytes + activation_bytes + optimizer_bytes + layer_bytes +
           workspace_bytes;
  }
  std::string str() const;
};

class Net {
 public:
  Net(const ConfigNode& root, const NetOptions& options);
  // Parses the file; base_dir defaults to the file's folder.
  static std::unique_ptr<Net> from_file(const std::string& path, NetOptions options);
  ~Net();
  Net(const Net&) = delete;
  Net& operator=(const Net&) = delete;

  const std::string& name() const { return name_; }
  Phase phase() const { return options_.phase; }
  // The phase, level and stages the layers were chosen for.
  const NetState& state() const { return state_; }
  Device device() const { return options_.device; }
  // Multiplies the gradient seeded at every loss (its loss weight) by
  // `scale`: dynamic loss scaling for FP16 training. 1 by default.
  void set_loss_scale(float scale) { loss_scale_ = scale; }
  float loss_scale() const { return loss_scale_; }
  // Results read one step later (framework/solver/step_ledger.h): while
  // `sum` is set, forward adds each weighted loss into *sum where it lies
  // (on the net's device; nothing is read back, and forward returns 0), and
  // while `scale` is set, backward seeds each loss gradient with its weight
  // times float(*scale) instead of loss_scale(). Null: the eager behaviour.
  void set_loss_sink(double* sum) { loss_sink_ = sum; }
  void set_loss_scale_source(const double* scale) { loss_scale_source_ = scale; }
  int num_layers() const { return static_cast<int>(layers_.size()); }
  Layer& layer(int i) { return *layers_.at(i); }
  const Layer& layer(int i) const { return *layers_.at(i); }
  int layer_index(const std::string& name) const;  // ConfigError listing names if unknown
  bool layer_needs_backward(int i) const { return layer_need_backward_.at(i); }

  bool has_blob(const std::string& name) const;
  Blob& blob(const std::string& name);  // ConfigError listing names if unknown
  const std::vector<std::string>& blob_names() const { return blob_names_; }
  const BlobVec& bottoms(int layer) const { return bottoms_.at(layer); }
  const BlobVec& tops(int layer) const { return tops_.at(layer); }
  // Blobs no layer reads: the net's results ("loss", "accuracy").
  const std::vector<std::string>& output_names() const { return output_names_; }
  // Blobs produced by an Input layer: set their values before forward().
  std::vector<std::string> input_names() const;

  // Forward over layers [from, to]; returns the weighted loss of those layers.
  float forward(int from, int to);
  float forward() { return forward(0, num_layers() - 1); }
  // Backward over layers to..from (descending). Parameter gradients accumulate.
  void backward(int from, int to);
  void backward() { backward(0, num_layers() - 1); }
  float forward_backward();
  // With STRATA_MEMORY_TRACE=1, after the first two updates: a trace line
  // when the update changed the memory in use (the optimizer's state).
  void trace_update();

  // Called with a param index once that parameter's gradient is final for
  // this backward pass (after the last layer that writes it).
  void set_grad_ready_callback(std::function<void(int param_index)> callback);

  // Called around the passes of each layer, in the order they run: before and
  // after every forward (a recompute's too), and before and after every
  // backward, where after_backward is called also for a layer whose
  // backward is skipped (it needs none). Sharded data parallel's PARAMETERS
  // stage gathers a layer's weights in the before hooks and releases them in
  // the after hooks. Empty functions are not called.
  struct LayerPassHooks {
    std::function<void(int layer)> before_forward, after_forward, before_backward, after_backward;
  };
  void set_layer_pass_hooks(LayerPassHooks hooks) { pass_hooks_ = std::move(hooks); }
  const LayerPassHooks& layer_pass_hooks() const { return pass_hooks_; }

  std::vector<NetParam>& params() { return params_; }
  const std::vector<NetParam>& params() const { return params_; }
  int param_index(const std::string& name) const;  // -1 if absent
  // Changes a parameter's lr_mult after construction (0 freezes it, as
  // fine-tuning does) and recomputes which layers need backward, so a frozen
  // prefix of the net runs none. Buffers (not learnable) keep lr_mult 0.
  void set_lr_mult(int param_index, float lr_mult);
  void zero_param_diffs();
  // Under kByLifetime (and its checked mode) the updated parameters'
  // gradients live in one flat buffer, in the order backward finishes them
  // (framework/net_params.cpp). The gradients of `ids`, in that order, as
  // one f32 tensor over the buffer when they lie one after another in it
  // (the zero padding between them included): data parallel reduces such a
  // bucket in place. nullopt when they do not, or under kSeparate.
  std::optional<Tensor> gradient_view(const std::vector<int>& ids) const;
  // Hands the gradients of the updated parameters `ids` to a keeper outside
  // the net: sharded data parallel keeps them in a few bucket-sized slots
  // that it binds and zeroes as backward reaches them
  // (parallel/data_parallel/gradient_slots.h). The net takes them out of its
  // flat buffer (which goes when nothing is left in it) and leaves them out
  // of zero_param_diffs, its memory report and the non-finite diagnosis;
  // set_lr_mult is refused from then on (the keeper's layout would be stale).
  void hand_over_gradients(const std::vector<int>& ids);
  bool gradient_handed_over(int id) const {
    return static_cast<size_t>(id) < handed_over_.size() && handed_over_[static_cast<size_t>(id)];
  }
  // With the timeline on and the net on a GPU, hands the GPU spans of the
  // layers run since the last call to the timeline (waits for that work);
  // the Solver calls it at the end of every step and test. No-op otherwise.
  void flush_device_timeline();

  // Makes this net use `other`'s parameter blobs (by name; shapes must match)
  // and, unless either keeps scratch per layer (kSeparate), its scratch
  // buffer. A TEST net shares the TRAIN net's weights this way; the two
  // must then run on one thread, one after the other.
  void share_params_from(const Net& other);

  // Per-layer state beyond parameters (data cursors, RNGs), by layer name.
  std::map<std::string, std::string> save_layer_states() const;
  void load_layer_states(const std::map<std::string, std::string>& states);

  // What this net's tensors take (memory_report({this}) below).
  MemoryReport memory_report() const;

  // Blobs that code outside forward() and backward() reads or writes (a
  // pipeline's boundaries): under BlobMemory::kByLifetime they keep memory
  // of their own for the whole run. Plans the blob memory again.
  void keep_blobs(const std::vector<std::string>& names);
  // Every layer's reshape() in order, from the inputs' shapes as they are now
  // (Caffe's Net::Reshape): call it after giving an Input a new batch. The
  // blob memory is planned again when a planned blob no longer fits its
  // place, so a larger batch gets an arena of its own size.
  void reshape();
  const BlobPlanReport& blob_plan() const { return blob_plan_; }
  const StorageReport& storage_report() const { return storage_report_; }
  // The activations fused into the layer before them (NetOptions::fuse_epilogues),
  // as {producer, activation} layer indices, in net order.
  const std::vector<std::pair<int, int>>& fused_epilogues() const { return fused_; }
  // The residual sums fused into the layer reading them, as {sum, reader}
  // layer indices (NetOptions::fuse_epilogues).
  const std::vector<std::pair<int, int>>& fused_residuals() const { return fused_residuals_; }
  // "fused 2 activation(s) into the layer before them: relu1 into conv1, ...;
  // 2 residual sum(s) into the layer reading them: add1 into ln2, ..."; ""
  // when none.
  std::string fusion_report() const;
  // The tops that are their bottom's memory (Layer::tops_may_share_bottom),
  // each with that bottom; empty under kSeparate.
  const std::map<const Blob*, const Blob*>& shared_tops() const { return shared_tops_; }
  // Counts the plans of the blob memory (and the parameter changes that
  // plan again): a captured step graph holds the addresses of one plan.
  uint64_t plan_generation() const { return plan_generation_; }
  // The dtype `b`'s value and gradient are stored in between layer calls
  // (NetOptions::storage_dtype, or f32 for the blobs kept f32).
  DType storage_dtype_of(const Blob& b) const { return reduced_.count(&b) ? options_.storage_dtype : DType::kF32; }
  // The layout `b`'s value and gradient are stored in (NetOptions::channels_last).
  Layout layout_of(const Blob& b) const { return channels_last_.count(&b) ? Layout::kNHWC : Layout::kNCHW; }
  const std::vector<RecomputeRange>& recompute_ranges() const { return recompute_; }
  // Whether `b`'s value still holds what its layer wrote once the step is
  // over: always under kSeparate; under a plan only for the blobs kept whole
  // (the others' bytes went on to later buffers).
  bool value_outlives_step(const Blob& b) const { return !planned_values_.count(&b); }

 private:
  friend MemoryReport memory_report(const std::vector<const Net*>& nets);
  void build(const ConfigNode& root);
  void connect_layer(const LayerSpec& spec, int index);
  void setup_layer(int index);
  void register_params(int index);
  void compute_backward_needs(bool force_backward);
  void move_params_to_device(int index);
  // Refuses a plan beyond --max-memory or the machine (OutOfMemoryError
  // naming the layers that need the most), before it is allocated.
  void check_memory_plan(const class MemoryPlan& plan) const;
  // BlobMemory::kByLifetime: the lifetimes of every value and gradient, their
  // places in a new arena, and the blobs rebound to them (net_plan.cpp).
  void plan_blob_memory();
  // Gives the layers their scratch: one buffer for all, the largest layer's
  // need (kSeparate: one per layer), grown when a reshape needs more.
  void plan_scratch();
  // Lays the updated parameters' gradients out in one flat buffer (again
  // after set_lr_mult); the others get storage of their own.
  void plan_gradients();
  std::set<const void*> scratch_storages() const;
  // kByLifetimeChecked: NaN into the buffers whose last use was step `step`
  // (forward_step_, recompute_step_, backward_step_).
  void poison_after(int step);
  void add_to_loss_sink(const Tensor& loss, float weight);  // set_loss_sink
  void seed_loss_gradient(Tensor& diff, float weight);      // set_loss_scale_source
  // The steps of one training pass in order: the forwards, then the
  // backwards from the last layer down, each range's recompute just before
  // the backward of its last layer (net_plan.cpp).
  void number_steps();
  // `recompute { }` blocks: their layers, checked (net_recompute.cpp).
  void read_recompute_ranges(const ConfigNode& root);
  // The forward of range `r` again, each layer with its random state as the
  // first forward had it, and its values in their second places.
  void recompute(int r);
  // Which call of a layer a step is: its place of scratch_places_.
  enum class Call { kForward = 0, kRecompute = 1, kBackward = 2 };
  // Layer i's scratch place for `call` handed to the layer for one call
  // (checked: filled with NaN first), taken back after it.
  class ScratchBinding;
  // Under a reduced storage dtype: which blobs are stored so (all but the
  // ones code outside the layers touches), their tensors converted to it
  // (net_storage.cpp). Called by every plan, as keep_blobs changes the set.
  void choose_storage();
  // The fusion pass (net_fusion.cpp): which in-place activations the layer
  // before them applies, set on the layers (Layer::set_epilogue) and in
  // absorbed_; after choose_storage, by every plan, as kept blobs and the
  // storage dtypes change what may be fused.
  void fuse_epilogues();
  void fuse_residual_sums();  // its second half
  // Which tops share their bottom's memory (shared_tops_), before the fusion
  // pass that looks through them (net_plan.cpp).
  void share_tops();
  // The blobs a reduced storage dtype applies to: read and written by layers
  // alone (not an input, an output, a loss or a kept blob) and not declared
  // f32 by their layers (Layer::bottom_stays_f32, top_stays_f32); none for f32.
  std::set<const Blob*> blobs_to_reduce() const;
  // Each layer's call_dtype: the storage dtype for a layer that takes it and
  // touches a blob of `reduced` (other than one it declares f32), else f32.
  // Before setup, so what layers size follows it; then by every choose_storage.
  void assign_call_dtypes(const std::set<const Blob*>& reduced);
  // Under NetOptions::channels_last: the blobs stored NHWC, those between
  // layers that take it (Layer::channels_last) reached from a layer that runs
  // faster so, and not an input, an output, a loss or a kept blob.
  std::set<const Blob*> blobs_channels_last() const;
  // Whether blob `name` is read and written by layers alone: made by a layer
  // with bottoms, read by some layer (`read`: every bottom's name), not kept
  // for code outside the net. The blobs a storage dtype or layout may change.
  bool touched_by_layers_alone(const std::string& name, const std::set<std::string>& read) const;
  // Each layer's call_layout: NHWC for a layer that takes it and touches a
  // blob of `nhwc`, else NCHW. Returns the layers whose layout changed.
  std::vector<int> assign_call_layouts(const std::set<const Blob*>& nhwc);
  // Whether any call gets copies of its blobs (another dtype or layout).
  bool has_casts() const { return !reduced_.empty() || !channels_last_.empty(); }
  // One blob tensor a call of layer i reads or writes in another dtype than
  // it is stored in (f32 for a reduced blob in a call in f32, the storage
  // dtype for an f32 blob in a call in it): converted in before the call,
  // out after.
  struct CastSlot {
    Blob* blob = nullptr;
    DType dtype = DType::kF32;  // the copy's
    Layout layout = Layout::kNCHW;  // the copy's
    Layout stored = Layout::kNCHW;  // the blob's
    bool diff = false;  // the gradient, else the value
    bool in = false;    // the call reads it
    bool out = false;   // the call writes it
  };
  std::vector<CastSlot> cast_slots(int i, Call call) const;
  size_t cast_bytes(int i, Call call) const;  // the f32 copies' bytes, each aligned
  // Under kSeparate, and for the report: one buffer of the largest call's
  // copies (cast_buffer_), and the counts of storage_report_.
  void plan_casts();
  // Layer i's blobs bound to f32 copies for one call, converted back after.
  class CastBinding;
  // The forward of layer i, naming it on out-of-memory.
  void run_forward(int i, Call call);
  // STRATA_MEMORY_TRACE: after each layer of the first passes, one line on
  // stderr whenever the memory in use changed (net_memory.cpp).
  void trace_memory(const char* pass, int layer);
  void end_memory_trace_pass();
  int memory_trace_updates_ = 0;  // updates still traced (trace_update)
  // "layer 'conv1' (Convolution) at file:line:col"
  std::string layer_where(int index) const;
  // Runs `body` for layer `index`; an allocation that fails inside it
  // becomes an OutOfMemoryError naming the layer and `stage`, and a read as
  // f32 of a blob stored in bf16/f16 an Error naming the layer and the fix.
  template <typename Body>
  void naming_layer_on_failure(int index, const char* stage, const Body& body);
  bool on_cuda() const { return !options_.device.is_cpu(); }

  NetOptions options_;
  NetState state_;
  std::string name_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<BlobVec> bottoms_, tops_;
  std::vector<std::vector<std::string>> bottom_names_, top_names_;
  std::vector<std::vector<bool>> bottom_need_backward_;
  std::vector<std::vector<float>> loss_weights_;
  std::vector<bool> layer_need_backward_;
  std::map<std::string, std::shared_ptr<Blob>> blobs_;
  std::map<std::string, int> blob_producer_;  // blob name -> layer index that first wrote it
  std::vector<std::string> blob_names_, output_names_;
  std::vector<NetParam> params_;
  std::vector<std::vector<int>> layer_param_ids_;  // per layer: index into params_ per slot
  std::vector<std::vector<int>> params_ready_after_;  // per layer: params final after its backward
  std::function<void(int)> grad_ready_;
  LayerPassHooks pass_hooks_;
  float loss_scale_ = 1.0f;
  double* loss_sink_ = nullptr;
  const double* loss_scale_source_ = nullptr;
  bool force_backward_ = false;
  size_t layer_bytes_ = 0;  // MemoryReport::layer_bytes, as set up
  bool planned_forward_only_ = false;  // blob_plan_.forward_only, while a plan is in place
  int memory_trace_passes_ = 0;  // forward and backward passes still traced
  size_t traced_tensors_ = 0, traced_device_ = 0;  // what the last trace line said
  std::set<std::string> kept_blobs_;
  Tensor blob_arena_;                              // u8, the planned values and gradients
  const void* host_arena_ = nullptr;               // the storage of options_.arena_host's arena this one lies in
  Tensor guest_arena_;  // a larger arena of a net that uses this one as its arena_host: this net lies in it
  std::string guest_name_;  // that net, as shared_arena_name() says it
  std::string shared_arena_name() const;  // "TRAIN net 'digits'", for the plan's report
  // The layers' scratch: one shared by all (and by a TEST net that shares
  // this net's parameters), or under kSeparate one per layer. Under a plan
  // by lifetime it only serves calls without a place (one too small).
  std::vector<std::shared_ptr<SharedScratch>> scratches_;
  // Under a plan by lifetime, per layer and Call: its scratch's place in
  // the arena for that call's step (empty: none).
  std::vector<std::array<Tensor, 3>> scratch_places_;
  // Under a reduced storage dtype, per layer and Call: the place of its
  // blobs' f32 copies (under a plan in the arena at the call's step, under
  // kSeparate views of cast_buffer_; empty: none).
  std::vector<std::array<Tensor, 3>> cast_places_;
  Tensor cast_buffer_;                // u8: kSeparate's copies, the largest call's
  std::set<const Blob*> reduced_;     // the blobs stored in options_.storage_dtype
  std::set<const Blob*> channels_last_;  // the blobs stored NHWC
  std::vector<std::pair<int, int>> fused_;  // {producer, activation} (fuse_epilogues)
  std::vector<char> absorbed_;              // per layer: its forward is run by another layer (fusion)
  std::vector<std::pair<int, int>> fused_residuals_;  // {sum, reader} (fuse_epilogues)
  std::vector<int> residual_reader_;        // per layer: the layer that computes its sum, or -1
  std::map<const Blob*, const Blob*> shared_tops_;  // top -> the bottom whose memory it is
  uint64_t plan_generation_ = 0;
  StorageReport storage_report_;
  Tensor flat_grads_;                  // f32: the updated parameters' gradients, in readiness order
  std::vector<int64_t> grad_offsets_;  // per parameter: its first element in flat_grads_, -1 when not there
  std::vector<char> handed_over_;      // per parameter: its gradient is kept outside the net (hand_over_gradients)
  std::vector<std::vector<Tensor>> poison_after_;  // per step: f32 views to fill with NaN
  BlobPlanReport blob_plan_;
  std::set<const Blob*> planned_values_;
  std::vector<RecomputeRange> recompute_;
  std::vector<int> range_of_;                 // per layer: its recompute range, or -1
  std::vector<std::string> state_before_;     // per layer in a range: its state before this step's forward
  std::vector<int> forward_step_, recompute_step_, backward_step_;  // per layer (-1: no recompute)
  // Values made inside a recompute range live twice, each time in its own
  // place: per layer, its tops' places for the first forward and for the
  // recompute (the tensor and the view it becomes).
  std::vector<std::vector<std::pair<Tensor*, Tensor>>> first_places_, recompute_places_;
  std::vector<Tensor*> in_arena_;  // the blob tensors that are views of blob_arena_
  // The layers' GPU spans for the timeline; made when first needed.
  std::unique_ptr<cuda::DeviceTimeline> device_timeline_;
  cuda::DeviceTimeline* device_timeline();
  std::set<const void*> blob_and_param_storages() const;
};

// The memory of nets that run together (a TRAIN net and the TEST net that
// shares its parameters), each storage counted once: what a run needs
// before its first step. Forward and backward still add per-thread scratch
// (convolution patches beyond the first chunk, attention tiles) and the
// host-side allocations no tensor accounts (image decoding, BLAS buffers).
MemoryReport memory_report(const std::vector<const Net*>& nets);

// Keys allowed at the top of a net file and inside a `layer { }` block.
const std::vector<std::string>& net_keys();
const std::vector<std::string>& layer_keys();

}  // namespace strata
