#include "layers/position_embedding.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/cpu/threads.h"
#include "layers/neuron_layer.h"  // the 16-bit elements (with_float_element)

namespace strata {

PositionEmbeddingLayer::PositionEmbeddingLayer(const LayerSpec& spec, const LayerContext& ctx)
    : Layer(spec, ctx) {
  const ConfigNode& p = block("position_embedding_param");
  class_token_ = p.get_bool("class_token", true) ? ClassToken::kYes : ClassToken::kNo;
  // ViT's initialisation: N(0, 0.02) (torchvision, timm's trunc_normal std 0.02).
  FillerSpec def;
  def.type = "gaussian";
  def.std = 0.02f;
  filler_ = parse_filler(p.block("filler"), def, "filler of " + where());
}

LayerSchema PositionEmbeddingLayer::schema() {
  LayerSchema s;
  s.kind = LayerKind::kEmbedding;
  s.embedding_params = {"class_token", "pos_embedding"};
  s.grid_params = {"pos_embedding"};
  s.summary = "ViT token embedding: prepends a learned class token (optional) and adds a learned position "
              "embedding to [N, T, D]";
  s.blocks = {{"position_embedding_param", {"class_token", "filler"}}};
  s.examples = {
      layer_example("", {{2, 3, 4}}),
      layer_example("position_embedding_param { class_token: false filler { type: 'gaussian' } }", {{2, 2, 3}}),
  };
  return s;
}

void PositionEmbeddingLayer::setup(const BlobVec& bottom, const BlobVec& /*top*/) {
  const Shape& s = bottom[0]->shape();
  if (s.size() != 3) shape_error("expected tokens [N, T, D], got " + shape_str(s) + "; put a PatchEmbed first");
  t_ = s[1];
  d_ = s[2];
  if (class_token_ == ClassToken::kYes) {
    // torchvision starts the class token at zero.
    add_param("class_token", {1, 1, d_}).data.zero();
  }
  Blob& pos = add_param("pos_embedding", {1, t_ + extra(), d_});
  fill(filler_, pos.data, rng_);
}

void PositionEmbeddingLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  const Shape& s = bottom[0]->shape();
  if (s.size() != 3 || s[1] != t_ || s[2] != d_) {
    shape_error("expected tokens [N, " + std::to_string(t_) + ", " + std::to_string(d_) +
                "] (as at setup: the position embedding has one row per token), got " + shape_str(s) +
                "; a different image size needs the position embedding resized when loading the weights");
  }
  n_ = s[0];
  top[0]->resize({n_, t_ + extra(), d_});
}

void PositionEmbeddingLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  const Tensor& xt = bottom[0]->data;
  Tensor& yt = top[0]->data;
  if (xt.dtype() != yt.dtype()) check_same_storage("PositionEmbedding forward", {&xt, &yt});  // names both
  const float* pos = pos_embedding().data.data<float>();
  const float* cls = class_token_ == ClassToken::kYes ? param(0).data.data<float>() : nullptr;
  const int64_t T = t_, D = d_, E = extra(), out_t = T + E;
  // f32, or bf16/f16 widened per element: each sum in f32, rounded once.
  with_float_element(xt.dtype(), "PositionEmbedding forward", [&](auto e) {
    using El = decltype(e);
    using V = typename El::T;
    const V* x = xt.data<V>();
    V* y = yt.data<V>();
    parallel_for(n_, std::max<int64_t>(1, 16384 / (out_t * D)), [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n) {
        V* yn = y + n * out_t * D;
        if (cls) {
          for (int64_t j = 0; j < D; ++j) yn[j] = El::store(cls[j] + pos[j]);
        }
        const V* xn = x + n * T * D;
        const float* pn = pos + E * D;
        V* yt_n = yn + E * D;
        for (int64_t i = 0; i < T * D; ++i) yt_n[i] = El::store(El::load(xn[i]) + pn[i]);
      }
    });
  });
}

void PositionEmbeddingLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                                          const BlobVec& bottom) {
  const Tensor& dyt = top[0]->diff;
  const int64_t T = t_, D = d_, E = extra(), out_t = T + E;
  const int64_t per = out_t * D;
  with_float_element(dyt.dtype(), "PositionEmbedding backward", [&](auto e) {
    using El = decltype(e);
    using V = typename El::T;
    const V* dy = dyt.data<V>();
    // Both parameters are shared by every sample: sum over the batch. Threads
    // own ranges of the [T + E, D] embedding.
    float* dpos = pos_embedding().diff.data<float>();
    parallel_for(per, std::max<int64_t>(256, 16384 / std::max<int64_t>(1, n_)), [&](int64_t begin, int64_t end) {
      for (int64_t n = 0; n < n_; ++n) {
        const V* dn = dy + n * per;
        for (int64_t i = begin; i < end; ++i) dpos[i] += El::load(dn[i]);
      }
    });
    if (class_token_ == ClassToken::kYes) {
      float* dcls = param(0).diff.data<float>();
      for (int64_t n = 0; n < n_; ++n) {
        for (int64_t j = 0; j < D; ++j) dcls[j] += El::load(dy[n * per + j]);
      }
    }
    if (!propagate_down[0]) return;
    if (bottom[0]->diff.dtype() != dyt.dtype()) check_same_storage("PositionEmbedding backward", {&dyt, &bottom[0]->diff});
    V* dx = bottom[0]->diff.data<V>();
    parallel_for(n_, std::max<int64_t>(1, 16384 / per), [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n) std::memcpy(dx + n * T * D, dy + n * per + E * D, sizeof(V) * T * D);
    });
  });
}

STRATA_REGISTER_LAYER("PositionEmbedding", PositionEmbeddingLayer);

}  // namespace strata
