#include "layers/adaptive_pooling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/cpu/threads.h"
#include "layers/neuron_layer.h"  // the 16-bit elements (with_float_element)

namespace strata {
namespace {
// torch's adaptive bin [start, end) of output index i over `in` inputs.
int64_t bin_start(int64_t i, int64_t in, int64_t out) { return (i * in) / out; }
int64_t bin_end(int64_t i, int64_t in, int64_t out) { return ((i + 1) * in + out - 1) / out; }
}  // namespace

AdaptivePoolingLayer::AdaptivePoolingLayer(const LayerSpec& spec, const LayerContext& ctx) : Layer(spec, ctx) {
  const ConfigNode& p = block("adaptive_pooling_param");
  const std::string context = "adaptive_pooling_param of " + where() + " at " + p.loc().str();
  pool_ = p.get_enum("pool", {"AVE", "MAX"}, "AVE") == "MAX" ? Pool::kMax : Pool::kAve;
  const bool has_size = p.has("output_size");
  const bool has_hw = p.has("output_h") || p.has("output_w");
  if (has_size == has_hw) {
    fail<ConfigError>(context, ": give either output_size or both output_h and output_w");
  }
  if (has_size) {
    out_h_ = out_w_ = p.get_int("output_size");
  } else {
    out_h_ = p.get_int("output_h");
    out_w_ = p.get_int("output_w");
  }
  if (out_h_ <= 0 || out_w_ <= 0) {
    fail<ConfigError>(context, ": the output size must be > 0, got ", out_h_, " x ", out_w_);
  }
  argmax_ = Tensor({0}, DType::kI32);
}

LayerSchema AdaptivePoolingLayer::schema() {
  LayerSchema s;
  s.summary = "Adaptive AVE or MAX pooling of [N, C, H, W] to a fixed [out_h, out_w] (PyTorch adaptive pooling)";
  s.blocks = {{"adaptive_pooling_param", {"output_size", "output_h", "output_w", "pool"}}};
  s.examples = {
      layer_example("adaptive_pooling_param { output_size: 2 }", {{2, 2, 5, 3}}),
      layer_example("adaptive_pooling_param { output_h: 3 output_w: 2 pool: MAX }", {{2, 2, 5, 4}}),
      layer_example("adaptive_pooling_param { output_h: 4 output_w: 1 pool: AVE }", {{2, 1, 3, 3}}),
  };
  return s;
}

void AdaptivePoolingLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  const Shape& s = bottom[0]->shape();
  if (s.size() != 4 || s[2] <= 0 || s[3] <= 0) {
    shape_error("expected images [N, C, H, W] with H, W >= 1, got " + shape_str(s));
  }
  n_ = s[0];
  c_ = s[1];
  h_ = s[2];
  w_ = s[3];
  top[0]->resize({n_, c_, out_h_, out_w_});
  if (pool_ == Pool::kMax) argmax_.resize({n_, c_, out_h_, out_w_});
}

void AdaptivePoolingLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  const Tensor& xt = bottom[0]->data;
  Tensor& yt = top[0]->data;
  if (xt.dtype() != yt.dtype()) check_same_storage("AdaptivePooling forward", {&xt, &yt});  // names both dtypes
  int32_t* arg = pool_ == Pool::kMax ? argmax_.data<int32_t>() : nullptr;
  const int64_t H = h_, W = w_, OH = out_h_, OW = out_w_;
  with_float_element(xt.dtype(), "AdaptivePooling forward", [&](auto e) {
    using E = decltype(e);
    using T = typename E::T;
    const T* x = xt.data<T>();
    T* y = yt.data<T>();
    parallel_for(n_ * c_, std::max<int64_t>(1, 16384 / (H * W)), [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const T* xp = x + plane * H * W;
        T* yp = y + plane * OH * OW;
        for (int64_t i = 0; i < OH; ++i) {
          const int64_t h0 = bin_start(i, H, OH), h1 = bin_end(i, H, OH);
          for (int64_t j = 0; j < OW; ++j) {
            const int64_t w0 = bin_start(j, W, OW), w1 = bin_end(j, W, OW);
            if (arg) {
              float best = -std::numeric_limits<float>::infinity();
              int64_t best_at = h0 * W + w0;
              for (int64_t h = h0; h < h1; ++h) {
                for (int64_t w = w0; w < w1; ++w) {
                  const float v = E::load(xp[h * W + w]);
                  if (v > best || std::isnan(v)) {  // as torch: NaN wins
                    best = v;
                    best_at = h * W + w;
                  }
                }
              }
              yp[i * OW + j] = E::store(best);
              arg[plane * OH * OW + i * OW + j] = static_cast<int32_t>(best_at);
            } else {
              double sum = 0.0;
              for (int64_t h = h0; h < h1; ++h) {
                for (int64_t w = w0; w < w1; ++w) sum += E::load(xp[h * W + w]);
              }
              yp[i * OW + j] = E::store(static_cast<float>(sum / static_cast<double>((h1 - h0) * (w1 - w0))));
            }
          }
        }
      }
    });
  });
}

void AdaptivePoolingLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                                        const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const Tensor& dyt = top[0]->diff;
  Tensor& dxt = bottom[0]->diff;
  if (dyt.dtype() != dxt.dtype()) check_same_storage("AdaptivePooling backward", {&dyt, &dxt});
  const int32_t* arg = pool_ == Pool::kMax ? argmax_.data<int32_t>() : nullptr;
  const int64_t H = h_, W = w_, OH = out_h_, OW = out_w_;
  with_float_element(dyt.dtype(), "AdaptivePooling backward", [&](auto e) {
    using E = decltype(e);
    using T = typename E::T;
    const T* dy = dyt.data<T>();
    T* dx = dxt.data<T>();
    // Bins may overlap, so each plane is cleared and then accumulated into:
    // f32 in place, or a plane of f32 sums rounded once at the end.
    parallel_for(n_ * c_, std::max<int64_t>(1, 16384 / (H * W)), [&](int64_t begin, int64_t end) {
      std::vector<float> sums(E::kIsF32 ? 0 : static_cast<size_t>(H * W));
      for (int64_t plane = begin; plane < end; ++plane) {
        T* dxt_p = dx + plane * H * W;
        float* dxp = E::kIsF32 ? reinterpret_cast<float*>(dxt_p) : sums.data();
        const T* dyp = dy + plane * OH * OW;
        std::fill(dxp, dxp + H * W, 0.0f);
        for (int64_t i = 0; i < OH; ++i) {
          const int64_t h0 = bin_start(i, H, OH), h1 = bin_end(i, H, OH);
          for (int64_t j = 0; j < OW; ++j) {
            const float g = E::load(dyp[i * OW + j]);
            if (arg) {
              dxp[arg[plane * OH * OW + i * OW + j]] += g;
              continue;
            }
            const int64_t w0 = bin_start(j, W, OW), w1 = bin_end(j, W, OW);
            const float share = g / static_cast<float>((h1 - h0) * (w1 - w0));
            for (int64_t h = h0; h < h1; ++h) {
              for (int64_t w = w0; w < w1; ++w) dxp[h * W + w] += share;
            }
          }
        }
        if constexpr (!E::kIsF32) {
          for (int64_t k = 0; k < H * W; ++k) dxt_p[k] = E::store(dxp[k]);
        }
      }
    });
  });
}

STRATA_REGISTER_LAYER("AdaptivePooling", AdaptivePoolingLayer);

}  // namespace strata
