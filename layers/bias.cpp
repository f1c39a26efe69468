#include "layers/bias.h"

#include <algorithm>
#include <string>

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/cpu/threads.h"

namespace strata {

BiasLayer::BiasLayer(const LayerSpec& spec, const LayerContext& ctx) : Layer(spec, ctx) {
  const ConfigNode& p = block("bias_param");
  axis_param_ = p.get_int("axis", 1);
  num_axes_param_ = p.get_int("num_axes", 1);
  if (num_axes_param_ < -1) {
    fail<ConfigError>("bias_param of ", where(), " at ", p.loc().str(),
                      ": num_axes must be >= -1 (-1 = all axes from axis on), got ", num_axes_param_);
  }
  filler_ = parse_filler(p.block("filler"), FillerSpec{}, "filler of " + where());
}

LayerSchema BiasLayer::schema() {
  LayerSchema s;
  // A learned shift, like Scale's bias: no weight decay under BIASES_NORMS_EMBEDDINGS.
  s.kind = LayerKind::kNormalization;
  s.summary = "Adds a bias (param or second bottom) broadcast over some axes (Caffe Bias)";
  s.blocks = {{"bias_param", {"axis", "num_axes", "filler"}}};
  const std::string random = "filler { type: \"gaussian\" std: 0.5 } ";
  s.examples = {
      layer_example("bias_param { " + random + "}", {{2, 3, 2, 2}}),
      layer_example("bias_param { axis: 1 num_axes: -1 " + random + "}", {{2, 3, 2}}),
      layer_example("bias_param { axis: 0 num_axes: 0 " + random + "}", {{2, 3}}),
      // Two-bottom form; the bias bottom has a batch axis too, so the
      // generic zero-batch run (dim 0 of every bottom set to 0) still fits.
      layer_example("bias_param { axis: 0 }", {{2, 3, 2}, {2, 3}}),
  };
  return s;
}

void BiasLayer::bias_axes(const Shape& s, const Shape* bias_shape, int64_t* axis, int64_t* end) const {
  const int64_t n = static_cast<int64_t>(s.size());
  const int64_t a = axis_param_ < 0 ? axis_param_ + n : axis_param_;
  int64_t count = num_axes_param_ == -1 ? n - a : num_axes_param_;
  if (bias_shape) count = static_cast<int64_t>(bias_shape->size());
  if (a < 0 || a > n || a + count > n) {
    shape_error("bias_param axis " + std::to_string(axis_param_) + " with " + std::to_string(count) +
                " bias axes does not fit the bottom " + shape_str(s) +
                (bias_shape ? " (bias bottom " + shape_str(*bias_shape) + ")" : std::string()));
  }
  *axis = a;
  *end = a + count;
}

void BiasLayer::setup(const BlobVec& bottom, const BlobVec& /*top*/) {
  if (bottom.size() > 1) return;
  int64_t a = 0, e = 0;
  const Shape& s = bottom[0]->shape();
  bias_axes(s, nullptr, &a, &e);
  fill(filler_, add_param("bias", Shape(s.begin() + a, s.begin() + e)).data, rng_);
}

void BiasLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  const Shape& s = bottom[0]->shape();
  const Shape& bias_shape = bias_blob(bottom).shape();
  int64_t a = 0, e = 0;
  bias_axes(s, &bias_shape, &a, &e);
  if (!std::equal(bias_shape.begin(), bias_shape.end(), s.begin() + a)) {
    shape_error("expected bottom dims " + std::to_string(a) + ".." + std::to_string(e - 1) +
                " to equal the bias's shape " + shape_str(bias_shape) + ", got bottom " + shape_str(s) +
                (bottom.size() > 1 ? "; make bottom 1 match bottom 0 from bias_param axis on"
                                   : "; the biased axes cannot change size after setup"));
  }
  outer_ = bottom[0]->data.count(0, static_cast<int>(a));
  dim_ = bottom[0]->data.count(static_cast<int>(a), static_cast<int>(e));
  inner_ = bottom[0]->data.count(static_cast<int>(e));
  top[0]->resize(s);
}

void BiasLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  const float* x = bottom[0]->data.data<float>();
  float* y = top[0]->data.data<float>();
  const float* b = bias_blob(bottom).data.data<float>();
  parallel_for(outer_ * dim_, 16, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const float t = b[row % dim_];
      const int64_t off = row * inner_;
      for (int64_t i = 0; i < inner_; ++i) y[off + i] = x[off + i] + t;
    }
  });
}

void BiasLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  const float* dy = top[0]->diff.data<float>();
  // The bias gradient first: in place, dx is dy's own buffer.
  float* db = nullptr;
  bool accumulate = true;  // a param accumulates, a bottom gradient is overwritten
  if (bottom.size() > 1) {
    if (propagate_down[1]) {
      db = bottom[1]->diff.data<float>();
      accumulate = false;
    }
  } else {
    db = param(0).diff.data<float>();
  }
  if (db) {
    parallel_for(dim_, 1, [&](int64_t cb, int64_t ce) {
      for (int64_t c = cb; c < ce; ++c) {
        double s = 0.0;
        for (int64_t o = 0; o < outer_; ++o) {
          const float* row = dy + (o * dim_ + c) * inner_;
          for (int64_t i = 0; i < inner_; ++i) s += row[i];
        }
        db[c] = static_cast<float>(s) + (accumulate ? db[c] : 0.0f);
      }
    });
  }
  if (propagate_down[0] && top[0] != bottom[0]) bottom[0]->diff.copy_from(top[0]->diff);
}

STRATA_REGISTER_LAYER("Bias", BiasLayer);

}  // namespace strata
