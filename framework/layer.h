// Layer: the unit of computation in a Net. One file pair per layer type in
// layers/, registered by name with STRATA_REGISTER_LAYER in its .cpp.
//
// Life cycle:  constructor (read config) -> setup() once (create parameters)
//              -> reshape() before every forward (infer top shapes)
//              -> forward_cpu() / backward_cpu().
// Conventions: bottom gradients are overwritten; parameter gradients are
// accumulated (+=) so shared weights and iter_size accumulation just work;
// the solver zeroes them after each update.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/layout.h"
#include "framework/rng.h"
#include "framework/tensor.h"

namespace strata {

class Communicator;
class SharedScratch;

enum class Phase { kTrain, kTest };
const char* phase_name(Phase p);

// What the Net knows about one parameter slot of a layer, from `param { }`.
struct ParamSpec {
  std::string share_name;  // non-empty: weights shared with other layers by this name
  float lr_mult = 1.0f;
  float decay_mult = 1.0f;
};

// The generic part of a `layer { }` block, parsed and checked by the Net.
struct LayerSpec {
  std::string name;
  std::string type;
  std::vector<std::string> bottoms;
  std::vector<std::string> tops;
  std::vector<ParamSpec> params;
  std::vector<float> loss_weights;    // as given; empty = layer default
  std::vector<bool> propagate_down;   // as given; empty = all true
  ConfigNode node;                    // the whole block, for the layer's own keys
};

// Run-wide facts a layer may need.
struct LayerContext {
  Phase phase = Phase::kTrain;
  std::string base_dir;      // relative paths in the config resolve against this
  uint64_t seed = 1;         // derived per layer by the Net
  int rank = 0;              // for per-rank data sharding
  int world_size = 1;
  Communicator* comm = nullptr;  // tensor-parallel layers only
  Device device;                 // where the layer's blobs and parameters live
};

enum class Learnable { kNo, kYes };

// How a tensor-parallel layer splits one parameter over the ranks of `comm`:
// this rank holds block `index` of `parts` equal blocks along `axis` of the
// full tensor. With segments > 1 the axis is that many equal consecutive
// segments (attention's q, k, v rows), each split so, and this rank holds
// its block of every segment, in order. The default (parts 1) is an
// ordinary, unsplit parameter.
// Checkpoints use it to gather full tensors when saving and to slice them
// when loading (framework/tensor_parallel.h), so files never depend on the
// layout; the parameter keeps its unsplit name.
struct ParamShard {
  int axis = -1;
  int parts = 1;
  int index = 0;
  int segments = 1;
  Communicator* comm = nullptr;  // the tensor-parallel group the blocks are spread over
  bool split() const { return parts > 1; }
};

// One parameter (or buffer, e.g. BatchNorm running statistics) of a layer.
struct LayerParam {
  std::string name;  // short name within the layer: "weight", "bias", "running_mean"
  std::shared_ptr<Blob> blob;
  Learnable learnable = Learnable::kYes;
};

// Describes how the generic layer test exercises a layer type.
enum class InputKind { kGaussian, kPositive, kLabels };
enum class GradientCheck { kYes, kNo };

struct LayerExample {
  std::string config;            // body of the layer block, e.g. "convolution_param { num_output: 2 }"
  std::vector<Shape> bottom_shapes;
  std::vector<InputKind> inputs;  // per bottom; default kGaussian
  int label_classes = 0;          // for kLabels inputs
  GradientCheck gradient = GradientCheck::kYes;
  float step = 1e-2f;             // finite-difference step
  float tolerance = 1e-2f;        // relative tolerance on gradients
  Phase phase = Phase::kTrain;
};

// The common case: a config body and bottom shapes, defaults for the rest.
inline LayerExample layer_example(const std::string& config, std::vector<Shape> bottoms) {
  LayerExample e;
  e.config = config;
  e.bottom_shapes = std::move(bottoms);
  return e;
}

// The keys a layer reads, block by block; the Net rejects anything else.
struct ParamBlockSchema {
  std::string block;               // "convolution_param"
  std::vector<std::string> keys;   // keys inside it (sub-blocks such as weight_filler included)
};

// What kind of layer a type is, for the code outside it that treats kinds
// differently: the fine-tuning policies (framework/solver/finetune_policy.h) and
// the tests that enrol every registered layer. Declared in schema(), never
// guessed from the type's name.
enum class LayerKind {
  kCompute,        // the default: none of the kinds below
  kData,           // produces the net's input (files, arrays, or blobs set from outside):
                   // no bottoms, so no LayerExample and no golden case; the data- and
                   // shape-layer tests cover it
  kNormalization,  // normalises or rescales activations (BatchNorm, LayerNorm, Scale): its
                   // parameters are scales, shifts and statistics, which
                   // no_weight_decay: BIASES_NORMS_EMBEDDINGS leaves undecayed
  kEmbedding,      // turns the input into tokens or adds embeddings to them (PatchEmbed,
                   // PositionEmbedding): depth 0 of a ViT under layer_decay
  kOutput,         // consumes blobs into a file and has no tops (HDF5Output): nothing to
                   // differentiate or compare, so no LayerExample and no golden case; its
                   // own test covers it
};
const char* layer_kind_name(LayerKind kind);

// How a layer's work grows, for code that weighs layers before a net is
// built (the pipeline balancer's cost model) and for the default
// Layer::forward_cost. Declared in schema(), never guessed from the name.
enum class LayerWork {
  kElementwise,  // the default: about one operation per output element
  kWeights,      // a GEMM or convolution over its weights: 2 x weights x output positions
};

// The work of one forward pass at the shapes set up.
struct ForwardCost {
  double flops = 0;  // a multiply-add counts as 2
  double bytes = 0;  // parameters, bottoms and tops, each read or written once
};
class Layer;

// An elementwise activation that the layer producing a blob (a GEMM, a
// convolution) can apply to its outputs as it writes them, in place of the
// activation layer's own pass over them: the Net fuses the two where the
// layers declare they can (Layer::as_epilogue, Layer::takes_epilogue;
// framework/net_fusion.cpp), with the same bits as the two calls.
struct Epilogue {
  enum class Kind { kNone, kReLU };
  Kind kind = Kind::kNone;
  float slope = 0.0f;  // kReLU: the negative slope (0: ReLU; > 0: leaky)
  bool none() const { return kind == Kind::kNone; }
};

// A residual sum fused into the layer that reads it (Layer::residual_sum,
// framework/net_fusion.cpp): that layer's one bottom is a + b, which its
// forward computes and writes as it reads it, in place of the sum's own
// layer (an Eltwise SUM), with the bits of the two calls.
struct ResidualSum {
  const Blob* a = nullptr;
  const Blob* b = nullptr;
  bool none() const { return a == nullptr; }
};

// For forward_cost: the elements of a blob but its feature dimension (C of
// NCHW, the last of anything else); the elements of a layer's parameters of
// two or more dimensions (its weights; biases and scales add too little).
double output_positions(const Shape& s);
double weight_elements(const Layer& layer);

struct LayerSchema {
  std::vector<ParamBlockSchema> blocks;
  std::vector<LayerExample> examples;  // empty only for kData layers (tested elsewhere)
  std::string summary;                 // one line for docs and `strata layers`
  LayerKind kind = LayerKind::kCompute;
  // Parameters (short names) that are learned embeddings rather than the
  // weights of a map, e.g. PositionEmbedding's class_token: like biases and
  // norms, no weight decay under no_weight_decay: BIASES_NORMS_EMBEDDINGS.
  std::vector<std::string> embedding_params;
  LayerWork work = LayerWork::kElementwise;
  // Parameters (short names) laid out over the input's patch grid, [1, T, D]
  // with T = (class token +) H x W patches (a ViT's position embedding):
  // weights made for another image size are interpolated to this net's grid
  // on load (transfer/pretrained.cpp).
  std::vector<std::string> grid_params;
  // How many times the layer's 16-bit path (Layer::takes_storage) rounds
  // between its inputs and an output: 1 for a layer that computes in f32
  // and rounds each output once; more for one that also stores what it
  // computes on the way in 16 bits (attention keeps q, k, v and its context
  // in the blobs' dtype, as autocast does: 3). The 16-bit checks allow
  // 2 ulp per rounding (storage_check_tolerance).
  int storage_roundings = 1;
};

// The three CPU overrides most layers have (reshape, forward_cpu,
// backward_cpu), declared with this one line in the layer's class and
// defined in its .cpp. A layer that keeps its base's reshape (an
// elementwise NeuronLayer) declares forward_cpu and backward_cpu itself.
#define STRATA_CPU_METHODS                                                                  \
  void reshape(const ::strata::BlobVec& bottom, const ::strata::BlobVec& top) override;     \
  void forward_cpu(const ::strata::BlobVec& bottom, const ::strata::BlobVec& top) override; \
  void backward_cpu(const ::strata::BlobVec& top, const std::vector<bool>& propagate_down,  \
                    const ::strata::BlobVec& bottom) override

// A layer with CUDA code (<name>.cu) declares its three CUDA overrides
// (has_cuda, forward_cuda, backward_cuda) with this one line in its class;
// a build without CUDA, which compiles no .cu, declares nothing.
#ifdef STRATA_WITH_CUDA
#define STRATA_CUDA_METHODS                                                                 \
  bool has_cuda() const override { return true; }                                           \
  void forward_cuda(const ::strata::BlobVec& bottom, const ::strata::BlobVec& top) override; \
  void backward_cuda(const ::strata::BlobVec& top, const std::vector<bool>& propagate_down,  \
                     const ::strata::BlobVec& bottom) override
#else
#define STRATA_CUDA_METHODS static_assert(true, "a build without CUDA: no CUDA methods")
#endif

class Layer {
 public:
  Layer(const LayerSpec& spec, const LayerContext& ctx) : spec_(spec), ctx_(ctx), rng_(ctx.seed) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return spec_.name; }
  const std::string& type() const { return spec_.type; }
  const LayerSpec& spec() const { return spec_; }
  Phase phase() const { return ctx_.phase; }

