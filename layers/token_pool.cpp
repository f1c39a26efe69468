#include "layers/token_pool.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "framework/layer_registry.h"
#include "framework/cpu/threads.h"
#include "layers/neuron_layer.h"  // the 16-bit elements (with_float_element)

namespace strata {

TokenPoolLayer::TokenPoolLayer(const LayerSpec& spec, const LayerContext& ctx) : Layer(spec, ctx) {
  pool_ = block("token_pool_param").get_enum("pool", {"CLASS_TOKEN", "MEAN"}, "CLASS_TOKEN") == "MEAN"
              ? Pool::kMean
              : Pool::kClassToken;
}

LayerSchema TokenPoolLayer::schema() {
  LayerSchema s;
  s.summary = "Tokens [N, T, D] -> [N, D]: the class token (token 0) or the mean over tokens";
  s.blocks = {{"token_pool_param", {"pool"}}};
  s.examples = {
      layer_example("", {{2, 3, 4}}),
      layer_example("token_pool_param { pool: MEAN }", {{2, 3, 4}}),
  };
  return s;
}

void TokenPoolLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  const Shape& s = bottom[0]->shape();
  if (s.size() != 3 || s[1] < 1) {
    shape_error("expected tokens [N, T, D] with T >= 1, got " + shape_str(s));
  }
  n_ = s[0];
  t_ = s[1];
  d_ = s[2];
  top[0]->resize({n_, d_});
}

void TokenPoolLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  const Tensor& xt = bottom[0]->data;
  Tensor& yt = top[0]->data;
  if (xt.dtype() != yt.dtype()) check_same_storage("TokenPool forward", {&xt, &yt});  // names both dtypes
  const int64_t T = t_, D = d_;
  const float inv = 1.0f / static_cast<float>(T);
  with_float_element(xt.dtype(), "TokenPool forward", [&](auto e) {
    using E = decltype(e);
    using TE = typename E::T;
    const TE* x = xt.data<TE>();
    TE* y = yt.data<TE>();
    parallel_for(n_, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, T * D)), [&](int64_t begin, int64_t end) {
      std::vector<float> sum(pool_ == Pool::kMean ? static_cast<size_t>(D) : 0);
      for (int64_t n = begin; n < end; ++n) {
        const TE* xn = x + n * T * D;
        TE* yn = y + n * D;
        if (pool_ == Pool::kClassToken) {
          std::memcpy(yn, xn, sizeof(TE) * D);
          continue;
        }
        std::fill(sum.begin(), sum.end(), 0.0f);
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t j = 0; j < D; ++j) sum[static_cast<size_t>(j)] += E::load(xn[t * D + j]);
        }
        for (int64_t j = 0; j < D; ++j) yn[j] = E::store(sum[static_cast<size_t>(j)] * inv);
      }
    });
  });
}

void TokenPoolLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                                  const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const Tensor& dyt = top[0]->diff;
  Tensor& dxt = bottom[0]->diff;
  if (dyt.dtype() != dxt.dtype()) check_same_storage("TokenPool backward", {&dyt, &dxt});
  const int64_t T = t_, D = d_;
  const float inv = 1.0f / static_cast<float>(T);
  with_float_element(dyt.dtype(), "TokenPool backward", [&](auto e) {
    using E = decltype(e);
    using TE = typename E::T;
    const TE* dy = dyt.data<TE>();
    TE* dx = dxt.data<TE>();
    parallel_for(n_, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, T * D)), [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n) {
        const TE* dn = dy + n * D;
        TE* xn = dx + n * T * D;
        if (pool_ == Pool::kClassToken) {
          std::memcpy(xn, dn, sizeof(TE) * D);
          std::fill(xn + D, xn + T * D, E::store(0.0f));
          continue;
        }
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t j = 0; j < D; ++j) xn[t * D + j] = E::store(E::load(dn[j]) * inv);
        }
      }
    });
  });
}

STRATA_REGISTER_LAYER("TokenPool", TokenPoolLayer);

}  // namespace strata
