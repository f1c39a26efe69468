#include "framework/cpu/math.h"

#include <cblas.h>

#include <cstring>
#include <memory>
#include <vector>

#include "framework/cpu/cpu_isa.h"
#include "framework/cpu/gemm_avx2.h"
#include "framework/cpu/gemm_avx512.h"
#include "framework/cpu/gemm_stripes.h"
#include "framework/tensor.h"

// GEMM: our own blocked kernels on x86-64 CPUs with AVX-512
// (framework/cpu/gemm_avx512.cpp) or AVX2 and FMA (framework/cpu/gemm_avx2.cpp), which
// say why; cblas_sgemm on the portable path (framework/cpu/cpu_isa.h picks). Every
// path runs on strata's threads alone: OpenBLAS is kept single-threaded
// (framework/cpu/threads.cpp) and its calls are split into stripes here, so the
// thread count a user gives is the number of busy threads, and a GEMM inside
// a parallel region (a layer's loop over images) runs on its own thread.

namespace strata {

extern "C" void openblas_set_num_threads(int num_threads);

namespace {

// OpenBLAS starts as many threads of its own as there are cores; strata's
// pool owns the threads (a stripe or a layer's chunk per thread), so
// OpenBLAS runs single-threaded inside it. Set before the first BLAS call.
void blas_single_threaded() {
  static const bool once = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)once;
}

void gemm_cblas(Transpose ta, Transpose tb, int64_t M, int64_t N, int64_t K, float alpha,
                const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  blas_single_threaded();
  cblas_sgemm(CblasRowMajor, ta == Transpose::kNo ? CblasNoTrans : CblasTrans,
              tb == Transpose::kNo ? CblasNoTrans : CblasTrans, static_cast<int>(M), static_cast<int>(N),
              static_cast<int>(K), alpha, A, static_cast<int>(lda), B, static_cast<int>(ldb), beta, C,
              static_cast<int>(ldc));
}

// The portable path: single-threaded cblas_sgemm calls on stripes of C
// (gemm_stripes.h), one per strata thread.
void gemm_portable(Transpose ta, Transpose tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                   const float* B, float beta, float* C, int64_t ldc) {
  const int64_t lda = ta == Transpose::kNo ? K : M;
  const int64_t ldb = tb == Transpose::kNo ? N : K;
  gemm_internal::for_each_stripe(M, N, K, 16, 4, [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    const float* a = ta == Transpose::kNo ? A + i0 * lda : A + i0;
    const float* b = tb == Transpose::kNo ? B + j0 : B + j0 * ldb;
    gemm_cblas(ta, tb, i1 - i0, j1 - j0, K, alpha, a, lda, b, ldb, beta, C + i0 * ldc + j0, ldc);
  });
}

struct AlignedFree {
  void operator()(float* p) const { aligned_free(p); }
};

}  // namespace

void gemm(Transpose ta, Transpose tb, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, const float* B, float beta, float* C) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    // C = beta * C; beta == 0 must clear C even if it holds NaN.
    if (beta == 0.0f) {
      std::memset(C, 0, sizeof(float) * M * N);
    } else if (beta != 1.0f) {
      for (int64_t i = 0; i < M * N; ++i) C[i] *= beta;
    }
    return;
  }
  switch (cpu_isa()) {
    case CpuIsa::kAvx512:
      gemm_internal::gemm_avx512(ta, tb, M, N, K, alpha, A, B, nullptr, beta, C, N);
      return;
    case CpuIsa::kAvx2:
      gemm_internal::gemm_avx2(ta, tb, M, N, K, alpha, A, B, nullptr, beta, C, N);
      return;
    case CpuIsa::kPortable:
      gemm_portable(ta, tb, M, N, K, alpha, A, B, beta, C, N);
      return;
  }
}

