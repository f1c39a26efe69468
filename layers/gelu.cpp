#include "layers/gelu.h"

#include "framework/layer_registry.h"

namespace strata {
namespace {
constexpr int64_t kMinChunk = 16384;  // erf / tanh per element: worth threads sooner
}  // namespace

GELULayer::GELULayer(const LayerSpec& spec, const LayerContext& ctx) : NeuronLayer(spec, ctx) {
  approximate_ = block("gelu_param").get_enum("approximate", {"NONE", "TANH"}, "NONE") == "TANH"
                     ? Approximate::kTanh
                     : Approximate::kNone;
}

LayerSchema GELULayer::schema() {
  LayerSchema s;
  s.summary = "GELU activation x * Phi(x), exact (erf) or torch's tanh approximation; may run in place";
  s.blocks = {{"gelu_param", {"approximate"}}};
  s.examples = {
      layer_example("", {{2, 3, 4}}),
      layer_example("gelu_param { approximate: TANH }", {{2, 3, 4}}),
  };
  return s;
}

void GELULayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  NeuronLayer::reshape(bottom, top);
  if (top[0] != bottom[0]) return;
  const DType dtype = bottom[0]->data.dtype();  // the copy is stored as the blob is
  if (input_copy_.dtype() != dtype) input_copy_ = Tensor(Shape{0}, dtype);
  input_copy_.resize(bottom[0]->shape());
}

void GELULayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  if (top[0] == bottom[0]) input_copy_.copy_from(bottom[0]->data);
  const Tensor& x = bottom[0]->data;
  Tensor& y = top[0]->data;
  if (approximate_ == Approximate::kTanh) {
    neuron_forward_cpu(GELUTanhOp{}, x, y, kMinChunk);
  } else {
    neuron_forward_cpu(GELUErfOp{}, x, y, kMinChunk);
  }
}

void GELULayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                             const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const Tensor& x = saved_input(top, bottom);
  const Tensor& dy = top[0]->diff;
  Tensor& dx = bottom[0]->diff;  // may be dy: read before written, per element
  if (approximate_ == Approximate::kTanh) {
    neuron_backward_cpu(GELUTanhOp{}, x, dy, dx, kMinChunk);
  } else {
    neuron_backward_cpu(GELUErfOp{}, x, dy, dx, kMinChunk);
  }
}

STRATA_REGISTER_LAYER("GELU", GELULayer);

}  // namespace strata
