#include "framework/layer.h"

#include <algorithm>

#include "framework/caffe/caffe_layer_types.h"
#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/scratch.h"

namespace strata {

const char* phase_name(Phase p) { return p == Phase::kTrain ? "TRAIN" : "TEST"; }

const char* layer_kind_name(LayerKind kind) {
  switch (kind) {
    case LayerKind::kCompute: return "compute";
    case LayerKind::kData: return "data";
    case LayerKind::kNormalization: return "normalization";
    case LayerKind::kEmbedding: return "embedding";
    case LayerKind::kOutput: return "output";
  }
  return "?";
}

Blob& Layer::add_param(const std::string& name, const Shape& shape, Learnable learnable) {
  params_.push_back(LayerParam{name, std::make_shared<Blob>(shape), learnable});
  return *params_.back().blob;
}

void Layer::forward_cuda(const BlobVec&, const BlobVec&) {
  fail<ConfigError>(where(), " has no CUDA implementation; run this net with --device cpu");
}

void Layer::backward_cuda(const BlobVec&, const std::vector<bool>&, const BlobVec&) {
  fail<ConfigError>(where(), " has no CUDA implementation; run this net with --device cpu");
}

const Tensor& Layer::scratch(size_t bytes) {
  // A place planned for fewer bytes (the shapes grew since) is not used.
  if (bytes <= scratch_place_.nbytes() && scratch_place_.storage_id()) return scratch_place_;
  if (shared_scratch_) return shared_scratch_->get(bytes);
  if (own_scratch_.nbytes() < bytes) own_scratch_ = Tensor({static_cast<int64_t>(bytes)}, DType::kU8, device());
  return own_scratch_;
}

const Tensor& Layer::kept(size_t bytes) {
  // A place the Net planned for fewer bytes (the shapes grew since) is not
  // used; forward and backward then both take the layer's own buffer.
  if (kept_place_.nbytes() >= bytes && (bytes == 0 || kept_place_.storage_id())) return kept_place_;
  if (own_kept_.nbytes() < bytes) own_kept_ = Tensor({static_cast<int64_t>(bytes)}, DType::kU8, device());
  return own_kept_;
}

std::string Layer::where() const { return "layer '" + spec_.name + "' (" + spec_.type + ")"; }

void Layer::check_call_dtype(std::initializer_list<const Tensor*> tensors) const {
  for (const Tensor* t : tensors) {
    if (t->dtype() != call_dtype_) {
      fail<ShapeError>(where(), ": a blob stored in ", dtype_name(t->dtype()), " where its calls take ",
                       dtype_name(call_dtype_), " (Layer::call_dtype, set by the net: a layer run without one "
                       "sets it with set_call_dtype)");
    }
  }
}

std::string Layer::where_at() const { return where() + " at " + spec_.node.loc().str(); }

void Layer::shape_error(const std::string& what) const {
  fail<ShapeError>(where_at(), ": ", what);
}

LayerRegistry& LayerRegistry::instance() {
  static LayerRegistry registry;
  return registry;
}

void LayerRegistry::add(LayerRegistration reg) {
  if (has(reg.type)) fail<Error>("layer type '", reg.type, "' registered twice");
  regs_.push_back(std::move(reg));
}

void LayerRegistry::remove(const std::string& type) noexcept {
  regs_.erase(std::remove_if(regs_.begin(), regs_.end(), [&](const auto& r) { return r.type == type; }), regs_.end());
}

bool LayerRegistry::has(const std::string& type) const {
  return std::any_of(regs_.begin(), regs_.end(), [&](const auto& r) { return r.type == type; });
}

const LayerRegistration& LayerRegistry::find(const std::string& type) const {
  for (const auto& r : regs_) {
    if (r.type == type) return r;
  }
  const std::vector<std::string> known = types();
  std::string list;
  for (const auto& t : known) list += (list.empty() ? "" : ", ") + t;
  // Caffe's data layers that have no counterpart; say what to use.
  static const std::vector<std::pair<std::string, std::string>> caffe_data_layers = {
      {"MemoryData", "use an Input layer and set its blobs from code"},
      {"WindowData", "use ArrayData with preprocessed .npy arrays"}};
  for (const auto& [caffe_type, hint] : caffe_data_layers) {
    if (type == caffe_type) fail<ConfigError>("layer type '", type, "': ", hint);
  }
  // A standard Caffe type (framework/caffe/caffe_layer_types.h) gets no did-you-mean:
  // its nearest name (Convolution for Deconvolution) would be a different layer.
  if (is_caffe_layer_type(type)) {
    fail<ConfigError>(type, " is a Caffe layer type strata does not implement yet; replace the layer, remove "
                      "it if the net works without it, or load a layer library of yours that registers it with "
                      "--plugin PATH (layer types strata has: ", list, ")");
  }
  const std::string near = nearest_key(type, known);
  fail<ConfigError>("unknown layer type '", type, "'", near.empty() ? "" : "; did you mean '" + near + "'?",
                    " (known types: ", list, "; a layer library of yours is loaded with --plugin PATH)");
}

std::vector<std::string> LayerRegistry::types() const {
  std::vector<std::string> out;
  for (const auto& r : regs_) out.push_back(r.type);
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

double elements(const Shape& s) {
  double n = 1;
  for (int64_t d : s) n *= static_cast<double>(d);
  return n;
}

}  // namespace

double output_positions(const Shape& s) {
  if (s.empty()) return 0;
  const int64_t features = s.size() == 4 ? s[1] : s.back();
  return features > 0 ? elements(s) / static_cast<double>(features) : 0;
}

double weight_elements(const Layer& layer) {
  double n = 0;
  for (const LayerParam& p : layer.params()) {
    if (p.blob->shape().size() >= 2) n += static_cast<double>(p.blob->numel());
  }
  return n;
}

ForwardCost Layer::forward_cost(const BlobVec& bottom, const BlobVec& top) const {
  ForwardCost c;
  for (const LayerParam& p : params_) c.bytes += static_cast<double>(p.blob->data.nbytes());
  for (const Blob* b : bottom) c.bytes += static_cast<double>(b->data.nbytes());
  for (const Blob* t : top) c.bytes += static_cast<double>(t->data.nbytes());
  if (LayerRegistry::instance().find(type()).schema().work == LayerWork::kWeights) {
    if (!top.empty()) c.flops = 2 * weight_elements(*this) * output_positions(top[0]->shape());
    return c;
  }
  if (bottom.empty()) return c;  // an input or data layer: nothing a step waits on here
  for (const Blob* t : top) c.flops += static_cast<double>(t->numel());
  return c;
}

}  // namespace strata