  // Bottom/top counts; -1 = any. The Net checks them before setup().
  virtual int min_bottoms() const { return 1; }
  virtual int max_bottoms() const { return 1; }
  virtual int min_tops() const { return 1; }
  virtual int max_tops() const { return 1; }
  // May top[i] be the same blob as bottom[i]?
  virtual bool supports_in_place() const { return false; }
  // Loss layers return 1 for their first top.
  virtual float default_loss_weight(int /*top_index*/) const { return 0.0f; }
  // False for layers whose bottoms take no gradient (labels, Accuracy, data).
  virtual bool can_backward_to(int /*bottom_index*/) const { return true; }
  // What backward reads of the blobs' values (gradients aside): the Net keeps
  // a value only until the last backward that reads it, and then lends its
  // memory to others (framework/net_plan.cpp). Both, unless a layer says
  // less; what a layer keeps for itself (a mask, saved statistics) is its own.
  struct BackwardReads {
    bool bottoms = true;
    bool tops = true;
  };
  virtual BackwardReads backward_reads() const { return {}; }
  // Whether forward and backward take blobs stored in `dtype` as they are
  // (reading and writing that dtype themselves, computing in f32). A net
  // that stores its activations in bf16 or f16 (NetOptions::storage_dtype,
  // the solver's precision) hands a layer that says no f32 copies of its
  // blobs for each call, converted at the call's edges, and keeps only the
  // reduced dtype between calls (framework/net_storage.cpp). f32 alone,
  // unless a layer says more.
  virtual bool takes_storage(DType dtype) const { return dtype == DType::kF32; }
  // The dtype this layer's calls get their blobs in: the net's storage dtype
  // when the layer takes it and one of its blobs is stored reduced, else f32
  // (framework/net_storage.cpp); a blob that stays f32 (bottom_stays_f32,
  // top_stays_f32) comes as it is. Set before setup(), so that what a layer
  // sizes (scratch_bytes, kept_bytes, a GPU library's descriptors) can
  // follow it; a call dispatches on its tensors' own dtype. f32 unless a Net
  // (or code that runs a layer without one, framework/layer_harness.h) says.
  DType call_dtype() const { return call_dtype_; }
  void set_call_dtype(DType dtype) { call_dtype_ = dtype; }
  // Channels-last (framework/layout.h). Whether forward and backward take
  // image blobs laid out NHWC ([N][H][W][C] under the shape [N, C, H, W]),
  // and whether they run faster so. A net asked to (NetOptions::channels_last)
  // stores channels-last the blobs between layers that take it, grown from
  // the layers that run faster in it, and hands a layer that does not take
  // it NCHW copies (framework/net_storage.cpp). kNo unless a layer says.
  virtual ChannelsLast channels_last() const { return ChannelsLast::kNo; }
  // The layout this layer's calls get their 4-D blobs in: NHWC when it takes
  // it and one of its blobs is stored so, else NCHW. Set by the Net before
  // setup() and whenever its choice changes (then reshape() follows, so what
  // a layer prepares for its shapes can follow the layout too).
  Layout call_layout() const { return call_layout_; }
  void set_call_layout(Layout layout) { call_layout_ = layout; }
  // Bottoms and tops whose values a 16-bit dtype cannot hold: class labels
  // and indices (whole numbers, exact in f32 to 2^24 but in bf16 only to
  // 256, in f16 to 2048), a loss, an accuracy. A net that stores its
  // activations in bf16 or f16 keeps such a blob f32, also on its way there
  // (a Split or Reshape of the labels whose every read top stays f32 keeps
  // its bottom f32 too), and hands it to the layer as it is, whatever dtype
  // the layer's other blobs are called in (framework/net_storage.cpp). None
  // unless a layer says.
  virtual bool bottom_stays_f32(int /*index*/) const { return false; }
  virtual bool top_stays_f32(int /*index*/) const { return false; }
  // For a layer that sizes by call_dtype(): ShapeError naming the layer when
  // one of a call's tensors is stored otherwise.
  void check_call_dtype(std::initializer_list<const Tensor*> tensors) const;
  // Whether a later layer of the net writes one of this layer's tops in
  // place (an in-place ReLU on it), so that at this layer's backward a top
  // no longer holds what its forward wrote. Set by the Net before setup();
  // true (the cautious answer) for a layer run without one. A layer that
  // could read its top in backward instead of keeping a copy (BatchNorm)
  // keeps the copy while this is true.
  bool tops_overwritten_later() const { return tops_overwritten_later_; }
  void set_tops_overwritten_later(bool overwritten) { tops_overwritten_later_ = overwritten; }

