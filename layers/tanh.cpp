#include "layers/tanh.h"

#include <cmath>

#include "framework/layer_registry.h"
#include "framework/threads.h"

namespace strata {
namespace {
constexpr int64_t kMinChunk = 32768;
}

LayerSchema TanHLayer::schema() {
  LayerSchema s;
  s.summary = "Hyperbolic tangent; may run in place";
  s.blocks = {{"tanh_param", {"engine"}}};  // engine accepted for Caffe files, ignored
  LayerExample ex;
  ex.bottom_shapes = {{2, 3, 4}};
  s.examples = {ex};
  return s;
}

void TanHLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  if (top[0] != bottom[0]) top[0]->reshape_like(*bottom[0]);
}

void TanHLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  const float* x = bottom[0]->data.data<float>();
  float* y = top[0]->data.data<float>();
  parallel_for(bottom[0]->numel(), kMinChunk, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = std::tanh(x[i]);
  });
}

void TanHLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                             const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const float* y = top[0]->data.data<float>();
  const float* dy = top[0]->diff.data<float>();
  float* dx = bottom[0]->diff.data<float>();
  parallel_for(top[0]->numel(), kMinChunk, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dx[i] = dy[i] * (1.0f - y[i] * y[i]);
  });
}

STRATA_REGISTER_LAYER("TanH", TanHLayer);

}  // namespace strata
