// The AVX-512 SGEMM kernel: see gemm_avx512.h.
#include "framework/cpu/gemm_avx512.h"


#include <cstdlib>

#include "framework/cpu/gemm_stripes.h"
#include "framework/tensor.h"

namespace strata {
namespace gemm_internal {

#ifdef STRATA_GEMM_AVX512

// GCC 12 warns inside its own AVX-512 intrinsics (their deliberately
// undefined pass-through operand).
#pragma GCC diagnostic push
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace {

// One GEMM operand view: element (i, j) of op(X) is p[i * rs + j * cs].
struct Operand {
  const float* p;
  int64_t rs;
  int64_t cs;
};

// Register tile: up to kMaxMR rows of C by kNR = 32 columns (two zmm per row).
constexpr int kNR = 32;
static_assert(kNR == kGemmPanel, "gemm_pack_b panels are the kernel's B panels");
constexpr int kMaxMR = 14;
// Cache blocking: a packed B micro-panel (kKC x 32 floats, 32 KiB) stays in L1
// while the packed A block (mc x kKC, <= 384 KiB) streams from L2.
constexpr int64_t kKC = 256;
constexpr int64_t kMCMax = 384;
constexpr int64_t kNC = 4096;

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

STRATA_AVX512 inline __mmask16 mask_first(int n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n > 0 ? n : 0)) - 1u);
}

// C[R x nv] = alpha * A_panel * B_panel + beta * C, where A_panel is [kc][R]
// and B_panel is [kc][32] (zero-padded past nv). beta == 0 never reads C.
template <int R>
STRATA_AVX512 void micro_kernel(int64_t kc, const float* __restrict a, const float* __restrict b,
                                float* c, int64_t ldc, int nv, float alpha, float beta) {
  __m512 c0[R];
  __m512 c1[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    c0[r] = _mm512_setzero_ps();
    c1[r] = _mm512_setzero_ps();
    // C is read or written only after the k loop; fetch it meanwhile (a
    // large C, e.g. a weight gradient, lives in L3).
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + 16), _MM_HINT_T0);
  }
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(b);
    const __m512 b1 = _mm512_load_ps(b + 16);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(a[r]);
      c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);
      c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);
    }
    a += R;
    b += kNR;
  }
  const __m512 va = _mm512_set1_ps(alpha);
  const __m512 vb = _mm512_set1_ps(beta);
  if (nv == kNR) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      float* cr = c + r * ldc;
      __m512 v0 = _mm512_mul_ps(c0[r], va);
      __m512 v1 = _mm512_mul_ps(c1[r], va);
      if (beta != 0.0f) {
        v0 = _mm512_fmadd_ps(_mm512_loadu_ps(cr), vb, v0);
        v1 = _mm512_fmadd_ps(_mm512_loadu_ps(cr + 16), vb, v1);
      }
      _mm512_storeu_ps(cr, v0);
      _mm512_storeu_ps(cr + 16, v1);
    }
  } else {
    const __mmask16 m0 = mask_first(nv);
    const __mmask16 m1 = mask_first(nv - 16);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      float* cr = c + r * ldc;
      __m512 v0 = _mm512_mul_ps(c0[r], va);
      __m512 v1 = _mm512_mul_ps(c1[r], va);
      if (beta != 0.0f) {
        v0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m0, cr), vb, v0);
        v1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m1, cr + 16), vb, v1);
      }
      _mm512_mask_storeu_ps(cr, m0, v0);
      _mm512_mask_storeu_ps(cr + 16, m1, v1);
    }
  }
}

using MicroKernel = void (*)(int64_t, const float*, const float*, float*, int64_t, int, float, float);

const MicroKernel kKernels[kMaxMR + 1] = {
    nullptr,          micro_kernel<1>,  micro_kernel<2>,  micro_kernel<3>,  micro_kernel<4>,
    micro_kernel<5>,  micro_kernel<6>,  micro_kernel<7>,  micro_kernel<8>,  micro_kernel<9>,
    micro_kernel<10>, micro_kernel<11>, micro_kernel<12>, micro_kernel<13>, micro_kernel<14>};

