#include "layers/pooling.h"

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "framework/error.h"
#include "framework/cpu/cpu_isa.h"
#include "framework/cpu/gemm_avx2.h"
#include "framework/layer_registry.h"
#include "framework/scratch.h"
#include "framework/cpu/threads.h"
#include "layers/neuron_layer.h"  // the 16-bit elements (with_float_element)

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace strata {

namespace {

// Planes per thread chunk at least; a plane is one (image, channel) pair.
constexpr int64_t kMinPlanesPerChunk = 8;

std::string hw_str(int64_t h, int64_t w) { return std::to_string(h) + "x" + std::to_string(w); }

int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }
int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// Reads key, or key_h/key_w (a missing one of the pair takes `def`).
void read_pair(const ConfigNode& p, const std::string& context, const std::string& key, int64_t def,
               int64_t* h, int64_t* w) {
  const bool has_hw = p.has(key + "_h") || p.has(key + "_w");
  if (p.has(key) && has_hw) {
    fail<ConfigError>(context, " at ", p.loc().str(), ": give either ", key, " or ", key, "_h/", key,
                      "_w, not both");
  }
  if (has_hw) {
    *h = p.get_int(key + "_h", def);
    *w = p.get_int(key + "_w", def);
  } else {
    *h = *w = p.get_int(key, def);
  }
}

// One output row of 2x2 / stride-2 max pooling: inputs rows r0, r1 (at
// offset `base` in their plane), outputs y[0..n), argmax indices idx[0..n).
// The first maximum wins; NaN propagates (the first NaN wins).
void max2x2_row_scalar(const float* r0, const float* r1, int64_t base, int64_t width, int64_t n, float* y,
                       int32_t* idx) {
  for (int64_t pw = 0; pw < n; ++pw) {
    const int64_t c = 2 * pw;
    const float v[4] = {r0[c], r0[c + 1], r1[c], r1[c + 1]};
    const int64_t at[4] = {base + c, base + c + 1, base + width + c, base + width + c + 1};
    int k = 0;
    for (int q = 1; q < 4; ++q) {
      if (v[q] > v[k] || (v[q] != v[q] && v[k] == v[k])) k = q;
    }
    y[pw] = v[k];
    idx[pw] = static_cast<int32_t>(at[k]);
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
#define STRATA_POOL_VECTOR 1

// GCC 12 warns inside its own AVX-512 intrinsics (their deliberately
// undefined pass-through operand).
#pragma GCC diagnostic push
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"

// The same, 16 outputs at a time: which input wins is data-dependent, so
// branches mispredict; masks and blends do not.
__attribute__((target("avx512f,avx512dq,avx512bw,avx512vl"))) void max2x2_row_avx512(
    const float* r0, const float* r1, int64_t base, int64_t width, int64_t n, float* y, int32_t* idx) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (int64_t pw = 0; pw < n; pw += 16) {
    const int rem = n - pw < 16 ? static_cast<int>(n - pw) : 16;
    const __mmask16 out_mask = static_cast<__mmask16>((1u << rem) - 1u);
    const __mmask16 lo = static_cast<__mmask16>(rem >= 8 ? 0xFFFFu : (1u << (2 * rem)) - 1u);
    const __mmask16 hi = static_cast<__mmask16>(rem <= 8 ? 0u : (1u << (2 * rem - 16)) - 1u);
    const float* a = r0 + 2 * pw;
    const float* b = r1 + 2 * pw;
    const __m512 a0 = _mm512_maskz_loadu_ps(lo, a), a1 = _mm512_maskz_loadu_ps(hi, a + 16);
    const __m512 b0 = _mm512_maskz_loadu_ps(lo, b), b1 = _mm512_maskz_loadu_ps(hi, b + 16);
    const __m512 v[4] = {_mm512_permutex2var_ps(a0, even, a1), _mm512_permutex2var_ps(a0, odd, a1),
                         _mm512_permutex2var_ps(b0, even, b1), _mm512_permutex2var_ps(b0, odd, b1)};
    const __m512i col = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(base + 2 * pw)), even);
    const __m512i at[4] = {col, _mm512_add_epi32(col, _mm512_set1_epi32(1)),
                           _mm512_add_epi32(col, _mm512_set1_epi32(static_cast<int32_t>(width))),
                           _mm512_add_epi32(col, _mm512_set1_epi32(static_cast<int32_t>(width + 1)))};
    __m512 m = v[0];
    __m512i k = at[0];
    for (int q = 1; q < 4; ++q) {
      const __mmask16 m_nan = _mm512_cmp_ps_mask(m, m, _CMP_UNORD_Q);
      const __mmask16 v_nan = _mm512_cmp_ps_mask(v[q], v[q], _CMP_UNORD_Q);
      const __mmask16 take = _mm512_cmp_ps_mask(v[q], m, _CMP_GT_OQ) | (v_nan & static_cast<__mmask16>(~m_nan));
      m = _mm512_mask_blend_ps(take, m, v[q]);
      k = _mm512_mask_blend_epi32(take, k, at[q]);
    }
    _mm512_mask_storeu_ps(y + pw, out_mask, m);
    _mm512_mask_storeu_epi32(idx + pw, out_mask, k);
  }
}

