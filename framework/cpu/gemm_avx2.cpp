// The AVX2/FMA SGEMM kernel: see gemm_avx2.h.
#include "framework/cpu/gemm_avx2.h"

#include <array>
#include <cstdlib>
#include <utility>

#include "framework/cpu/gemm_stripes.h"
#include "framework/tensor.h"

namespace strata {
namespace gemm_internal {

#ifdef STRATA_GEMM_AVX2

namespace {

// One GEMM operand view: element (i, j) of op(X) is p[i * rs + j * cs].
struct Operand {
  const float* p;
  int64_t rs;
  int64_t cs;
};

// Register tile: up to kMaxMR rows of C by kNR = 16 columns (two ymm per
// row): 12 accumulators, two B vectors and one broadcast fill the 16 ymm
// registers. B comes in gemm_pack_b's panels of kPanel = 32 columns ([kc][32]
// each), which the kernel walks as two 16-column halves (rows 32 floats
// apart), so a packer's panels serve both this and the AVX-512 kernel.
constexpr int kPanel = static_cast<int>(kGemmPanel);
constexpr int kNV = 2;
constexpr int kNR = 8 * kNV;
static_assert(kPanel % kNR == 0, "the kernel walks a B panel in kNR-column parts");
constexpr int kMaxMR = 6;
// Fewer rows than this leave too few accumulators to hide the FMA latency
// (4-5 cycles, two FMA ports: 8-10 independent sums).
constexpr int kMinFullMR = 5;
// Row stripes for threads: a multiple of the usual panel height.
constexpr int64_t kRowUnit = 6;
// Cache blocking: a 16-column half panel of B (kKC x 16 floats, 16 KiB)
// stays in L1 while the packed A block (mc x kKC, <= 168 KiB) streams from L2
// (256 KiB on Haswell..Skylake, 512 KiB on Zen 2/3), and the packed B block
// (kKC x kNC, 4 MiB) from L3. On Zen 3, kKC 128..384 and kMCMax 96..384
// measured alike within noise; 168 rows keep A within a 256 KiB L2.
constexpr int64_t kKC = 256;
constexpr int64_t kMCMax = 168;
constexpr int64_t kNC = 4096;
static_assert(kNC % kPanel == 0, "column blocks are whole panels");

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// The first n (0..8) floats at p, the rest zero; reads nothing past p[n-1].
// (Not _mm256_maskload_ps: AMD's manual leaves faults on masked-off elements
// implementation dependent, so a masked load at the end of a buffer may fault.)
STRATA_AVX2 inline __m256 load_first(const float* p, int n) {
  if (n >= 8) return _mm256_loadu_ps(p);
  alignas(32) float t[8] = {};
  for (int i = 0; i < n; ++i) t[i] = p[i];
  return _mm256_load_ps(t);
}

// C[R x nv] = alpha * A_panel * B + beta * C, where A_panel is [kc][R] and B
// is kNR columns of a packed panel ([kc] rows kPanel floats apart, zero past
// nv). beta == 0 never reads C.
template <int R>
STRATA_AVX2 void micro_kernel(int64_t kc, const float* __restrict a, const float* __restrict b,
                              float* c, int64_t ldc, int nv, float alpha, float beta) {
  __m256 acc[R][kNV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) acc[r][v] = _mm256_setzero_ps();
    // C is read or written only after the k loop; fetch it meanwhile.
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + kNR - 1), _MM_HINT_T0);
  }
  for (int64_t k = 0; k < kc; ++k) {
    __m256 bv[kNV];
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) bv[v] = _mm256_load_ps(b + 8 * v);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + r);
#pragma GCC unroll 4
      for (int v = 0; v < kNV; ++v) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
    }
    a += R;
    b += kPanel;
  }
  const __m256 va = _mm256_set1_ps(alpha);
  const __m256 vb = _mm256_set1_ps(beta);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    float* cr = c + r * ldc;
    if (nv == kNR) {
#pragma GCC unroll 4
      for (int v = 0; v < kNV; ++v) {
        __m256 x = _mm256_mul_ps(acc[r][v], va);
        if (beta != 0.0f) x = _mm256_fmadd_ps(_mm256_loadu_ps(cr + 8 * v), vb, x);
        _mm256_storeu_ps(cr + 8 * v, x);
      }
    } else {
      // Edge tile: finish in a buffer and touch only the nv columns of C
      // (no masked loads or stores: see load_first).
      alignas(32) float t[kNR];
#pragma GCC unroll 4
      for (int v = 0; v < kNV; ++v) _mm256_store_ps(t + 8 * v, _mm256_mul_ps(acc[r][v], va));
      if (beta != 0.0f) {
        for (int j = 0; j < nv; ++j) cr[j] = __builtin_fmaf(cr[j], beta, t[j]);
      } else {
        for (int j = 0; j < nv; ++j) cr[j] = t[j];
      }
    }
  }
}

using MicroKernel = void (*)(int64_t, const float*, const float*, float*, int64_t, int, float, float);