// Rows per A panel for a given M: panels with fewer than 8 rows cannot hide
// the FMA latency, so prefer a height that leaves no small remainder.
int choose_mr(int64_t M) {
  if (M <= kMaxMR) return static_cast<int>(M);
  int best = kMaxMR;
  double best_cost = 1e300;
  for (int mr = kMaxMR; mr >= 8; --mr) {
    const int64_t full = M / mr;
    const int64_t rem = M % mr;
    const double cost = static_cast<double>(full * mr + (rem ? (rem < 8 ? 8 : rem) : 0)) +
                        0.5 * static_cast<double>(full + (rem ? 1 : 0));
    if (cost < best_cost) {
      best_cost = cost;
      best = mr;
    }
  }
  return best;
}

// Packs op(B)[p0:p0+kc, j0:j0+nc] into panels [nc/32][kc][32], zero-padding
// the last panel's columns.
STRATA_AVX512 void pack_b(const Operand& B, int64_t p0, int64_t kc, int64_t j0, int64_t nc, float* dst) {
  for (int64_t jr = 0; jr < nc; jr += kNR) {
    const int nv = static_cast<int>(min64(kNR, nc - jr));
    if (B.cs == 1) {
      // Rows of op(B) are contiguous: copy 32 floats per k.
      const __mmask16 m0 = mask_first(nv);
      const __mmask16 m1 = mask_first(nv - 16);
      const float* src = B.p + p0 * B.rs + j0 + jr;
      for (int64_t k = 0; k < kc; ++k) {
        const float* s = src + k * B.rs;
        if (nv == kNR) {
          _mm512_store_ps(dst, _mm512_loadu_ps(s));
          _mm512_store_ps(dst + 16, _mm512_loadu_ps(s + 16));
        } else {
          _mm512_store_ps(dst, _mm512_maskz_loadu_ps(m0, s));
          _mm512_store_ps(dst + 16, _mm512_maskz_loadu_ps(m1, s + 16));
        }
        dst += kNR;
      }
    } else {
      // Columns of op(B) are contiguous (B is transposed): transpose 16x16 tiles.
      for (int64_t kb = 0; kb < kc; kb += 16) {
        const int kv = static_cast<int>(min64(16, kc - kb));
        const __mmask16 km = mask_first(kv);
        for (int h = 0; h < 2; ++h) {
          __m512 r[16];
          for (int i = 0; i < 16; ++i) {
            const int n = h * 16 + i;
            r[i] = n < nv ? _mm512_maskz_loadu_ps(km, B.p + (j0 + jr + n) * B.cs + (p0 + kb) * B.rs)
                          : _mm512_setzero_ps();
          }
          transpose16(r);
          for (int t = 0; t < kv; ++t) _mm512_store_ps(dst + (kb + t) * kNR + h * 16, r[t]);
        }
      }
      dst += kc * kNR;
    }
  }
}

// Packs op(A)[i0:i0+mc, p0:p0+kc] into panels of mr rows: [mc/mr][kc][rows].
STRATA_AVX512 void pack_a(const Operand& A, int64_t i0, int64_t mc, int64_t p0, int64_t kc, int mr, float* dst) {
  for (int64_t ir = 0; ir < mc; ir += mr) {
    const int rows = static_cast<int>(min64(mr, mc - ir));
    const __mmask16 rmask = mask_first(rows);
    const float* src = A.p + (i0 + ir) * A.rs + p0 * A.cs;
    if (A.rs == 1) {
      // A is transposed: the rows of one k are contiguous.
      for (int64_t k = 0; k < kc; ++k) {
        _mm512_mask_storeu_ps(dst + k * rows, rmask, _mm512_maskz_loadu_ps(rmask, src + k * A.cs));
      }
    } else {
      // Rows of A are contiguous: transpose 16 k at a time.
      for (int64_t kb = 0; kb < kc; kb += 16) {
        const int kv = static_cast<int>(min64(16, kc - kb));
        const __mmask16 km = mask_first(kv);
        __m512 r[16];
        for (int i = 0; i < 16; ++i) {
          r[i] = i < rows ? _mm512_maskz_loadu_ps(km, src + i * A.rs + kb) : _mm512_setzero_ps();
        }
        transpose16(r);
        for (int t = 0; t < kv; ++t) _mm512_mask_storeu_ps(dst + (kb + t) * rows, rmask, r[t]);
      }
    }
    dst += rows * kc;
  }
}