#pragma GCC diagnostic pop

// The same, 8 outputs at a time (AVX2 has no masks: the last outputs of a row
// take the scalar loop).
STRATA_AVX2 void max2x2_row_avx2(const float* r0, const float* r1, int64_t base, int64_t width, int64_t n,
                                 float* y, int32_t* idx) {
  using gemm_internal::split_even_odd8;
  const __m256i even_cols = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  int64_t pw = 0;
  for (; pw + 8 <= n; pw += 8) {
    __m256 v[4];
    split_even_odd8(r0 + 2 * pw, v[0], v[1]);
    split_even_odd8(r1 + 2 * pw, v[2], v[3]);
    const __m256i col = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int32_t>(base + 2 * pw)), even_cols);
    const __m256i at[4] = {col, _mm256_add_epi32(col, _mm256_set1_epi32(1)),
                           _mm256_add_epi32(col, _mm256_set1_epi32(static_cast<int32_t>(width))),
                           _mm256_add_epi32(col, _mm256_set1_epi32(static_cast<int32_t>(width + 1)))};
    __m256 m = v[0];
    __m256 k = _mm256_castsi256_ps(at[0]);
    for (int q = 1; q < 4; ++q) {
      const __m256 m_nan = _mm256_cmp_ps(m, m, _CMP_UNORD_Q);
      const __m256 v_nan = _mm256_cmp_ps(v[q], v[q], _CMP_UNORD_Q);
      const __m256 take = _mm256_or_ps(_mm256_cmp_ps(v[q], m, _CMP_GT_OQ), _mm256_andnot_ps(m_nan, v_nan));
      m = _mm256_blendv_ps(m, v[q], take);
      k = _mm256_blendv_ps(k, _mm256_castsi256_ps(at[q]), take);
    }
    _mm256_storeu_ps(y + pw, m);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(idx + pw), _mm256_castps_si256(k));
  }
  max2x2_row_scalar(r0 + 2 * pw, r1 + 2 * pw, base + 2 * pw, width, n - pw, y + pw, idx + pw);
}
#endif

}  // namespace

