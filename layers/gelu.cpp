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
  if (top[0] == bottom[0]) input_copy_.resize(bottom[0]->shape());
}

void GELULayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  if (top[0] == bottom[0]) input_copy_.copy_from(bottom[0]->data);
  const int64_t n = bottom[0]->numel();
  const float* x = bottom[0]->data.data<float>();
  float* y = top[0]->data.data<float>();
  if (approximate_ == Approximate::kTanh) {
    neuron_forward_cpu(GELUTanhOp{}, n, x, y, kMinChunk);
  } else {
    neuron_forward_cpu(GELUErfOp{}, n, x, y, kMinChunk);
  }
}

void GELULayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                             const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const int64_t n = bottom[0]->numel();
  const float* x = saved_input(top, bottom).data<float>();
  const float* dy = top[0]->diff.data<float>();
  float* dx = bottom[0]->diff.data<float>();  // may equal dy: read before written, per element
  if (approximate_ == Approximate::kTanh) {
    neuron_backward_cpu(GELUTanhOp{}, n, x, dy, dx, kMinChunk);
  } else {
    neuron_backward_cpu(GELUErfOp{}, n, x, dy, dx, kMinChunk);
  }
}

STRATA_REGISTER_LAYER("GELU", GELULayer);

}  // namespace strata
