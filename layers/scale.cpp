#include "layers/scale.h"

#include <algorithm>

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/cpu/threads.h"
#include "framework/scratch.h"
#include "layers/neuron_layer.h"  // the 16-bit elements (with_float_element)

namespace strata {

ScaleLayer::ScaleLayer(const LayerSpec& spec, const LayerContext& ctx) : Layer(spec, ctx) {
  const ConfigNode& p = block("scale_param");
  axis_param_ = p.get_int("axis", 1);
  num_axes_param_ = p.get_int("num_axes", 1);
  bias_term_ = p.get_bool("bias_term", false);
  if (num_axes_param_ < -1) {
    fail<ConfigError>("scale_param of ", where(), " at ", p.loc().str(),
                      ": num_axes must be >= -1 (-1 = all axes from axis on), got ", num_axes_param_);
  }
  FillerSpec one;
  one.value = 1.0f;
  filler_ = parse_filler(p.block("filler"), one, "filler of " + where());
  bias_filler_ = parse_filler(p.block("bias_filler"), FillerSpec{}, "bias_filler of " + where());
}

LayerSchema ScaleLayer::schema() {
  LayerSchema s;
  s.kind = LayerKind::kNormalization;
  s.blocks = {{"scale_param", {"axis", "num_axes", "bias_term", "filler", "bias_filler"}}};
  const std::string random = "filler { type: \"gaussian\" mean: 1 std: 0.5 } ";
  s.examples = {
      layer_example("scale_param { " + random + "}", {{2, 3, 2, 2}}),
      layer_example("scale_param { bias_term: true " + random + "bias_filler { type: \"gaussian\" std: 0.5 } }",
              {{2, 3, 2}}),
      layer_example("scale_param { axis: 1 num_axes: -1 bias_term: true " + random + "}", {{2, 3, 2}}),
      layer_example("scale_param { axis: 0 num_axes: 0 " + random + "}", {{2, 3}}),
      // Two-bottom form; the scale bottom has a batch axis too, so the
      // generic zero-batch run (dim 0 of every bottom set to 0) still fits.
      layer_example("scale_param { axis: 0 }", {{2, 3, 2}, {2, 3}}),
      layer_example("scale_param { axis: 0 }", {{2, 3, 2, 2}, {2, 3, 2, 2}}),
  };
  s.summary = "Multiplies by a per-channel scale (param or second bottom), optionally adds a bias";
  return s;
}

void ScaleLayer::scale_axes(const Shape& s, const Shape* scale_shape, int64_t* axis, int64_t* end) const {
  const int64_t n = static_cast<int64_t>(s.size());
  const int64_t a = axis_param_ < 0 ? axis_param_ + n : axis_param_;
  int64_t count = num_axes_param_ == -1 ? n - a : num_axes_param_;
  if (scale_shape) count = static_cast<int64_t>(scale_shape->size());
  if (a < 0 || a > n || a + count > n) {
    shape_error("scale_param axis " + std::to_string(axis_param_) + " with " + std::to_string(count) +
                " scale axes does not fit the bottom " + shape_str(s) +
                (scale_shape ? " (scale bottom " + shape_str(*scale_shape) + ")" : std::string()));
  }
  *axis = a;
  *end = a + count;
}

void ScaleLayer::setup(const BlobVec& bottom, const BlobVec& /*top*/) {
  int64_t a = 0, e = 0;
  const Shape& s = bottom[0]->shape();
  scale_axes(s, bottom.size() > 1 ? &bottom[1]->shape() : nullptr, &a, &e);
  const Shape scale_shape(s.begin() + a, s.begin() + e);
  if (bottom.size() == 1) fill(filler_, add_param("weight", scale_shape).data, rng_);
  if (bias_term_) fill(bias_filler_, add_param("bias", scale_shape).data, rng_);
}

void ScaleLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  const Shape& s = bottom[0]->shape();
  const Shape& scale_shape = scale_blob(bottom).shape();
  int64_t a = 0, e = 0;
  scale_axes(s, &scale_shape, &a, &e);
  if (!std::equal(scale_shape.begin(), scale_shape.end(), s.begin() + a)) {
    shape_error("expected bottom dims " + std::to_string(a) + ".." + std::to_string(e - 1) +
                " to equal the scale's shape " + shape_str(scale_shape) + ", got bottom " + shape_str(s) +
                (bottom.size() > 1 ? "; make bottom 1 match bottom 0 from scale_param axis on"
                                   : "; the scaled axes cannot change size after setup"));
  }
  outer_ = bottom[0]->data.count(0, static_cast<int>(a));
  dim_ = bottom[0]->data.count(static_cast<int>(a), static_cast<int>(e));
  inner_ = bottom[0]->data.count(static_cast<int>(e));
  if (call_layout() == Layout::kNHWC) {
    // Only a scale over the channels alone takes NHWC (channels_last):
    // [N][spatial][C] is [N * spatial, C, 1], the same sums in the same order.
    outer_ *= inner_;
    inner_ = 1;
  }
  top[0]->resize(s);
  in_place_ = top[0] == bottom[0];
}