PoolingLayer::PoolingLayer(const LayerSpec& spec, const LayerContext& ctx)
    : Layer(spec, ctx) {
  const ConfigNode& p = block("pooling_param");
  const std::string context = "pooling_param of " + where();
  const std::string pool = p.get_enum("pool", {"MAX", "AVE", "STOCHASTIC"}, "MAX");
  if (pool == "STOCHASTIC") {
    fail<ConfigError>(context, " at ", p.loc().str(),
                      ": pool: STOCHASTIC is not supported; use MAX or AVE");
  }
  method_ = pool == "MAX" ? Method::kMax : Method::kAve;
  round_ = p.get_enum("round_mode", {"CEIL", "FLOOR"}, "CEIL") == "CEIL" ? RoundMode::kCeil : RoundMode::kFloor;
  if (p.has("ceil_mode")) {
    // A widely used fork's key (BVLC/caffe PR #3057): true is Caffe's CEIL, false FLOOR.
    const RoundMode from_ceil_mode = p.get_bool("ceil_mode", true) ? RoundMode::kCeil : RoundMode::kFloor;
    if (p.has("round_mode") && from_ceil_mode != round_) {
      fail<ConfigError>(context, " at ", p.find("ceil_mode")->loc().str(), ": ceil_mode: ",
                        p.find("ceil_mode")->text(), " contradicts round_mode: ", p.find("round_mode")->text(),
                        "; give only one of them");
    }
    round_ = from_ceil_mode;
  }
  global_ = p.get_bool("global_pooling", false) ? Global::kYes : Global::kNo;
  p.get_enum("engine", {"DEFAULT", "CAFFE", "CUDNN"}, "DEFAULT");  // accepted for Caffe files; one engine here

  const bool has_kernel = p.has("kernel_size") || p.has("kernel_h") || p.has("kernel_w");
  if (global_ == Global::kYes) {
    if (has_kernel) {
      fail<ConfigError>(context, " at ", p.loc().str(),
                        ": global_pooling takes the whole image as the window; remove kernel_size/kernel_h/kernel_w");
    }
  } else {
    if (!has_kernel) {
      fail<ConfigError>(context, " at ", p.loc().str(),
                        ": missing kernel_size (or kernel_h and kernel_w, or global_pooling: true)");
    }
    if (p.has("kernel_size")) {
      if (p.has("kernel_h") || p.has("kernel_w")) {
        fail<ConfigError>(context, " at ", p.loc().str(),
                          ": give either kernel_size or kernel_h/kernel_w, not both");
      }
      kernel_h_ = kernel_w_ = p.get_int("kernel_size");
    } else {
      if (!(p.has("kernel_h") && p.has("kernel_w"))) {
        fail<ConfigError>(context, " at ", p.loc().str(), ": kernel_h and kernel_w must be given together");
      }
      kernel_h_ = p.get_int("kernel_h");
      kernel_w_ = p.get_int("kernel_w");
    }
    if (kernel_h_ < 1 || kernel_w_ < 1) {
      fail<ConfigError>(context, " at ", p.loc().str(), ": kernel must be >= 1, got ", hw_str(kernel_h_, kernel_w_));
    }
  }
  read_pair(p, context, "stride", 1, &stride_h_, &stride_w_);
  read_pair(p, context, "pad", 0, &pad_h_, &pad_w_);
  if (stride_h_ < 1 || stride_w_ < 1) {
    fail<ConfigError>(context, " at ", p.loc().str(), ": stride must be >= 1, got ", hw_str(stride_h_, stride_w_));
  }
  if (pad_h_ < 0 || pad_w_ < 0) {
    fail<ConfigError>(context, " at ", p.loc().str(), ": pad must be >= 0, got ", hw_str(pad_h_, pad_w_));
  }
  if (global_ == Global::kYes && (pad_h_ != 0 || pad_w_ != 0 || stride_h_ != 1 || stride_w_ != 1)) {
    fail<ConfigError>(context, " at ", p.loc().str(),
                      ": global_pooling needs pad 0 and stride 1 (got pad ", hw_str(pad_h_, pad_w_), ", stride ",
                      hw_str(stride_h_, stride_w_), ")");
  }
  if (global_ == Global::kNo && (pad_h_ >= kernel_h_ || pad_w_ >= kernel_w_)) {
    fail<ConfigError>(context, " at ", p.loc().str(), ": pad ", hw_str(pad_h_, pad_w_),
                      " must be smaller than the kernel ", hw_str(kernel_h_, kernel_w_),
                      " (a window could lie entirely in the padding)");
  }
}

