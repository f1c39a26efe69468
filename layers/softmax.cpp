#include "layers/softmax.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "framework/layer_registry.h"
#include "framework/cpu/threads.h"
#include "layers/neuron_layer.h"  // the 16-bit elements (with_float_element)

namespace strata {
namespace {
constexpr int64_t kMinChunkElements = 32768;

// Outer slices per thread chunk so that each chunk touches ~kMinChunkElements.
int64_t outer_chunk(const SoftmaxGeometry& g) {
  return std::max<int64_t>(1, kMinChunkElements / std::max<int64_t>(1, g.channels * g.inner));
}
}  // namespace

// Per outer slice, the inner positions are processed together so every loop
// walks memory contiguously (inner == 1 is the plain [N, C] case).
void softmax_forward(const SoftmaxGeometry& g, const float* x, float* y, float* row_max, float* row_sum) {
  const int64_t C = g.channels, inner = g.inner;
  if (C == 0) return;
  parallel_for(g.outer, outer_chunk(g), [&](int64_t ob, int64_t oe) {
    for (int64_t o = ob; o < oe; ++o) {
      const float* xo = x + o * C * inner;
      float* yo = y + o * C * inner;
      float* mx = row_max + o * inner;
      float* sum = row_sum + o * inner;
      std::copy(xo, xo + inner, mx);
      for (int64_t c = 1; c < C; ++c) {
        const float* xc = xo + c * inner;
        for (int64_t i = 0; i < inner; ++i) mx[i] = std::max(mx[i], xc[i]);
      }
      std::fill(sum, sum + inner, 0.0f);
      for (int64_t c = 0; c < C; ++c) {
        const float* xc = xo + c * inner;
        float* yc = yo + c * inner;
        for (int64_t i = 0; i < inner; ++i) {
          yc[i] = std::exp(xc[i] - mx[i]);
          sum[i] += yc[i];
        }
      }
      for (int64_t c = 0; c < C; ++c) {
        float* yc = yo + c * inner;
        for (int64_t i = 0; i < inner; ++i) yc[i] /= sum[i];
      }
    }
  });
}

SoftmaxLayer::SoftmaxLayer(const LayerSpec& spec, const LayerContext& ctx)
    : Layer(spec, ctx), axis_(static_cast<int>(block("softmax_param").get_int("axis", 1))) {}

LayerSchema SoftmaxLayer::schema() {
  LayerSchema s;
  s.summary = "Softmax along softmax_param.axis (default 1), max-subtracted for stability; may run in place";
  s.blocks = {{"softmax_param", {"axis", "engine"}}};  // engine accepted for Caffe files, ignored
  LayerExample flat;
  flat.bottom_shapes = {{2, 5}};
  LayerExample spatial;
  spatial.bottom_shapes = {{2, 3, 2, 2}};
  LayerExample last_axis;
  last_axis.config = "softmax_param { axis: -1 }";
  last_axis.bottom_shapes = {{2, 3, 4}};
  s.examples = {flat, spatial, last_axis};
  return s;
}

void SoftmaxLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  const Tensor& x = bottom[0]->data;
  const int axis = axis_ < 0 ? axis_ + x.ndim() : axis_;
  if (axis < 0 || axis >= x.ndim()) {
    shape_error("softmax_param.axis " + std::to_string(axis_) + " is out of range for bottom shape " +
                shape_str(x.shape()) + "; use an axis in [-" + std::to_string(x.ndim()) + ", " +
                std::to_string(x.ndim()) + ")");
  }
  geom_ = SoftmaxGeometry{x.count(0, axis), x.shape()[axis], x.count(axis + 1)};
  if (top[0] != bottom[0]) top[0]->reshape_like(*bottom[0]);
  row_a_.resize({geom_.outer * geom_.inner});
  row_b_.resize({geom_.outer * geom_.inner});
}

void SoftmaxLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  const Tensor& xt = bottom[0]->data;
  Tensor& yt = top[0]->data;
  if (xt.dtype() == DType::kF32 && yt.dtype() == DType::kF32) {
    return softmax_forward(geom_, xt.data<float>(), yt.data<float>(), row_a_.data<float>(), row_b_.data<float>());
  }
  check_same_storage("Softmax forward", {&xt, &yt});
  // 16-bit: the f32 loop's maxima and sums (exp computed the same way), then
  // each output exp(x - max) / sum rounded once.
  const int64_t C = geom_.channels, inner = geom_.inner;
  if (C == 0) return;
  with_float_element(xt.dtype(), "Softmax forward", [&](auto e) {
    using E = decltype(e);
    using T = typename E::T;
    const T* x = xt.data<T>();
    T* y = yt.data<T>();
    float* mx_all = row_a_.data<float>();
    float* sum_all = row_b_.data<float>();
    parallel_for(geom_.outer, outer_chunk(geom_), [&](int64_t ob, int64_t oe) {
      for (int64_t o = ob; o < oe; ++o) {
        const T* xo = x + o * C * inner;
        T* yo = y + o * C * inner;
        float* mx = mx_all + o * inner;
        float* sum = sum_all + o * inner;
        for (int64_t i = 0; i < inner; ++i) mx[i] = E::load(xo[i]);
        for (int64_t c = 1; c < C; ++c) {
          for (int64_t i = 0; i < inner; ++i) mx[i] = std::max(mx[i], E::load(xo[c * inner + i]));
        }
        std::fill(sum, sum + inner, 0.0f);
        for (int64_t c = 0; c < C; ++c) {
          for (int64_t i = 0; i < inner; ++i) sum[i] += std::exp(E::load(xo[c * inner + i]) - mx[i]);
        }
        for (int64_t c = 0; c < C; ++c) {
          for (int64_t i = 0; i < inner; ++i) {
            yo[c * inner + i] = E::store(std::exp(E::load(xo[c * inner + i]) - mx[i]) / sum[i]);
          }
        }
      }
    });
  });
}

void SoftmaxLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                                const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const Tensor& yt = top[0]->data;
  const Tensor& dyt = top[0]->diff;
  Tensor& dxt = bottom[0]->diff;  // may be dy: each element is read before it is written
  if (yt.dtype() != DType::kF32 || dxt.dtype() != DType::kF32) {
    check_same_storage("Softmax backward", {&yt, &dyt, &dxt});
  }
  float* dot_all = row_a_.data<float>();
  const int64_t C = geom_.channels, inner = geom_.inner;
  if (C == 0) return;
  // f32, or bf16/f16 widened per element, dx rounded once.
  with_float_element(yt.dtype(), "Softmax backward", [&](auto e) {
    using E = decltype(e);
    using T = typename E::T;
    const T* y = yt.data<T>();
    const T* dy = dyt.data<T>();
    T* dx = dxt.data<T>();
    parallel_for(geom_.outer, outer_chunk(geom_), [&](int64_t ob, int64_t oe) {
      for (int64_t o = ob; o < oe; ++o) {
        const int64_t base = o * C * inner;
        float* dot = dot_all + o * inner;
        std::fill(dot, dot + inner, 0.0f);
        for (int64_t c = 0; c < C; ++c) {
          for (int64_t i = 0; i < inner; ++i) {
            dot[i] += E::load(dy[base + c * inner + i]) * E::load(y[base + c * inner + i]);
          }
        }
        for (int64_t c = 0; c < C; ++c) {
          for (int64_t i = 0; i < inner; ++i) {
            const int64_t k = base + c * inner + i;
            dx[k] = E::store(E::load(y[k]) * (E::load(dy[k]) - dot[i]));
          }
        }
      }
    });
  });
}

STRATA_REGISTER_LAYER("Softmax", SoftmaxLayer);

}  // namespace strata
