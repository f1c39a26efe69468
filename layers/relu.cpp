#include "layers/relu.h"

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/threads.h"

namespace strata {
namespace {
constexpr int64_t kMinChunk = 32768;
}

ReLULayer::ReLULayer(const LayerSpec& spec, const LayerContext& ctx)
    : ReLULayer(spec, ctx, static_cast<float>(spec.node.block("relu_param").get_double("negative_slope", 0.0))) {}

ReLULayer::ReLULayer(const LayerSpec& spec, const LayerContext& ctx, float negative_slope)
    : Layer(spec, ctx), negative_slope_(negative_slope) {}

LayerSchema ReLULayer::schema() {
  LayerSchema s;
  s.summary = "Rectified linear unit: max(x, 0) + negative_slope * min(x, 0); may run in place";
  s.blocks = {{"relu_param", {"negative_slope", "engine"}}};
  // Piecewise linear: central differences are exact away from the kink at 0,
  // and the generic test keeps Gaussian inputs two steps away from 0.
  LayerExample plain;
  plain.bottom_shapes = {{2, 3, 4}};
  LayerExample leaky = plain;
  leaky.config = "relu_param { negative_slope: 0.2 }";
  s.examples = {plain, leaky};
  return s;
}

void ReLULayer::setup(const BlobVec& bottom, const BlobVec& top) {
  // In place, backward sees y instead of x. sign(y) == sign(x) only when the
  // slope is not negative, so a negative slope needs the original input.
  if (negative_slope_ < 0.0f && top[0] == bottom[0]) {
    fail<ConfigError>(where(), " at ", spec_.node.loc().str(), ": negative_slope ", negative_slope_,
                      " < 0 cannot run in place (the sign of the input is lost); give the top a "
                      "different name from the bottom");
  }
}

void ReLULayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  if (top[0] != bottom[0]) top[0]->reshape_like(*bottom[0]);
}

void ReLULayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  const float* x = bottom[0]->data.data<float>();
  float* y = top[0]->data.data<float>();
  const float slope = negative_slope_;
  parallel_for(bottom[0]->numel(), kMinChunk, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = x[i] > 0.0f ? x[i] : slope * x[i];
  });
}

void ReLULayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                             const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  // For slope >= 0, y > 0 exactly when x > 0, so testing y is correct both
  // out of place and in place (where x has been overwritten by y).
  const float* y = top[0]->data.data<float>();
  const float* dy = top[0]->diff.data<float>();
  float* dx = bottom[0]->diff.data<float>();
  const float* sign_src = negative_slope_ < 0.0f ? bottom[0]->data.data<float>() : y;
  const float slope = negative_slope_;
  parallel_for(top[0]->numel(), kMinChunk, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dx[i] = sign_src[i] > 0.0f ? dy[i] : slope * dy[i];
  });
}

STRATA_REGISTER_LAYER("ReLU", ReLULayer);

}  // namespace strata
