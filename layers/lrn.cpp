#include "layers/lrn.h"

#include <string>

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/cpu/threads.h"

namespace strata {

namespace {
constexpr int64_t kMinChunk = 4096;  // elements per thread at least
}  // namespace

LRNLayer::LRNLayer(const LayerSpec& spec, const LayerContext& ctx) : Layer(spec, ctx) {
  const ConfigNode& p = block("lrn_param");
  const std::string context = "lrn_param of " + where() + " at " + p.loc().str();
  const int64_t size = p.get_int("local_size", 5);
  if (size < 1 || size % 2 == 0) {
    fail<ConfigError>(context, ": local_size must be a positive odd number (the window is centred), got ", size);
  }
  const double alpha = p.get_double("alpha", 1.0);
  const double beta = p.get_double("beta", 0.75);
  const double k = p.get_double("k", 1.0);
  const bool within = p.get_enum("norm_region", {"ACROSS_CHANNELS", "WITHIN_CHANNEL"}, "ACROSS_CHANNELS") ==
                      "WITHIN_CHANNEL";
  p.get_enum("engine", {"DEFAULT", "CAFFE", "CUDNN"}, "DEFAULT");  // accepted for Caffe files; one engine here
  if (!within && k <= 0.0 && alpha >= 0.0) {
    // s = k + alpha/n * sum(x^2) reaches 0 for an all-zero window, and 0^-beta is infinite.
    fail<ConfigError>(context, ": k must be > 0 with ACROSS_CHANNELS (it keeps the scale away from 0), got ", k);
  }
  if (alpha < 0.0) {
    fail<ConfigError>(context, ": alpha must be >= 0 (a negative alpha can make the scale 0 or negative), got ",
                      alpha);
  }
  geom_.size = size;
  geom_.pre_pad = (size - 1) / 2;
  geom_.alpha_over_n = static_cast<float>(within ? alpha / static_cast<double>(size * size)
                                                 : alpha / static_cast<double>(size));
  geom_.beta = static_cast<float>(beta);
  geom_.k = within ? 1.0f : static_cast<float>(k);
  geom_.within = within ? 1 : 0;
}

LayerSchema LRNLayer::schema() {
  LayerSchema s;
  s.kind = LayerKind::kNormalization;
  s.summary = "Local response normalisation across channels or within each channel (Caffe LRN, AlexNet)";
  s.blocks = {{"lrn_param", {"local_size", "alpha", "beta", "k", "norm_region", "engine"}}};
  // Smooth in x; alpha large enough that the normalisation, not the
  // identity, dominates the gradient.
  s.examples = {
      layer_example("lrn_param { local_size: 3 alpha: 0.5 beta: 0.75 }", {{2, 5, 3, 2}}),
      layer_example("lrn_param { local_size: 5 alpha: 2 beta: 0.6 k: 2 }", {{2, 3, 2, 2}}),
      layer_example("lrn_param { local_size: 3 alpha: 0.8 beta: 0.75 norm_region: WITHIN_CHANNEL }", {{2, 2, 4, 3}}),
      layer_example("lrn_param { local_size: 5 alpha: 1 beta: 0.5 norm_region: WITHIN_CHANNEL engine: CAFFE }",
                    {{1, 2, 3, 5}}),
  };
  return s;
}

void LRNLayer::check_bottom(const Shape& s) const {
  if (s.size() != 4) {
    shape_error("expected a 4-D NCHW bottom [N, C, H, W], got " + shape_str(s) +
                "; LRN normalises images (add a Reshape layer for other inputs)");
  }
}

void LRNLayer::setup(const BlobVec& bottom, const BlobVec& top) {
  check_bottom(bottom[0]->shape());
  if (top[0] == bottom[0]) {
    fail<ConfigError>(where_at(),
                      ": LRN cannot run in place (backward needs its input and output); give the top its own name");
  }
}

void LRNLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  const Shape& s = bottom[0]->shape();
  check_bottom(s);
  geom_.channels = s[1];
  geom_.height = s[2];
  geom_.width = s[3];
  count_ = bottom[0]->numel();
  top[0]->resize(s);
  if (device().is_cpu()) scale_.resize(s);
}

void LRNLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  const LrnGeometry g = geom_;
  const float* x = bottom[0]->data.data<float>();
  float* s = scale_.data<float>();
  float* y = top[0]->data.data<float>();
  parallel_for(count_, kMinChunk, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) lrn_forward_at(g, i, x, s, y);
  });
}

void LRNLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const LrnGeometry g = geom_;
  const float* x = bottom[0]->data.data<float>();
  const float* y = top[0]->data.data<float>();
  const float* s = scale_.data<float>();
  const float* dy = top[0]->diff.data<float>();
  float* dx = bottom[0]->diff.data<float>();
  parallel_for(count_, kMinChunk, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dx[i] = lrn_backward_at(g, i, x, y, s, dy);
  });
}

STRATA_REGISTER_LAYER("LRN", LRNLayer);

}  // namespace strata