template <size_t... R>
constexpr std::array<MicroKernel, sizeof...(R) + 1> make_kernels(std::index_sequence<R...>) {
  return {nullptr, micro_kernel<static_cast<int>(R) + 1>...};
}
constexpr auto kKernels = make_kernels(std::make_index_sequence<kMaxMR>());

// Rows per A panel for a given M: panels with fewer than kMinFullMR rows
// cannot hide the FMA latency, so prefer a height that leaves no small
// remainder.
int choose_mr(int64_t M) {
  if (M <= kMaxMR) return static_cast<int>(M);
  int best = kMaxMR;
  double best_cost = 1e300;
  for (int mr = kMaxMR; mr >= kMinFullMR; --mr) {
    const int64_t full = M / mr;
    const int64_t rem = M % mr;
    const double cost = static_cast<double>(full * mr + (rem ? (rem < kMinFullMR ? kMinFullMR : rem) : 0)) +
                        0.5 * static_cast<double>(full + (rem ? 1 : 0));
    if (cost < best_cost) {
      best_cost = cost;
      best = mr;
    }
  }
  return best;
}

// Packs op(B)[p0:p0+kc, j0:j0+nc] into panels [nc/32][kc][32] (gemm_pack_b's
// layout), zero-padding the last panel's columns.
STRATA_AVX2 void pack_b(const Operand& B, int64_t p0, int64_t kc, int64_t j0, int64_t nc, float* dst) {
  const int64_t full = nc / kPanel;  // whole panels
  const int tail = static_cast<int>(nc % kPanel);
  if (B.cs == 1) {
    // Rows of op(B) are contiguous: walk each row across all panels, so B is
    // read in long runs the hardware prefetcher follows. (Down one panel at
    // a time, 128 bytes per row, packing took 15% instead of 11% of a
    // 64x1024x576 GEMM; it is bound by L3 bandwidth here.)
    for (int64_t k = 0; k < kc; ++k) {
      const float* s = B.p + (p0 + k) * B.rs + j0;
      float* d = dst + k * kPanel;
      for (int64_t p = 0; p < full; ++p) {
        for (int g = 0; g < kPanel / 8; ++g) {
          _mm256_store_ps(d + p * kc * kPanel + 8 * g, _mm256_loadu_ps(s + p * kPanel + 8 * g));
        }
      }
      if (tail) {
        for (int g = 0; g < kPanel / 8; ++g) {
          _mm256_store_ps(d + full * kc * kPanel + 8 * g, load_first(s + full * kPanel + 8 * g, tail - 8 * g));
        }
      }
    }
    return;
  }
  // Columns of op(B) are contiguous (B is transposed): transpose 8x8 tiles,
  // walking 8 columns at a time down their length (each 64-byte line of B is
  // read once, by consecutive tiles).
  for (int64_t jr = 0; jr < nc; jr += kPanel) {
    const int nv = static_cast<int>(min64(kPanel, nc - jr));
    for (int g = 0; g < kPanel / 8; ++g) {
      for (int64_t kb = 0; kb < kc; kb += 8) {
        const int kv = static_cast<int>(min64(8, kc - kb));
        __m256 r[8];
        for (int i = 0; i < 8; ++i) {
          const int n = 8 * g + i;
          r[i] = n < nv ? load_first(B.p + (j0 + jr + n) * B.cs + p0 + kb, kv) : _mm256_setzero_ps();
        }
        transpose8(r);
        for (int t = 0; t < kv; ++t) _mm256_store_ps(dst + (kb + t) * kPanel + 8 * g, r[t]);
      }
    }
    dst += kc * kPanel;
  }
}

// Packs op(A)[i0:i0+mc, p0:p0+kc] into panels of mr rows: [mc/mr][kc][rows].
// Panels have fewer than 8 rows, so each k's rows go out as one 8-float store
// that spills into the next k's place (written after it).
STRATA_AVX2 void pack_a(const Operand& A, int64_t i0, int64_t mc, int64_t p0, int64_t kc, int mr, float* dst) {
  if (A.rs == 1) {
    // A is transposed: the rows of one k are contiguous. Copy 8 k at a time
    // across all panels (one panel at a time, the reads stride a row of A
    // per k and keep evicting each other from the same L1 set).
    for (int64_t kb = 0; kb < kc; kb += 8) {
      const int64_t ke = min64(kb + 8, kc);
      for (int64_t i = 0; i < mc; i += mr) {
        const int rows = static_cast<int>(min64(mr, mc - i));
        for (int64_t k = kb; k < ke; ++k) {
          const float* s = A.p + i0 + i + (p0 + k) * A.cs;
          float* d = dst + i * kc + k * rows;
          if (k + 1 < kc && i + 8 <= mc) {
            _mm256_storeu_ps(d, _mm256_loadu_ps(s));
          } else {
            for (int r = 0; r < rows; ++r) d[r] = s[r];
          }
        }
      }
    }
    return;
  }
  // Rows of A are contiguous: transpose 8 k at a time, panel by panel (the
  // last panel's spill needs 8 floats of slack after dst's panels).
  for (int64_t ir = 0; ir < mc; ir += mr) {
    const int rows = static_cast<int>(min64(mr, mc - ir));
    const float* src = A.p + (i0 + ir) * A.rs + p0;
    for (int64_t kb = 0; kb < kc; kb += 8) {
      const int kv = static_cast<int>(min64(8, kc - kb));
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = i < rows ? load_first(src + i * A.rs + kb, kv) : _mm256_setzero_ps();
      transpose8(r);
      for (int t = 0; t < kv; ++t) _mm256_storeu_ps(dst + (kb + t) * rows, r[t]);
    }
    dst += rows * kc;
  }
}