LayerSchema PoolingLayer::schema() {
  LayerSchema s;
  s.summary = "MAX or AVE pooling over H, W of NCHW input with Caffe's ceil/floor output size and padding rules";
  s.blocks = {{"pooling_param",
               {"pool", "kernel_size", "kernel_h", "kernel_w", "stride", "stride_h", "stride_w", "pad", "pad_h",
                "pad_w", "global_pooling", "round_mode", "ceil_mode", "engine"}}};
  // MAX pooling is only piecewise linear: a finite difference is wrong when
  // the perturbed input overtakes (or falls below) another input of its
  // window. The test harness draws Gaussian inputs that are pairwise at least
  // two steps apart, so the argmax never changes within one step; AVE is
  // linear and needs nothing special.
  s.examples = {
      layer_example("pooling_param { pool: MAX kernel_size: 3 stride: 2 }", {{2, 2, 7, 6}}),
      layer_example("pooling_param { pool: MAX kernel_size: 2 stride: 2 }", {{2, 3, 4, 5}}),
      layer_example("pooling_param { pool: MAX kernel_h: 3 kernel_w: 2 stride_h: 2 stride_w: 1 pad_h: 1 "
              "round_mode: FLOOR }",
              {{2, 1, 6, 5}}),
      layer_example("pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 }", {{2, 2, 5, 5}}),
      layer_example("pooling_param { pool: AVE kernel_size: 2 stride: 3 round_mode: FLOOR engine: CAFFE }",
              {{2, 2, 7, 8}}),
      layer_example("pooling_param { pool: AVE global_pooling: true }", {{2, 3, 3, 4}}),
      layer_example("pooling_param { pool: MAX global_pooling: true }", {{2, 3, 2, 3}}),
  };
  return s;
}

void PoolingLayer::check_bottom(const Shape& s) const {
  if (s.size() != 4) {
    shape_error("expected a 4-D NCHW bottom [N, C, H, W], got " + shape_str(s) +
                "; Pooling works on 2-D images only");
  }
}

int64_t PoolingLayer::pooled_size(int64_t in, int64_t kernel, int64_t pad, int64_t stride) const {
  const int64_t span = in + 2 * pad - kernel;
  return (round_ == RoundMode::kCeil ? ceil_div(span, stride) : floor_div(span, stride)) + 1;
}

void PoolingLayer::setup(const BlobVec& bottom, const BlobVec& /*top*/) { check_bottom(bottom[0]->shape()); }

void PoolingLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  const Shape& s = bottom[0]->shape();
  check_bottom(s);
  num_ = s[0];
  channels_ = s[1];
  height_ = s[2];
  width_ = s[3];
  if (global_ == Global::kYes) {
    if (height_ < 1 || width_ < 1) {
      shape_error("global pooling needs a non-empty image, got bottom " + shape_str(s));
    }
    kernel_h_ = height_;
    kernel_w_ = width_;
  }
  if (height_ + 2 * pad_h_ < kernel_h_ || width_ + 2 * pad_w_ < kernel_w_) {
    shape_error("input " + shape_str(s) + " is smaller than the kernel " + hw_str(kernel_h_, kernel_w_) +
                " even with pad " + hw_str(pad_h_, pad_w_) + "; use a smaller kernel or more padding");
  }
  out_h_ = pooled_size(height_, kernel_h_, pad_h_, stride_h_);
  out_w_ = pooled_size(width_, kernel_w_, pad_w_, stride_w_);
  // Caffe: the last window must start inside the image (plus the leading
  // pad); otherwise it is dropped. Caffe checks this only when there is
  // padding; without padding it can fail only for kernel < stride in CEIL
  // mode, where Caffe would pool an empty window, so we always check (as
  // PyTorch does).
  if ((out_h_ - 1) * stride_h_ >= height_ + pad_h_) --out_h_;
  if ((out_w_ - 1) * stride_w_ >= width_ + pad_w_) --out_w_;
  top[0]->resize({num_, channels_, out_h_, out_w_});
}

size_t PoolingLayer::kept_bytes() const {
  if (method_ != Method::kMax) return 0;
  ScratchCarver counter;
  counter.take({num_, channels_, out_h_, out_w_}, DType::kI32);
  return counter.bytes();
}

Tensor PoolingLayer::take_mask() {
  ScratchCarver carver(kept(kept_bytes()));
  return carver.take({num_, channels_, out_h_, out_w_}, DType::kI32);
}