size_t ScaleLayer::kept_bytes() const {
  if (!in_place_) return 0;
  ScratchCarver counter;
  counter.take({outer_ * dim_ * inner_}, call_dtype());
  return counter.bytes();
}

Tensor ScaleLayer::take_x_copy() {
  const size_t bytes = kept_bytes();
  if (bytes == 0) return Tensor();
  ScratchCarver carver(kept(bytes));
  return carver.take({outer_ * dim_ * inner_}, call_dtype());
}

void ScaleLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  const Tensor& xt = bottom[0]->data;
  Tensor& yt = top[0]->data;
  check_same_storage("Scale forward", {&xt, &yt});
  if (in_place_) take_x_copy().copy_from(xt);
  const Blob* bias = bias_blob();
  const float* bi = bias ? bias->data.data<float>() : nullptr;
  // f32, or bf16/f16 widened per element (one bottom: the scale is an f32 parameter), y rounded once.
  with_float_element(xt.dtype(), "Scale forward", [&](auto e) {
    using E = decltype(e);
    using T = typename E::T;
    const T* x = xt.data<T>();
    T* y = yt.data<T>();
    const float* sc = scale_blob(bottom).data.data<float>();
    parallel_for(outer_ * dim_, 16, [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        const int64_t c = row % dim_;
        const float s = sc[c];
        const float t = bi ? bi[c] : 0.0f;
        const int64_t off = row * inner_;
        for (int64_t i = 0; i < inner_; ++i) y[off + i] = E::store(E::load(x[off + i]) * s + t);
      }
    });
  });
}

void ScaleLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                              const BlobVec& bottom) {
  const Tensor& dyt = top[0]->diff;
  const Tensor xt = in_place_ ? take_x_copy() : bottom[0]->data;
  check_same_storage("Scale backward", {&dyt, &xt});
  const bool two_bottoms = bottom.size() > 1;

  // Scale and bias gradients first: when in place, dx below overwrites dy.
  float* dscale = nullptr;
  bool accumulate = true;  // params accumulate, bottom gradients are overwritten
  if (two_bottoms) {
    if (propagate_down[1]) {
      dscale = bottom[1]->diff.data<float>();
      accumulate = false;
    }
  } else {
    dscale = param(0).diff.data<float>();
  }
  Blob* bias = bias_blob();
  float* dbias = bias ? bias->diff.data<float>() : nullptr;
  with_float_element(dyt.dtype(), "Scale backward", [&](auto e) {
    using E = decltype(e);
    using T = typename E::T;
    const T* dy = dyt.data<T>();
    const T* x = xt.data<T>();
    if (dscale || dbias) {
      channel_gradient_sums<E>(outer_, dim_, inner_, dy, x, [&](int64_t c, double gb, double gs) {
        if (dscale) dscale[c] = static_cast<float>(gs) + (accumulate ? dscale[c] : 0.0f);
        if (dbias) dbias[c] += static_cast<float>(gb);
      });
    }
    if (!propagate_down[0]) return;
    check_same_storage("Scale backward", {&dyt, &bottom[0]->diff});
    T* dx = bottom[0]->diff.data<T>();
    const float* sc = scale_blob(bottom).data.data<float>();
    parallel_for(outer_ * dim_, 16, [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        const float s = sc[row % dim_];
        const int64_t off = row * inner_;
        for (int64_t i = 0; i < inner_; ++i) dx[off + i] = E::store(E::load(dy[off + i]) * s);
      }
    });
  });
}

STRATA_REGISTER_LAYER("Scale", ScaleLayer);

}  // namespace strata
