#include "layers/sigmoid.h"

#include <cmath>

#include "framework/layer_registry.h"
#include "framework/threads.h"

namespace strata {
namespace {
constexpr int64_t kMinChunk = 32768;

// exp() only ever sees a non-positive argument, so it cannot overflow and
// large |x| saturate cleanly to 0 or 1.
inline float stable_sigmoid(float x) {
  if (x >= 0.0f) return 1.0f / (1.0f + std::exp(-x));
  const float e = std::exp(x);
  return e / (1.0f + e);
}
}  // namespace

LayerSchema SigmoidLayer::schema() {
  LayerSchema s;
  s.summary = "Logistic sigmoid 1 / (1 + exp(-x)), stable for large |x|; may run in place";
  s.blocks = {{"sigmoid_param", {"engine"}}};  // engine accepted for Caffe files, ignored
  LayerExample ex;
  ex.bottom_shapes = {{2, 3, 4}};
  s.examples = {ex};
  return s;
}

void SigmoidLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  if (top[0] != bottom[0]) top[0]->reshape_like(*bottom[0]);
}

void SigmoidLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  const float* x = bottom[0]->data.data<float>();
  float* y = top[0]->data.data<float>();
  parallel_for(bottom[0]->numel(), kMinChunk, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = stable_sigmoid(x[i]);
  });
}

void SigmoidLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                                const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const float* y = top[0]->data.data<float>();
  const float* dy = top[0]->diff.data<float>();
  float* dx = bottom[0]->diff.data<float>();
  parallel_for(top[0]->numel(), kMinChunk, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dx[i] = dy[i] * y[i] * (1.0f - y[i]);
  });
}

STRATA_REGISTER_LAYER("Sigmoid", SigmoidLayer);

}  // namespace strata
