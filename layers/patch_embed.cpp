#include "layers/patch_embed.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/cpu/math.h"
#include "framework/cpu/threads.h"
#include "layers/neuron_layer.h"  // the 16-bit elements (with_float_element)

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
  counter.take(patches_shape(), call_dtype());
  if (call_dtype() != DType::kF32 && !device().is_cpu()) counter.take(param(0).shape(), call_dtype());
  return counter.bytes();
}

int64_t PatchEmbedLayer::block_rows() const {
  const int64_t m = patches_shape()[0], k = patches_shape()[1];
  if (call_dtype() == DType::kF32) return m;
  constexpr int64_t kWideFloats = int64_t{1} << 20;  // 4 MiB for the wider block
  return std::max<int64_t>(1, std::min(m, kWideFloats / std::max<int64_t>(1, std::max(k, num_output_))));
}

PatchEmbedLayer::Scratch PatchEmbedLayer::lay_out_scratch(ScratchCarver& c, bool backward) const {
  Scratch s;
  if (backward) s.dpatches = c.take(patches_shape(), call_dtype());
  if (call_dtype() == DType::kF32 || !device().is_cpu()) return s;
  s.wide_p = c.take({block_rows(), patches_shape()[1]});
  s.wide_y = c.take({block_rows(), num_output_});
  return s;
}

PatchEmbedLayer::Scratch PatchEmbedLayer::take_scratch(bool backward) {
  ScratchCarver counter;
  lay_out_scratch(counter, backward);
  if (counter.bytes() == 0) return Scratch{};  // f32 forward: nothing
  ScratchCarver carver(scratch(counter.bytes()));
  return lay_out_scratch(carver, backward);
}

size_t PatchEmbedLayer::scratch_bytes() const {
  ScratchCarver forward, backward;
  lay_out_scratch(forward, false);
  if (phase() == Phase::kTrain) lay_out_scratch(backward, true);
  return std::max(forward.bytes(), backward.bytes());
}

Tensor PatchEmbedLayer::patch_matrix(const Tensor& block) const {
  ScratchCarver carver(block);
  return carver.take(patches_shape(), call_dtype());
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
  const Tensor& xt = bottom[0]->data;
  Tensor& yt = top[0]->data;
  if (xt.dtype() != yt.dtype()) check_same_storage("PatchEmbed forward", {&xt, &yt});  // names both dtypes
  with_float_element(xt.dtype(), "PatchEmbed forward", [&](auto e) { forward_cpu_as<decltype(e)>(xt, yt); });
}

// f32: the patch matrix, one GEMM into y and the bias. 16-bit: the patch
// matrix in 16 bits, then blocks of its rows widened, multiplied, the bias
// added, y rounded once.
template <class E>
void PatchEmbedLayer::forward_cpu_as(const Tensor& xt, Tensor& yt) {
  using T = typename E::T;
  const T* x = xt.data<T>();
  Tensor kept_patches = patch_matrix(kept(kept_bytes()));
  T* patches = kept_patches.data<T>();
  const size_t run = sizeof(T) * patch_;
  for_each_patch_run([&](int64_t po, int64_t io) { std::memcpy(patches + po, x + io, run); });
  const int64_t m = kept_patches.dim(0), k = kept_patches.dim(1), d = num_output_, rows = block_rows();
  Scratch sc = take_scratch(false);
  T* y = yt.data<T>();
  const float* b = param(1).data.data<float>();
  float* wide_p = E::kIsF32 ? nullptr : sc.wide_p.data<float>();
  float* wide_y = E::kIsF32 ? nullptr : sc.wide_y.data<float>();
  for (int64_t r0 = 0; r0 < m; r0 += rows) {
    const int64_t r = std::min(rows, m - r0);
    const float* pb = rows_as_f32<E>(patches, r0, r, k, wide_p);
    float* yb = rows_out_f32<E>(y, r0, d, wide_y);
    gemm(Transpose::kNo, Transpose::kYes, r, d, k, 1.0f, pb, param(0).data.data<float>(), 0.0f, yb);
    parallel_for(r, std::max<int64_t>(1, 16384 / d), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        for (int64_t j = 0; j < d; ++j) yb[i * d + j] += b[j];
      }
    });
    round_rows<E>(yb, r0, r, d, y);
  }
}

void PatchEmbedLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                                   const BlobVec& bottom) {
  const Tensor& dyt = top[0]->diff;
  Tensor* dxt = propagate_down[0] ? &bottom[0]->diff : nullptr;
  if (dxt && dxt->dtype() != dyt.dtype()) check_same_storage("PatchEmbed backward", {&dyt, dxt});
  with_float_element(dyt.dtype(), "PatchEmbed backward", [&](auto e) { backward_cpu_as<decltype(e)>(dyt, dxt); });
}

template <class E>
void PatchEmbedLayer::backward_cpu_as(const Tensor& dyt, Tensor* dxt) {
  using T = typename E::T;
  const Tensor kept_patches = patch_matrix(kept(kept_bytes()));  // as forward left it
  const int64_t m = kept_patches.dim(0), k = kept_patches.dim(1), d = num_output_, rows = block_rows();
  const T* dy = dyt.data<T>();
  const T* patches = kept_patches.data<T>();
  Scratch sc = take_scratch(dxt != nullptr);
  float* dw = param(0).diff.data<float>();
  float* db = param(1).diff.data<float>();
  const float* w = param(0).data.data<float>();
  T* dpatches = dxt ? sc.dpatches.data<T>() : nullptr;
  float* wide_p = E::kIsF32 ? nullptr : sc.wide_p.data<float>();
  float* wide_y = E::kIsF32 ? nullptr : sc.wide_y.data<float>();
  for (int64_t r0 = 0; r0 < m; r0 += rows) {
    const int64_t r = std::min(rows, m - r0);
    const float* gb = rows_as_f32<E>(dy, r0, r, d, wide_y);
    const float* pb = rows_as_f32<E>(patches, r0, r, k, wide_p);
    gemm(Transpose::kYes, Transpose::kNo, d, k, r, 1.0f, gb, pb, 1.0f, dw);
    for (int64_t i = 0; i < r; ++i) {
      for (int64_t j = 0; j < d; ++j) db[j] += gb[i * d + j];
    }
    if (!dxt) continue;
    // The patch rows' gradient: f32 straight into dpatches, or through the
    // (now free) widened patch block and rounded once.
    float* dpb = rows_out_f32<E>(dpatches, r0, k, wide_p);
    gemm(Transpose::kNo, Transpose::kNo, r, k, d, 1.0f, gb, w, 0.0f, dpb);
    round_rows<E>(dpb, r0, r, k, dpatches);
  }
  if (!dxt) return;
  // Patches do not overlap and tile the image, so every element of dx is written.
  T* dx = dxt->data<T>();
  const size_t run = sizeof(T) * patch_;
  for_each_patch_run([&](int64_t po, int64_t io) { std::memcpy(dx + io, dpatches + po, run); });
}

STRATA_REGISTER_LAYER("PatchEmbed", PatchEmbedLayer);

}  // namespace strata