  // Fusion (framework/net_fusion.cpp). This layer's forward as an epilogue
  // that the layer producing its bottom can apply for it when it runs in
  // place (ReLU); none unless a layer says. Its backward still runs as it is.
  virtual Epilogue as_epilogue() const { return {}; }
  // Whether this layer's forward, on its device and in its call_dtype(), can
  // apply `e` to its one top as it writes it, with the bits the epilogue's
  // own layer would give after it; false unless a layer says.
  virtual bool takes_epilogue(const Epilogue& /*e*/) const { return false; }
  // The epilogue this layer's forward applies, set by the Net before a
  // forward (none: the net fused nothing into it).
  const Epilogue& epilogue() const { return epilogue_; }
  void set_epilogue(const Epilogue& e) { epilogue_ = e; }

  // Residual fusion (framework/net_fusion.cpp). Whether this layer's
  // forward is a plain sum of two bottoms (y = a + b, rounded once to the
  // blobs' dtype) that the layer reading y next may compute for it; false
  // unless a layer says (an Eltwise SUM with unit coefficients).
  virtual bool as_residual_sum() const { return false; }
  // Whether this layer's forward, on its device and in its call_dtype(), can
  // compute its one bottom as a ResidualSum, writing it there as it reads
  // it, with the bits the sum's own layer would write; false unless a layer
  // says (LayerNorm).
  virtual bool takes_residual_sum() const { return false; }
  // The sum this layer's forward computes into its bottom, set by the Net
  // before a forward (none: its bottom is read as it is).
  const ResidualSum& residual_sum() const { return residual_sum_; }
  void set_residual_sum(const ResidualSum& r) { residual_sum_ = r; }

