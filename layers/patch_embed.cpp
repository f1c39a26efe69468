#include "layers/patch_embed.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/cpu/math.h"
#include "framework/cpu/threads.h"

namespace strata {

PatchEmbedLayer::PatchEmbedLayer(const LayerSpec& spec, const LayerContext& ctx) : Layer(spec, ctx) {
  const ConfigNode& p = block("patch_embed_param");
  patch_ = p.get_int("patch_size");
  num_output_ = p.get_int("num_output");
  if (patch_ <= 0) {
    fail<ConfigError>("patch_embed_param of ", where(), " at ", p.loc().str(), ": patch_size must be > 0, got ",
                      patch_);
  }
  if (num_output_ <= 0) {
    fail<ConfigError>("patch_embed_param of ", where(), " at ", p.loc().str(), ": num_output must be > 0, got ",
                      num_output_);
  }
  weight_filler_ = parse_filler(p.block("weight_filler"), default_weight_filler(), "weight_filler of " + where());
  bias_filler_ = parse_filler(p.block("bias_filler"), FillerSpec{}, "bias_filler of " + where());
}

LayerSchema PatchEmbedLayer::schema() {
  LayerSchema s;
  s.kind = LayerKind::kEmbedding;
  s.work = LayerWork::kWeights;
  s.summary = "ViT patch embedding: P x P patches of [N, C, H, W] projected to tokens [N, (H/P)*(W/P), D]";
  s.blocks = {{"patch_embed_param", {"patch_size", "num_output", "weight_filler", "bias_filler"}}};
  s.examples = {
      layer_example("patch_embed_param { patch_size: 2 num_output: 3 bias_filler { type: 'gaussian' } }",
                    {{2, 2, 4, 6}}),
      layer_example("patch_embed_param { patch_size: 1 num_output: 2 }", {{2, 3, 2, 1}}),
  };
  return s;
}

void PatchEmbedLayer::setup(const BlobVec& bottom, const BlobVec& /*top*/) {
  const Shape& s = bottom[0]->shape();
  if (s.size() != 4) shape_error("expected images [N, C, H, W], got " + shape_str(s));
  if (s[2] < patch_ || s[3] < patch_) {  // before the weights are made: patch_size sizes them
    shape_error("patch_size " + std::to_string(patch_) + " is larger than the images " + shape_str(s) +
                "; use a patch_size that divides H and W, or larger images");
  }
  channels_ = s[1];
  Blob& w = add_param("weight", {num_output_, channels_, patch_, patch_});
  fill(weight_filler_, w.data, rng_);
  Blob& b = add_param("bias", {num_output_});
  fill(bias_filler_, b.data, rng_);
}

void PatchEmbedLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  const Shape& s = bottom[0]->shape();
  if (s.size() != 4 || s[1] != channels_) {
    shape_error("expected images [N, " + std::to_string(channels_) + ", H, W] (channels as at setup), got " +
                shape_str(s));
  }
  if (s[2] % patch_ != 0 || s[3] % patch_ != 0 || s[2] == 0 || s[3] == 0) {
    shape_error("expected H and W to be positive multiples of patch_size " + std::to_string(patch_) + ", got " +
                shape_str(s) + "; resize or crop the images (e.g. crop_size " + std::to_string(patch_ * 14) + ")");
  }
  n_ = s[0];
  h_ = s[2];
  w_ = s[3];
  const int64_t tokens = (h_ / patch_) * (w_ / patch_);
  top[0]->resize({n_, tokens, num_output_});
}

Shape PatchEmbedLayer::patches_shape() const {
  return {n_ * (h_ / patch_) * (w_ / patch_), channels_ * patch_ * patch_};
}

size_t PatchEmbedLayer::kept_bytes() const {
  ScratchCarver counter;
  counter.take(patches_shape());
  return counter.bytes();
}

size_t PatchEmbedLayer::scratch_bytes() const { return phase() == Phase::kTrain ? kept_bytes() : 0; }

Tensor PatchEmbedLayer::patch_matrix(const Tensor& block) const {
  ScratchCarver carver(block);
  return carver.take(patches_shape());
}

template <typename Fn>
void PatchEmbedLayer::for_each_patch_run(const Fn& fn) const {
  const int64_t P = patch_, C = channels_, H = h_, W = w_;
  const int64_t gh = H / P, gw = W / P, k = C * P * P;
  // One (image, channel, patch row) per task: P image rows, gw patches.
  parallel_for(n_ * C * gh, std::max<int64_t>(1, 8192 / (P * W)), [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t py = task % gh;
      const int64_t c = (task / gh) % C;
      const int64_t n = task / (gh * C);
      for (int64_t ky = 0; ky < P; ++ky) {
        const int64_t img_row = ((n * C + c) * H + py * P + ky) * W;
        for (int64_t px = 0; px < gw; ++px) fn(((n * gh + py) * gw + px) * k + (c * P + ky) * P, img_row + px * P);
      }
    }
  });
}

void PatchEmbedLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  const float* x = bottom[0]->data.data<float>();
  Tensor kept_patches = patch_matrix(kept(kept_bytes()));
  float* patches = kept_patches.data<float>();
  const size_t run = sizeof(float) * patch_;
  for_each_patch_run([&](int64_t po, int64_t io) { std::memcpy(patches + po, x + io, run); });
  const int64_t m = kept_patches.dim(0), k = kept_patches.dim(1), d = num_output_;
  float* y = top[0]->data.data<float>();
  gemm(Transpose::kNo, Transpose::kYes, m, d, k, 1.0f, patches, param(0).data.data<float>(), 0.0f, y);
  const float* b = param(1).data.data<float>();
  parallel_for(m, std::max<int64_t>(1, 16384 / d), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      for (int64_t j = 0; j < d; ++j) y[i * d + j] += b[j];
    }
  });
}

void PatchEmbedLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                                   const BlobVec& bottom) {
  const Tensor kept_patches = patch_matrix(kept(kept_bytes()));  // as forward left it
  const int64_t m = kept_patches.dim(0), k = kept_patches.dim(1), d = num_output_;
  const float* dy = top[0]->diff.data<float>();
  gemm(Transpose::kYes, Transpose::kNo, d, k, m, 1.0f, dy, kept_patches.data<float>(), 1.0f,
       param(0).diff.data<float>());
  float* db = param(1).diff.data<float>();
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < d; ++j) db[j] += dy[i * d + j];
  }
  if (!propagate_down[0]) return;
  Tensor dpatches_block = patch_matrix(scratch(kept_bytes()));
  float* dpatches = dpatches_block.data<float>();
  gemm(Transpose::kNo, Transpose::kNo, m, k, d, 1.0f, dy, param(0).data.data<float>(), 0.0f, dpatches);
  // Patches do not overlap and tile the image, so every element of dx is written.
  float* dx = bottom[0]->diff.data<float>();
  const size_t run = sizeof(float) * patch_;
  for_each_patch_run([&](int64_t po, int64_t io) { std::memcpy(dx + io, dpatches + po, run); });
}

STRATA_REGISTER_LAYER("PatchEmbed", PatchEmbedLayer);

}  // namespace strata
