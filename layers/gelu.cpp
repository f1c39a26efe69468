#include "layers/gelu.h"

#include <cmath>

#include "framework/layer_registry.h"
#include "framework/threads.h"

namespace strata {
namespace {
constexpr int64_t kMinChunk = 16384;
constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;
constexpr float kSqrt2OverPi = 0.79788456080286536f;
constexpr float kTanhCoeff = 0.044715f;

float gelu_erf(float x) { return 0.5f * x * (1.0f + std::erf(x * kInvSqrt2)); }
float gelu_erf_grad(float x) {
  return 0.5f * (1.0f + std::erf(x * kInvSqrt2)) + x * kInvSqrt2Pi * std::exp(-0.5f * x * x);
}
float gelu_tanh(float x) {
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + kTanhCoeff * x * x * x)));
}
float gelu_tanh_grad(float x) {
  const float t = std::tanh(kSqrt2OverPi * (x + kTanhCoeff * x * x * x));
  // (1 - t) (1 + t) rather than 1 - t^2: exact 0 once tanh saturates, so a
  // huge |x| times it stays 0 instead of inf * 0.
  const float sech2 = (1.0f - t) * (1.0f + t);
  const float du = kSqrt2OverPi * (1.0f + 3.0f * kTanhCoeff * x * x);
  const float tail = sech2 == 0.0f ? 0.0f : 0.5f * x * sech2 * du;
  return 0.5f * (1.0f + t) + tail;
}
}  // namespace

GELULayer::GELULayer(const LayerSpec& spec, const LayerContext& ctx) : Layer(spec, ctx) {
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
  if (top[0] != bottom[0]) {
    top[0]->reshape_like(*bottom[0]);
  } else {
    input_copy_.resize(bottom[0]->shape());
  }
}

void GELULayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  const int64_t n = bottom[0]->numel();
  if (top[0] == bottom[0]) input_copy_.copy_from(bottom[0]->data);
  const float* x = bottom[0]->data.data<float>();
  float* y = top[0]->data.data<float>();
  const bool tanh_form = approximate_ == Approximate::kTanh;
  parallel_for(n, kMinChunk, [&](int64_t begin, int64_t end) {
    if (tanh_form) {
      for (int64_t i = begin; i < end; ++i) y[i] = gelu_tanh(x[i]);
    } else {
      for (int64_t i = begin; i < end; ++i) y[i] = gelu_erf(x[i]);
    }
  });
}

void GELULayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                             const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const int64_t n = bottom[0]->numel();
  const float* x = top[0] == bottom[0] ? input_copy_.data<float>() : bottom[0]->data.data<float>();
  const float* dy = top[0]->diff.data<float>();
  float* dx = bottom[0]->diff.data<float>();  // may equal dy: read before written, per element
  const bool tanh_form = approximate_ == Approximate::kTanh;
  parallel_for(n, kMinChunk, [&](int64_t begin, int64_t end) {
    if (tanh_form) {
      for (int64_t i = begin; i < end; ++i) dx[i] = dy[i] * gelu_tanh_grad(x[i]);
    } else {
      for (int64_t i = begin; i < end; ++i) dx[i] = dy[i] * gelu_erf_grad(x[i]);
    }
  });
}

STRATA_REGISTER_LAYER("GELU", GELULayer);

}  // namespace strata