void gemm_pack_b(Transpose ta, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                 const GemmPackB& pack_b, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    for (int64_t i = 0; i < M; ++i) {
      float* row = C + i * ldc;
      for (int64_t j = 0; j < N; ++j) row[j] = beta == 0.0f ? 0.0f : beta * row[j];
    }
    return;
  }
  if (cpu_isa() == CpuIsa::kAvx512) {
    gemm_internal::gemm_avx512(ta, Transpose::kNo, M, N, K, alpha, A, nullptr, &pack_b, beta, C, ldc);
    return;
  }
  if (cpu_isa() == CpuIsa::kAvx2) {
    gemm_internal::gemm_avx2(ta, Transpose::kNo, M, N, K, alpha, A, nullptr, &pack_b, beta, C, ldc);
    return;
  }
  // Portable: unpack B into a matrix for BLAS. The packer is promised a
  // 64-byte aligned dst (packers may use aligned vector stores).
  const int64_t panels = (N + kGemmPanel - 1) / kGemmPanel;
  const std::unique_ptr<float, AlignedFree> packed(
      static_cast<float*>(aligned_alloc_bytes(sizeof(float) * static_cast<size_t>(panels * K * kGemmPanel))));
  std::vector<float> b(static_cast<size_t>(K * N));
  pack_b(0, K, 0, N, packed.get());
  for (int64_t j = 0; j < N; ++j) {
    const float* panel = packed.get() + (j / kGemmPanel) * K * kGemmPanel + j % kGemmPanel;
    for (int64_t k = 0; k < K; ++k) b[static_cast<size_t>(k * N + j)] = panel[k * kGemmPanel];
  }
  gemm_portable(ta, Transpose::kNo, M, N, K, alpha, A, b.data(), beta, C, ldc);
}

void gemv(Transpose ta, int64_t M, int64_t N, float alpha, const float* A, const float* x,
          float beta, float* y) {
  const int64_t ylen = ta == Transpose::kNo ? M : N;
  if (ylen == 0) return;
  if ((ta == Transpose::kNo ? N : M) == 0) {
    // Empty sum: y = beta * y, as gemm does for K == 0 (beta == 0 clears NaN).
    for (int64_t i = 0; i < ylen; ++i) y[i] = beta == 0.0f ? 0.0f : beta * y[i];
    return;
  }
  blas_single_threaded();
  cblas_sgemv(CblasRowMajor, ta == Transpose::kNo ? CblasNoTrans : CblasTrans, static_cast<int>(M),
              static_cast<int>(N), alpha, A, static_cast<int>(N), x, 1, beta, y, 1);
}

void axpy(int64_t n, float alpha, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void scale(int64_t n, float alpha, float* x) {
  for (int64_t i = 0; i < n; ++i) x[i] *= alpha;
}

double dot(int64_t n, const float* x, const float* y) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * y[i];
  return s;
}

double sum_squares(int64_t n, const float* x) { return dot(n, x, x); }

namespace {

int64_t conv_out_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil) {
  return (in + 2 * pad - (dil * (k - 1) + 1)) / stride + 1;
}

// Output columns ow whose input column ow * stride + off lies in [0, width).
void valid_range(int64_t off, int64_t stride, int64_t width, int64_t out_w, int64_t* lo, int64_t* hi) {
  int64_t l = off >= 0 ? 0 : (-off + stride - 1) / stride;
  int64_t h = width - off <= 0 ? 0 : (width - off + stride - 1) / stride;
  if (h > out_w) h = out_w;
  if (l > h) l = h;
  *lo = l;
  *hi = h;
}

}  // namespace

void im2col(const float* im, int64_t channels, int64_t height, int64_t width, int64_t kh, int64_t kw,
            int64_t pad_h, int64_t pad_w, int64_t stride_h, int64_t stride_w, int64_t dil_h,
            int64_t dil_w, float* col) {
  const int64_t out_hw = conv_out_size(height, kh, pad_h, stride_h, dil_h) *
                         conv_out_size(width, kw, pad_w, stride_w, dil_w);
  im2col(im, channels, height, width, kh, kw, pad_h, pad_w, stride_h, stride_w, dil_h, dil_w, col,
         out_hw);
}