struct PackBuffers {
  float* a = nullptr;
  float* b = nullptr;
  PackBuffers() {
    a = static_cast<float*>(aligned_alloc_bytes(sizeof(float) * ((kMCMax + kMaxMR) * kKC + 8)));
    b = static_cast<float*>(aligned_alloc_bytes(sizeof(float) * (kNC + kPanel) * kKC));
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

// C[mc, nc] += packed A [mc/mr][kc][mr] * packed B [nc/32][kc][32], scaled as
// the micro-kernel does.
STRATA_AVX2 void multiply_block(int64_t mc, int64_t nc, int64_t kc, int mr, const float* abuf, const float* bbuf,
                                float alpha, float beta, float* C, int64_t ldc) {
  // Each kNR-column part of a panel meets every A panel of the block while
  // it sits in L1.
  for (int64_t jr = 0; jr < nc; jr += kNR) {
    const int nv = static_cast<int>(min64(kNR, nc - jr));
    const float* bp = bbuf + (jr / kPanel) * kPanel * kc + jr % kPanel;
    for (int64_t ir = 0; ir < mc; ir += mr) {
      const int rows = static_cast<int>(min64(mr, mc - ir));
      kKernels[rows](kc, abuf + ir * kc, bp, C + ir * ldc + jr, ldc, nv, alpha, beta);
    }
  }
}

// C[M,N] (row stride ldc) = alpha * op(A) * op(B) + beta * C on this thread.
// With `packer`, op(B) comes from it (column indices offset by j_base) and B
// is unused.
STRATA_AVX2 void gemm_serial(int64_t M, int64_t N, int64_t K, float alpha, const Operand& A,
                             const Operand& B, const GemmPackB* packer, int64_t j_base, float beta,
                             float* C, int64_t ldc, float* abuf, float* bbuf) {
  const int mr = choose_mr(M);
  const int64_t mc_max = (kMCMax / mr) * mr;
  // Packed B (kc x nc) is reused by every row block from L3; packed A
  // (mc x kc) by every panel of B from L2.
  for (int64_t jc = 0; jc < N; jc += kNC) {
    const int64_t nc = min64(kNC, N - jc);
    for (int64_t pc = 0; pc < K; pc += kKC) {
      const int64_t kc = min64(kKC, K - pc);
      if (packer) {
        (*packer)(pc, kc, j_base + jc, nc, bbuf);
      } else {
        pack_b(B, pc, kc, jc, nc, bbuf);
      }
      for (int64_t ic = 0; ic < M; ic += mc_max) {
        const int64_t mc = min64(mc_max, M - ic);
        pack_a(A, ic, mc, pc, kc, mr, abuf);
        multiply_block(mc, nc, kc, mr, abuf, bbuf, alpha, pc == 0 ? beta : 1.0f, C + ic * ldc + jc, ldc);
      }
    }
  }
}

}  // namespace

// Threads split C into column (or row) stripes (gemm_stripes.h); each packs
// its own operands. ldc: row stride of C; packer: see gemm_pack_b (then B is
// unused). Column stripes are whole panels, so a packer's j0 stays aligned.
void gemm_avx2(Transpose ta, Transpose tb, int64_t M, int64_t N, int64_t K, float alpha,
               const float* A, const float* B, const GemmPackB* packer, float beta, float* C,
               int64_t ldc) {
  const Operand a = ta == Transpose::kNo ? Operand{A, K, 1} : Operand{A, 1, M};
  const Operand b = tb == Transpose::kNo ? Operand{B, N, 1} : Operand{B, 1, K};
  for_each_stripe(M, N, K, kPanel, kRowUnit, [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    PackBuffers& buf = pack_buffers();
    const Operand as{a.p + i0 * a.rs, a.rs, a.cs};
    const Operand bs{packer ? b.p : b.p + j0 * b.cs, b.rs, b.cs};
    gemm_serial(i1 - i0, j1 - j0, K, alpha, as, bs, packer, j0, beta, C + i0 * ldc + j0, ldc, buf.a, buf.b);
  });
}

bool cpu_has_avx2() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return has;
}

#else  // !STRATA_GEMM_AVX2

bool cpu_has_avx2() { return false; }

void gemm_avx2(Transpose, Transpose, int64_t, int64_t, int64_t, float, const float*, const float*,
               const GemmPackB*, float, float*, int64_t) {
  std::abort();  // unreachable: callers check cpu_has_avx2()
}

#endif  // STRATA_GEMM_AVX2

}  // namespace gemm_internal
}  // namespace strata
