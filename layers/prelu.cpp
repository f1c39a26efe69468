#include "layers/prelu.h"

#include <string>

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/cpu/threads.h"

namespace strata {

PReLULayer::PReLULayer(const LayerSpec& spec, const LayerContext& ctx) : Layer(spec, ctx) {
  const ConfigNode& p = block("prelu_param");
  shared_ = p.get_bool("channel_shared", false) ? Shared::kYes : Shared::kNo;
  FillerSpec quarter;
  quarter.value = 0.25f;
  filler_ = parse_filler(p.block("filler"), quarter, "filler of " + where());
}

LayerSchema PReLULayer::schema() {
  LayerSchema s;
  s.summary = "Parametric ReLU: max(x, 0) + a * min(x, 0) with a learned slope per channel or shared";
  s.blocks = {{"prelu_param", {"filler", "channel_shared"}}};
  // Piecewise linear; the generic inputs keep two steps away from the kink at 0.
  const std::string random = "filler { type: 'gaussian' mean: 0.25 std: 0.5 } ";
  s.examples = {
      layer_example("prelu_param { " + random + "}", {{2, 3, 2, 2}}),
      layer_example("prelu_param { channel_shared: true " + random + "}", {{2, 3, 4}}),
      layer_example("", {{3, 4}}),
  };
  return s;
}

void PReLULayer::check_bottom(const Shape& s) const {
  if (s.size() < 2) {
    shape_error("expected a bottom with a channel axis [N, C, ...], got " + shape_str(s) +
                "; PReLU learns one slope per channel (axis 1)");
  }
}

void PReLULayer::setup(const BlobVec& bottom, const BlobVec& /*top*/) {
  const Shape& s = bottom[0]->shape();
  check_bottom(s);
  fill(filler_, add_param("weight", {shared_ == Shared::kYes ? 1 : s[1]}).data, rng_);
}

void PReLULayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  const Shape& s = bottom[0]->shape();
  check_bottom(s);
  if (shared_ == Shared::kYes) {
    geom_ = PReLUGeometry{1, bottom[0]->numel()};
    outer_ = 1;
  } else {
    if (s[1] != param(0).numel()) {
      shape_error("bottom " + shape_str(s) + " has " + std::to_string(s[1]) + " channels, but the slopes were made for " +
                  std::to_string(param(0).numel()) + "; the channel count cannot change after setup");
    }
    geom_ = PReLUGeometry{s[1], bottom[0]->data.count(2)};
    outer_ = s[0];
  }
  if (top[0] != bottom[0]) top[0]->resize(s);
  if (top[0] == bottom[0] && device().is_cpu()) x_copy_.resize(s);
}

void PReLULayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  if (top[0] == bottom[0]) x_copy_.copy_from(bottom[0]->data);
  const PReLUGeometry g = geom_;
  const float* x = bottom[0]->data.data<float>();
  const float* a = param(0).data.data<float>();
  float* y = top[0]->data.data<float>();
  parallel_for(bottom[0]->numel(), 16384, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) y[k] = g.forward(k, x[k], a);
  });
}

void PReLULayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  const PReLUGeometry g = geom_;
  const float* x = top[0] == bottom[0] ? x_copy_.data<float>() : bottom[0]->data.data<float>();
  const float* dy = top[0]->diff.data<float>();
  const float* a = param(0).data.data<float>();
  // The slope gradient first: in place, dx below overwrites dy.
  float* da = param(0).diff.data<float>();
  parallel_for(g.channels, 1, [&](int64_t cb, int64_t ce) {
    for (int64_t c = cb; c < ce; ++c) {
      double s = 0.0;
      for (int64_t o = 0; o < outer_; ++o) {
        const int64_t off = (o * g.channels + c) * g.inner;
        for (int64_t i = 0; i < g.inner; ++i) {
          if (x[off + i] <= 0.0f) s += static_cast<double>(dy[off + i]) * x[off + i];
        }
      }
      da[c] += static_cast<float>(s);
    }
  });
  if (!propagate_down[0]) return;
  float* dx = bottom[0]->diff.data<float>();
  parallel_for(bottom[0]->numel(), 16384, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) dx[k] = g.backward(k, x[k], dy[k], a);
  });
}

STRATA_REGISTER_LAYER("PReLU", PReLULayer);

}  // namespace strata