void im2col(const float* im, int64_t channels, int64_t height, int64_t width, int64_t kh, int64_t kw,
            int64_t pad_h, int64_t pad_w, int64_t stride_h, int64_t stride_w, int64_t dil_h,
            int64_t dil_w, float* col, int64_t col_ld) {
  const int64_t out_h = conv_out_size(height, kh, pad_h, stride_h, dil_h);
  const int64_t out_w = conv_out_size(width, kw, pad_w, stride_w, dil_w);
  for (int64_t c = 0; c < channels; ++c) {
    const float* plane = im + c * height * width;
    for (int64_t ki = 0; ki < kh; ++ki) {
      for (int64_t kj = 0; kj < kw; ++kj) {
        float* row = col + ((c * kh + ki) * kw + kj) * col_ld;
        const int64_t off = kj * dil_w - pad_w;
        int64_t lo = 0, hi = 0;
        valid_range(off, stride_w, width, out_w, &lo, &hi);
        if (stride_w == 1 && stride_h == 1 && lo == 0 && hi == out_w && out_w == width) {
          // Whole input rows: the valid output rows are one contiguous copy.
          const int64_t ih0 = ki * dil_h - pad_h;
          // Output rows [oh_lo, oh_hi) read input rows; a window row above the
          // image for every output row gives oh_lo == oh_hi == out_h.
          int64_t oh_lo = ih0 < 0 ? (-ih0 < out_h ? -ih0 : out_h) : 0;
          int64_t oh_hi = height - ih0 < out_h ? height - ih0 : out_h;
          if (oh_hi < oh_lo) oh_hi = oh_lo;
          // (memcpy/memset: GCC -O2 does not vectorise plain copy loops.)
          if (oh_lo > 0) std::memset(row, 0, sizeof(float) * oh_lo * out_w);
          if (oh_hi > oh_lo) {
            std::memcpy(row + oh_lo * out_w, plane + (oh_lo + ih0) * width, sizeof(float) * (oh_hi - oh_lo) * out_w);
          }
          if (oh_hi < out_h) std::memset(row + oh_hi * out_w, 0, sizeof(float) * (out_h - oh_hi) * out_w);
          continue;
        }
        for (int64_t oh = 0; oh < out_h; ++oh) {
          const int64_t ih = oh * stride_h - pad_h + ki * dil_h;
          float* out = row + oh * out_w;
          if (ih < 0 || ih >= height) {
            std::memset(out, 0, sizeof(float) * out_w);
            continue;
          }
          const float* in = plane + ih * width;
          for (int64_t ow = 0; ow < lo; ++ow) out[ow] = 0.0f;
          if (stride_w == 1) {
            if (hi > lo) std::memcpy(out + lo, in + lo + off, sizeof(float) * (hi - lo));
          } else {
            for (int64_t ow = lo; ow < hi; ++ow) out[ow] = in[ow * stride_w + off];
          }
          for (int64_t ow = hi; ow < out_w; ++ow) out[ow] = 0.0f;
        }
      }
    }
  }
}

void col2im(const float* col, int64_t channels, int64_t height, int64_t width, int64_t kh, int64_t kw,
            int64_t pad_h, int64_t pad_w, int64_t stride_h, int64_t stride_w, int64_t dil_h,
            int64_t dil_w, float* im) {
  const int64_t out_hw = conv_out_size(height, kh, pad_h, stride_h, dil_h) *
                         conv_out_size(width, kw, pad_w, stride_w, dil_w);
  col2im(col, out_hw, channels, height, width, kh, kw, pad_h, pad_w, stride_h, stride_w, dil_h,
         dil_w, im);
}

void col2im(const float* col, int64_t col_ld, int64_t channels, int64_t height, int64_t width,
            int64_t kh, int64_t kw, int64_t pad_h, int64_t pad_w, int64_t stride_h, int64_t stride_w,
            int64_t dil_h, int64_t dil_w, float* im) {
  const int64_t out_h = conv_out_size(height, kh, pad_h, stride_h, dil_h);
  const int64_t out_w = conv_out_size(width, kw, pad_w, stride_w, dil_w);
  for (int64_t c = 0; c < channels; ++c) {
    float* plane = im + c * height * width;
    for (int64_t ki = 0; ki < kh; ++ki) {
      for (int64_t kj = 0; kj < kw; ++kj) {
        const float* row = col + ((c * kh + ki) * kw + kj) * col_ld;
        const int64_t off = kj * dil_w - pad_w;
        int64_t lo = 0, hi = 0;
        valid_range(off, stride_w, width, out_w, &lo, &hi);
        for (int64_t oh = 0; oh < out_h; ++oh) {
          const int64_t ih = oh * stride_h - pad_h + ki * dil_h;
          if (ih < 0 || ih >= height) continue;
          float* out = plane + ih * width;
          const float* in = row + oh * out_w;
          if (stride_w == 1) {
            for (int64_t ow = lo; ow < hi; ++ow) out[ow + off] += in[ow];
          } else {
            for (int64_t ow = lo; ow < hi; ++ow) out[ow * stride_w + off] += in[ow];
          }
        }
      }
    }
  }
}

}  // namespace strata