struct PackBuffers {
  float* a = nullptr;
  float* b = nullptr;
  PackBuffers() {
    a = static_cast<float*>(aligned_alloc_bytes(sizeof(float) * (kMCMax + kMaxMR) * kKC));
    b = static_cast<float*>(aligned_alloc_bytes(sizeof(float) * (kNC + kNR) * kKC));
  }
  ~PackBuffers() {
    aligned_free(a);
    aligned_free(b);
  }
  PackBuffers(const PackBuffers&) = delete;
  PackBuffers& operator=(const PackBuffers&) = delete;
};

PackBuffers& pack_buffers() {
  thread_local PackBuffers buffers;
  return buffers;
}

// C[M,N] (row stride ldc) = alpha * op(A) * op(B) + beta * C on this thread.
// With `packer`, op(B) comes from it (column indices offset by j_base) and B
// is unused.
STRATA_AVX512 void gemm_serial(int64_t M, int64_t N, int64_t K, float alpha, const Operand& A,
                               const Operand& B, const GemmPackB* packer, int64_t j_base, float beta,
                               float* C, int64_t ldc, float* abuf, float* bbuf) {
  const int mr = choose_mr(M);
  const int64_t mc_max = (kMCMax / mr) * mr;
  for (int64_t jc = 0; jc < N; jc += kNC) {
    const int64_t nc = min64(kNC, N - jc);
    for (int64_t pc = 0; pc < K; pc += kKC) {
      const int64_t kc = min64(kKC, K - pc);
      const float beta_k = pc == 0 ? beta : 1.0f;
      if (packer) {
        (*packer)(pc, kc, j_base + jc, nc, bbuf);
      } else {
        pack_b(B, pc, kc, jc, nc, bbuf);
      }
      for (int64_t ic = 0; ic < M; ic += mc_max) {
        const int64_t mc = min64(mc_max, M - ic);
        pack_a(A, ic, mc, pc, kc, mr, abuf);
        for (int64_t jr = 0; jr < nc; jr += kNR) {
          const int nv = static_cast<int>(min64(kNR, nc - jr));
          const float* bp = bbuf + jr * kc;
          for (int64_t ir = 0; ir < mc; ir += mr) {
            const int rows = static_cast<int>(min64(mr, mc - ir));
            kKernels[rows](kc, abuf + ir * kc, bp, C + (ic + ir) * ldc + jc + jr, ldc, nv, alpha,
                           beta_k);
          }
        }
      }
    }
  }
}

}  // namespace

// Threads split C into column (or row) stripes (gemm_stripes.h); each packs
// its own operands. ldc: row stride of C; packer: see gemm_pack_b (then B is
// unused).
void gemm_avx512(Transpose ta, Transpose tb, int64_t M, int64_t N, int64_t K, float alpha,
                 const float* A, const float* B, const GemmPackB* packer, float beta, float* C,
                 int64_t ldc) {
  const Operand a = ta == Transpose::kNo ? Operand{A, K, 1} : Operand{A, 1, M};
  const Operand b = tb == Transpose::kNo ? Operand{B, N, 1} : Operand{B, 1, K};
  for_each_stripe(M, N, K, kNR, 8, [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    PackBuffers& buf = pack_buffers();
    const Operand as{a.p + i0 * a.rs, a.rs, a.cs};
    const Operand bs{packer ? b.p : b.p + j0 * b.cs, b.rs, b.cs};
    gemm_serial(i1 - i0, j1 - j0, K, alpha, as, bs, packer, j0, beta, C + i0 * ldc + j0, ldc, buf.a, buf.b);
  });
}

bool cpu_has_avx512() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  }();
  return has;
}

#pragma GCC diagnostic pop

#else  // !STRATA_GEMM_AVX512

bool cpu_has_avx512() { return false; }

void gemm_avx512(Transpose, Transpose, int64_t, int64_t, int64_t, float, const float*, const float*,
                 const GemmPackB*, float, float*, int64_t) {
  std::abort();  // unreachable: callers check cpu_has_avx512()
}

#endif  // STRATA_GEMM_AVX512

}  // namespace gemm_internal
}  // namespace strata