void PoolingLayer::max_plane(const float* xp, float* yp, int32_t* mp) const {
  const bool fast2x2 = kernel_h_ == 2 && kernel_w_ == 2 && stride_h_ == 2 && stride_w_ == 2 && pad_h_ == 0 &&
                       pad_w_ == 0 && 2 * out_h_ <= height_ && 2 * out_w_ <= width_;
  if (fast2x2) {
    // The common 2x2/2 window lying wholly inside the image.
#ifdef STRATA_POOL_VECTOR
    const CpuIsa isa = cpu_isa();
#endif
    for (int64_t ph = 0; ph < out_h_; ++ph) {
      const int64_t base = 2 * ph * width_;
#ifdef STRATA_POOL_VECTOR
      if (isa == CpuIsa::kAvx512) {
        max2x2_row_avx512(xp + base, xp + base + width_, base, width_, out_w_, yp + ph * out_w_, mp + ph * out_w_);
        continue;
      }
      if (isa == CpuIsa::kAvx2) {
        max2x2_row_avx2(xp + base, xp + base + width_, base, width_, out_w_, yp + ph * out_w_, mp + ph * out_w_);
        continue;
      }
#endif
      max2x2_row_scalar(xp + base, xp + base + width_, base, width_, out_w_, yp + ph * out_w_, mp + ph * out_w_);
    }
    return;
  }
  for (int64_t ph = 0; ph < out_h_; ++ph) {
    const PoolSpan sh = pool_span(ph, kernel_h_, stride_h_, pad_h_, height_);
    for (int64_t pw = 0; pw < out_w_; ++pw) {
      const PoolSpan sw = pool_span(pw, kernel_w_, stride_w_, pad_w_, width_);
      int64_t idx = sh.begin * width_ + sw.begin;
      float m = xp[idx];
      for (int64_t h = sh.begin; h < sh.end; ++h) {
        for (int64_t w = sw.begin; w < sw.end; ++w) {
          const float v = xp[h * width_ + w];
          // NaN propagates (as in PyTorch); otherwise the first maximum wins.
          if (v > m || (v != v && m == m)) {
            m = v;
            idx = h * width_ + w;
          }
        }
      }
      yp[ph * out_w_ + pw] = m;
      mp[ph * out_w_ + pw] = static_cast<int32_t>(idx);
    }
  }
}

void PoolingLayer::ave_plane(const float* xp, float* yp) const {
  for (int64_t ph = 0; ph < out_h_; ++ph) {
    const PoolSpan sh = pool_span(ph, kernel_h_, stride_h_, pad_h_, height_);
    for (int64_t pw = 0; pw < out_w_; ++pw) {
      const PoolSpan sw = pool_span(pw, kernel_w_, stride_w_, pad_w_, width_);
      float s = 0.0f;
      for (int64_t h = sh.begin; h < sh.end; ++h) {
        for (int64_t w = sw.begin; w < sw.end; ++w) s += xp[h * width_ + w];
      }
      yp[ph * out_w_ + pw] = s / static_cast<float>(sh.extent * sw.extent);
    }
  }
}

void PoolingLayer::backward_plane(const float* dyp, const int32_t* mp, float* dxp) const {
  const int64_t in_plane = height_ * width_;
  const int64_t out_plane = out_h_ * out_w_;
  for (int64_t i = 0; i < in_plane; ++i) dxp[i] = 0.0f;
  if (mp) {
    for (int64_t o = 0; o < out_plane; ++o) dxp[mp[o]] += dyp[o];
    return;
  }
  for (int64_t ph = 0; ph < out_h_; ++ph) {
    const PoolSpan sh = pool_span(ph, kernel_h_, stride_h_, pad_h_, height_);
    for (int64_t pw = 0; pw < out_w_; ++pw) {
      const PoolSpan sw = pool_span(pw, kernel_w_, stride_w_, pad_w_, width_);
      const float g = dyp[ph * out_w_ + pw] / static_cast<float>(sh.extent * sw.extent);
      for (int64_t h = sh.begin; h < sh.end; ++h) {
        for (int64_t w = sw.begin; w < sw.end; ++w) dxp[h * width_ + w] += g;
      }
    }
  }
}

void PoolingLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  const Tensor& x = bottom[0]->data;
  Tensor& y = top[0]->data;
  if (x.dtype() != y.dtype()) check_same_storage("Pooling forward", {&x, &y});  // names both dtypes
  const int64_t in_plane = height_ * width_;
  const int64_t out_plane = out_h_ * out_w_;
  const Planes in = planes(in_plane), out = planes(out_plane);
  Tensor mask = method_ == Method::kMax ? take_mask() : Tensor();
  int32_t* m = method_ == Method::kMax ? mask.data<int32_t>() : nullptr;
  with_float_element(x.dtype(), "Pooling forward", [&](auto e) {
    using E = decltype(e);
    using T = typename E::T;
    const T* xs = x.data<T>();
    T* ys = y.data<T>();
    // f32 NCHW: pooled in place; 16 bits or NHWC: each plane gathered into
    // f32 here, pooled, rounded once (NHWC: strided by the channels).
    constexpr bool kF32 = std::is_same_v<E, F32Element>;
    const bool direct = kF32 && call_layout() == Layout::kNCHW;
    parallel_for(num_ * channels_, kMinPlanesPerChunk, [&](int64_t begin, int64_t end) {
      std::vector<float> wide_x, wide_y;
      if (!direct) {
        wide_x.resize(static_cast<size_t>(in_plane));
        wide_y.resize(static_cast<size_t>(out_plane));
      }
      for (int64_t p = begin; p < end; ++p) {
        const float* xp;
        float* yp;
        if (direct) {
          xp = reinterpret_cast<const float*>(xs) + p * in_plane;
          yp = reinterpret_cast<float*>(ys) + p * out_plane;
        } else {
          const T* src = xs + in.first(p);
          for (int64_t i = 0; i < in_plane; ++i) wide_x[static_cast<size_t>(i)] = E::load(src[i * in.step]);
          xp = wide_x.data();
          yp = wide_y.data();
        }
        if (m) {
          max_plane(xp, yp, m + p * out_plane);
        } else {
          ave_plane(xp, yp);
        }
        if (!direct) {
          T* dst = ys + out.first(p);
          for (int64_t o = 0; o < out_plane; ++o) dst[o * out.step] = E::store(yp[o]);
        }
      }
    });
  });
}

void PoolingLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                                const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const Tensor& dy = top[0]->diff;
  Tensor& dx = bottom[0]->diff;
  if (dx.dtype() != dy.dtype()) check_same_storage("Pooling backward", {&dy, &dx});
  const int64_t in_plane = height_ * width_;
  const int64_t out_plane = out_h_ * out_w_;
  const Planes in = planes(in_plane), out = planes(out_plane);
  const Tensor kept_mask = method_ == Method::kMax ? take_mask() : Tensor();  // as forward left it
  const int32_t* mask = method_ == Method::kMax ? kept_mask.data<int32_t>() : nullptr;
  with_float_element(dy.dtype(), "Pooling backward", [&](auto e) {
    using E = decltype(e);
    using T = typename E::T;
    const T* dys = dy.data<T>();
    T* dxs = dx.data<T>();
    constexpr bool kF32 = std::is_same_v<E, F32Element>;
    const bool direct = kF32 && call_layout() == Layout::kNCHW;
    parallel_for(num_ * channels_, kMinPlanesPerChunk, [&](int64_t begin, int64_t end) {
      std::vector<float> wide_dy, wide_dx;  // 16 bits or NHWC: a plane summed in f32, rounded once
      if (!direct) {
        wide_dy.resize(static_cast<size_t>(out_plane));
        wide_dx.resize(static_cast<size_t>(in_plane));
      }
      for (int64_t p = begin; p < end; ++p) {
        const float* dyp;
        float* dxp;
        if (direct) {
          dyp = reinterpret_cast<const float*>(dys) + p * out_plane;
          dxp = reinterpret_cast<float*>(dxs) + p * in_plane;
        } else {
          const T* src = dys + out.first(p);
          for (int64_t o = 0; o < out_plane; ++o) wide_dy[static_cast<size_t>(o)] = E::load(src[o * out.step]);
          dyp = wide_dy.data();
          dxp = wide_dx.data();
        }
        backward_plane(dyp, mask ? mask + p * out_plane : nullptr, dxp);
        if (!direct) {
          T* dst = dxs + in.first(p);
          for (int64_t i = 0; i < in_plane; ++i) dst[i * in.step] = E::store(dxp[i]);
        }
      }
    });
  });
}

STRATA_REGISTER_LAYER("Pooling", PoolingLayer);

}  // namespace strata
