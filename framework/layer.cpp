#include "framework/layer.h"

#include <algorithm>

#include "framework/caffe_layer_types.h"
#include "framework/error.h"
#include "framework/layer_registry.h"

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

std::string Layer::where() const { return "layer '" + spec_.name + "' (" + spec_.type + ")"; }

void Layer::shape_error(const std::string& what) const {
  fail<ShapeError>(where(), " at ", spec_.node.loc().str(), ": ", what);
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
  // A standard Caffe type (framework/caffe_layer_types.h) gets no did-you-mean:
  // its nearest name (Convolution for Deconvolution) would be a different layer.
  if (is_caffe_layer_type(type)) {
    fail<ConfigError>(type, " is a Caffe layer type strata does not implement yet; replace the layer, or remove "
                      "it if the net works without it (layer types strata has: ", list, ")");
  }
  const std::string near = nearest_key(type, known);
  fail<ConfigError>("unknown layer type '", type, "'", near.empty() ? "" : "; did you mean '" + near + "'?",
                    " (known types: ", list, ")");
}

std::vector<std::string> LayerRegistry::types() const {
  std::vector<std::string> out;
  for (const auto& r : regs_) out.push_back(r.type);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace strata