  // Whether the Net may give every top this layer's bottom's memory instead
  // of memory of its own (its plan does so where nothing writes one of them
  // in place and no recompute range is near; framework/net_plan.cpp). A
  // forward whose tops are the bottom's memory copies nothing. False unless
  // a layer says (Split).
  virtual bool tops_may_share_bottom() const { return false; }

  // Step graphs (framework/solver/step_graph.h). Whether this layer's
  // forward and backward, once its shapes are fixed, queue the same device
  // work with the same arguments on every call: nothing read back to the
  // host, no host state that changes per call reaching a kernel (a random
  // seed drawn on the host), no host work the step needs. A captured step
  // replays that work without calling the layer; false unless a layer says.
  virtual bool replays_in_a_graph() const { return false; }
  // Before each replayed pass, on the host: what forward does on the host
  // each call and a replay does not (Dropout draws its seed and queues it to
  // the device; a loss reports the bad label its previous pass found). While
  // the step is captured (cuda::capturing()), forward leaves that to this.
  virtual void before_replay() {}

  // Once: check bottom shapes, create parameters with add_param(). Nothing
  // by default (a layer without parameters may need only reshape()).
  virtual void setup(const BlobVec& /*bottom*/, const BlobVec& /*top*/) {}
  // Before every forward: resize tops from bottom shapes. Must not allocate
  // when shapes are unchanged (Blob::resize keeps capacity).
  virtual void reshape(const BlobVec& bottom, const BlobVec& top) = 0;
  virtual void forward_cpu(const BlobVec& bottom, const BlobVec& top) = 0;
  virtual void backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                            const BlobVec& bottom) = 0;

  // ---- CUDA path: layers/<name>.cu, compiled when the build has CUDA ----
  // A layer with a CUDA implementation overrides these three, declared by
  // the one line STRATA_CUDA_METHODS; in its class (above). On a CUDA net every blob and
  // parameter lives on the device: the CUDA code takes device_data<float>(),
  // and data<float>() throws there, as the host cannot read that memory.
  // setup() and reshape() still run on the host and only touch shapes. The
  // Net refuses to put a layer without a CUDA implementation on a GPU and
  // names it: there is no silent fallback to the CPU.
  virtual bool has_cuda() const { return false; }
  virtual void forward_cuda(const BlobVec& bottom, const BlobVec& top);
  virtual void backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                             const BlobVec& bottom);
  Device device() const { return ctx_.device; }
  // What the layer's runtime chose on its own, for `strata time` (a
  // convolution's cuDNN algorithms and workspaces); "" when nothing.
  virtual std::string describe_runtime() const { return ""; }

  // The user froze this layer (--freeze): a layer that normalises with batch
  // statistics switches to its running statistics. True if it did.
  virtual bool freeze_statistics() { return false; }

  // One forward pass's work at the shapes set up (the FLOP counter of
  // `strata time`/`estimate`, the balancer). The default follows the
  // schema's `work`: kWeights, 2 x (parameters of 2+ dimensions) x output
  // positions (every top element but the feature dimension: C of NCHW, the
  // last of anything else); kElementwise, one operation per top element,
  // none for a layer without bottoms. A layer whose work is neither
  // overrides it (Deconvolution, MultiHeadAttention).
  virtual ForwardCost forward_cost(const BlobVec& bottom, const BlobVec& top) const;

  // A data layer that knows how much it serves: the samples of one pass (this
  // rank's share) and the batch; `strata test` scores one pass. Unknown
  // (nullopt) for other layers, and before setup.
  struct PassSize {
    int64_t samples = 0;
    int64_t batch = 0;
  };
  virtual std::optional<PassSize> pass_size() const { return std::nullopt; }

  // Memory needed only inside one forward or backward call (im2col columns,
  // Winograd tiles, per-thread partial sums; framework/scratch.h), for the
  // shapes of the last reshape() and the current thread count: 0 unless the
  // layer takes scratch(). A Net gives its layers one shared buffer of the
  // largest layer's need (share_scratch), or under a plan by lifetime a
  // place in its arena for each call (the bytes free at that step); a layer
  // alone gets its own. On a GPU too: cuDNN's workspace, attention's
  // temporaries.
  virtual size_t scratch_bytes() const { return 0; }
  void share_scratch(std::shared_ptr<SharedScratch> scratch) { shared_scratch_ = std::move(scratch); }

  // Memory the layer keeps from its forward for its backward besides the
  // blobs (attention's q, k and v, LayerNorm's mean and 1/std), for the shapes of the last reshape():
  // 0 unless the layer takes kept(). A Net planned by lifetime gives it a
  // place in its arena alive from the layer's forward (or recompute) to its
  // backward, shared with other buffers outside that time; otherwise the
  // layer keeps a buffer of its own.
  virtual size_t kept_bytes() const { return 0; }

  // State beyond parameters that a bit-exact resume needs (data cursor, RNG).
  virtual std::string save_state() const { return rng_.save(); }
  virtual void load_state(const std::string& state) { rng_.load(state); }

  std::vector<LayerParam>& params() { return params_; }
  const std::vector<LayerParam>& params() const { return params_; }
  // How params()[i] is split over tensor-parallel ranks (default: it is not).
  virtual ParamShard param_shard(size_t /*param_index*/) const { return {}; }

 protected:
  // Creates a parameter; its position is the index of its `param { }` spec.
  Blob& add_param(const std::string& name, const Shape& shape, Learnable learnable = Learnable::kYes);
  Blob& param(size_t i) { return *params_.at(i).blob; }
  const Blob& param(size_t i) const { return *params_.at(i).blob; }
  // The layer's own block ("convolution_param"), or an empty block.
  const ConfigNode& block(const std::string& key) const { return spec_.node.block(key); }
  // "layer 'conv1' (Convolution)": for error messages.
  std::string where() const;
  // where() and the layer's place in its file: "layer 'conv1' (Convolution) at net.prototxt:12:3".
  std::string where_at() const;
  // ShapeError naming this layer, what was expected and what was found.
  [[noreturn]] void shape_error(const std::string& what) const;
  // At least `bytes` of u8 on the layer's device (what this call lays out;
  // at most scratch_bytes(), or the call takes the shared buffer, grown, in
  // place of the one the plan gave it), for this call
  // only: its contents are undefined at the start of every call (another
  // layer used it in between), so nothing may be kept there from forward to
  // backward, and no view of it may be kept past the call (it would keep a
  // buffer the net has replaced alive). Carve it with ScratchCarver
  // (framework/scratch.h).
  const Tensor& scratch(size_t bytes);
  // At least `bytes` of u8 kept from this step's forward to its backward:
  // the same block in both (carve it alike), undefined before the forward.
  const Tensor& kept(size_t bytes);

  LayerSpec spec_;
  LayerContext ctx_;
  Rng rng_;
  std::vector<LayerParam> params_;

 private:
  friend class Net;  // places kept_place_ and scratch_place_ in its arena
  std::shared_ptr<SharedScratch> shared_scratch_;  // the Net's, when in one
  Tensor own_scratch_;                             // alone
  Tensor scratch_place_;  // the Net's place for this call's scratch(), set only during the call
  Tensor kept_place_;  // the Net's place for kept(), when it has planned one
  Tensor own_kept_;    // otherwise
  DType call_dtype_ = DType::kF32;
  Layout call_layout_ = Layout::kNCHW;
  bool tops_overwritten_later_ = true;
  Epilogue epilogue_;
  ResidualSum residual_sum_;
};

}  // namespace strata
