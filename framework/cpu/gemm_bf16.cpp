// The AMX BF16 GEMM: see gemm_bf16.h.
#include "framework/cpu/gemm_bf16.h"

#include <cstdlib>
#include <cstring>
#include <memory>

#include "framework/cpu/cpu_isa.h"
#include "framework/cpu/gemm_avx512.h"  // transpose16
#include "framework/cpu/gemm_stripes.h"
#include "framework/error.h"
#include "framework/tensor.h"

#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
#define STRATA_GEMM_BF16 1
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace strata {

#ifdef STRATA_GEMM_BF16

// GCC 12 warns inside its own AVX-512 intrinsics (their deliberately
// undefined pass-through operand).
#pragma GCC diagnostic push
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace {

// Every function that uses the instructions carries one of these (see
// STRATA_AVX512 in gemm_avx512.h for why not a target pragma): the packers
// AVX-512 with its bf16 conversions, the kernel AMX.
#define STRATA_AVX512_BF16 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx512bf16,avx2,fma")))
#define STRATA_AMX_BF16 __attribute__((target("amx-tile,amx-bf16")))

// The kernel's block of C: 2 x 2 tiles of 16 x 16 f32 (tiles 0-3), from two
// A tiles of 16 rows x 16 k pairs (tiles 4-5) and two B tiles of 16 k pairs
// x 16 columns (tiles 6-7), each 64 bytes a row.
constexpr int kBlock = 32;
constexpr int kTileQ = 16;  // k pairs per tile
// Cache blocking: a packed B block (kKP x kNC words, 1 MiB) in L2, a packed A
// block (kMC x kKP words, 256 KiB) beside it.
constexpr int64_t kKP = 256;
constexpr int64_t kMC = 256;
constexpr int64_t kNC = 1024;

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t round_up(int64_t v, int64_t unit) { return (v + unit - 1) / unit * unit; }

// One operand as a [rows, cols] matrix: element (i, j) at p[i * rs + j * cs],
// stored as bf16 bits or as f32 (rounded as it is read).
struct View {
  const void* p;
  int64_t rs;
  int64_t cs;
  bool bf16;
  uint32_t bits(int64_t i, int64_t j) const {
    const int64_t at = i * rs + j * cs;
    return bf16 ? static_cast<const uint16_t*>(p)[at] : float_to_bf16(static_cast<const float*>(p)[at]);
  }
  // Elements (i, j) and (i, j + 1) as one word, the first in the low half;
  // the high half 0 when `has_second` is false (past K). For A transposed,
  // whose pairs lie in two rows of memory (the packers' vector paths take
  // the other layouts).
  uint32_t pair_along_cols(int64_t i, int64_t j, bool has_second) const {
    return bits(i, j) | (has_second ? bits(i, j + 1) << 16 : 0u);
  }
};

STRATA_AVX512_BF16 inline __mmask16 mask_first(int n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n > 0 ? n : 0)) - 1u);
}

// 32 values of one row (n valid, zero past them) as 32 bf16: bf16 loaded,
// f32 rounded to the nearest even.
STRATA_AVX512_BF16 inline __m512i row32(const View& v, const void* at, int n) {
  if (v.bf16) return _mm512_maskz_loadu_epi16(n >= 32 ? ~__mmask32{0} : (__mmask32{1} << (n > 0 ? n : 0)) - 1u, at);
  const float* f = static_cast<const float*>(at);
  const __m512 lo = _mm512_maskz_loadu_ps(mask_first(n), f);
  const __m512 hi = _mm512_maskz_loadu_ps(mask_first(n - 16), f + 16);
  return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

// Packs op(B)[k0 : k0 + kc, j0 : j0 + nc] into panels of 32 columns,
// [nc / 32][kpp][32] words (word = k pair 2q, 2q + 1 of one column; AMX's
// layout for B), zero past K (up to kpp pairs, a multiple of kTileQ) and
// past the last column.
STRATA_AVX512_BF16 void pack_b(const View& B, int64_t k0, int64_t kc, int64_t j0, int64_t nc, int64_t kpp,
                               uint32_t* dst) {
  const int64_t kp = (kc + 1) / 2;
  const size_t elem = B.bf16 ? 2 : 4;
  const char* base = static_cast<const char*>(B.p);
  for (int64_t jr = 0; jr < nc; jr += kBlock) {
    const int nv = static_cast<int>(min64(kBlock, nc - jr));
    if (B.cs == 1) {
      // Rows of op(B) are contiguous: interleave rows k and k + 1 into words.
      const __m512i lo_idx = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38,
                                              6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
      const __m512i hi_idx = _mm512_set_epi16(63, 31, 62, 30, 61, 29, 60, 28, 59, 27, 58, 26, 57, 25, 56, 24, 55, 23,
                                              54, 22, 53, 21, 52, 20, 51, 19, 50, 18, 49, 17, 48, 16);
      for (int64_t q = 0; q < kp; ++q) {
        const int64_t k = k0 + 2 * q;
        const __m512i a = row32(B, base + static_cast<size_t>(k * B.rs + j0 + jr) * elem, nv);
        const __m512i b = 2 * q + 1 < kc ? row32(B, base + static_cast<size_t>((k + 1) * B.rs + j0 + jr) * elem, nv)
                                         : _mm512_setzero_si512();
        _mm512_store_si512(dst + q * kBlock, _mm512_permutex2var_epi16(a, lo_idx, b));
        _mm512_store_si512(dst + q * kBlock + 16, _mm512_permutex2var_epi16(a, hi_idx, b));
      }
    } else {
      // Columns of op(B) are contiguous along k: each holds its pairs as
      // words; transpose 16 columns x 16 words at a time.
      for (int64_t qb = 0; qb < kp; qb += 16) {
        const int qv = static_cast<int>(min64(16, kp - qb));
        const int kv = static_cast<int>(min64(32, kc - 2 * qb));
        for (int h = 0; h < 2; ++h) {
          __m512 r[16];
          for (int i = 0; i < 16; ++i) {
            const int col = h * 16 + i;
            r[i] = col < nv ? (__m512)row32(B, base + static_cast<size_t>((j0 + jr + col) * B.cs + k0 + 2 * qb) * elem,
                                            kv)
                            : _mm512_setzero_ps();
          }
          gemm_internal::transpose16(r);
          for (int t = 0; t < qv; ++t) _mm512_store_ps(reinterpret_cast<float*>(dst + (qb + t) * kBlock + h * 16), r[t]);
        }
      }
    }
    std::memset(dst + kp * kBlock, 0, sizeof(uint32_t) * static_cast<size_t>((kpp - kp) * kBlock));
    dst += kpp * kBlock;
  }
}

// Packs op(A)[i0 : i0 + mc, k0 : k0 + kc] as rows of kpp words (AMX's layout
// for A), mcp rows (a multiple of kBlock), zero past K and past mc.
STRATA_AVX512_BF16 void pack_a(const View& A, int64_t i0, int64_t mc, int64_t mcp, int64_t k0, int64_t kc,
                               int64_t kpp, uint32_t* dst) {
  const int64_t kp = (kc + 1) / 2;
  const size_t elem = A.bf16 ? 2 : 4;
  const char* base = static_cast<const char*>(A.p);
  for (int64_t r = 0; r < mc; ++r) {
    uint32_t* out = dst + r * kpp;
    if (A.cs == 1) {
      // A row is contiguous along k: its pairs are words, 16 at a time.
      const char* row = base + static_cast<size_t>((i0 + r) * A.rs + k0) * elem;
      for (int64_t qb = 0; qb < kp; qb += 16) {
        const int kv = static_cast<int>(min64(32, kc - 2 * qb));
        _mm512_store_si512(out + qb, row32(A, row + static_cast<size_t>(2 * qb) * elem, kv));
      }
      const int64_t written = round_up(kp, 16);
      std::memset(out + written, 0, sizeof(uint32_t) * static_cast<size_t>(kpp - written));
    } else {
      for (int64_t q = 0; q < kp; ++q) out[q] = A.pair_along_cols(i0 + r, k0 + 2 * q, 2 * q + 1 < kc);
      std::memset(out + kp, 0, sizeof(uint32_t) * static_cast<size_t>(kpp - kp));
    }
  }
  std::memset(dst + mc * kpp, 0, sizeof(uint32_t) * static_cast<size_t>((mcp - mc) * kpp));
}

// The tile registers' shapes, set on the calling thread (AMX state is per thread).
STRATA_AMX_BF16 void configure_tiles() {
  struct alignas(64) Config {
    uint8_t palette = 1;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
  } config;
  for (int t = 0; t < 8; ++t) {
    config.colsb[t] = 64;
    config.rows[t] = 16;
  }
  _tile_loadconfig(&config);
}

STRATA_AMX_BF16 void release_tiles() { _tile_release(); }

// acc [32][32] f32 = A rows [32][kpp words] (row stride kpp) times B panel
// [kpp][32 words]; kpp a multiple of kTileQ.
STRATA_AMX_BF16 void amx_block(int64_t kpp, const uint32_t* a, const uint32_t* b, float* acc) {
  const int64_t a_stride = kpp * 4;
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t q = 0; q < kpp; q += kTileQ) {
    _tile_loadd(4, a + q, a_stride);
    _tile_loadd(5, a + 16 * kpp + q, a_stride);
    _tile_loadd(6, b + q * kBlock, kBlock * 4);
    _tile_loadd(7, b + q * kBlock + 16, kBlock * 4);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, acc, kBlock * 4);
  _tile_stored(1, acc + 16, kBlock * 4);
  _tile_stored(2, acc + 16 * kBlock, kBlock * 4);
  _tile_stored(3, acc + 16 * kBlock + 16, kBlock * 4);
}

// C[rows x nv] = alpha * acc + beta * C (beta == 0 never reads C).
STRATA_AVX512_BF16 void store_block(const float* acc, int rows, int nv, float alpha, float beta, float* c,
                                    int64_t ldc) {
  const __m512 va = _mm512_set1_ps(alpha);
  const __m512 vb = _mm512_set1_ps(beta);
  const __mmask16 m0 = mask_first(nv), m1 = mask_first(nv - 16);
  for (int r = 0; r < rows; ++r) {
    float* cr = c + r * ldc;
    __m512 v0 = _mm512_mul_ps(_mm512_load_ps(acc + r * kBlock), va);
    __m512 v1 = _mm512_mul_ps(_mm512_load_ps(acc + r * kBlock + 16), va);
    if (beta != 0.0f) {
      v0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m0, cr), vb, v0);
      v1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m1, cr + 16), vb, v1);
    }
    _mm512_mask_storeu_ps(cr, m0, v0);
    _mm512_mask_storeu_ps(cr + 16, m1, v1);
  }
}

// 64-byte aligned arrays (the packers' aligned stores, the tiles' loads).
struct AlignedFree {
  void operator()(void* p) const { aligned_free(p); }
};
template <class T>
std::unique_ptr<T[], AlignedFree> aligned_array(size_t n) {
  return std::unique_ptr<T[], AlignedFree>(static_cast<T*>(aligned_alloc_bytes(sizeof(T) * n)));
}

// Each thread's packed operands and accumulator block, kept between calls.
struct PackBuffers {
  std::unique_ptr<uint32_t[], AlignedFree> a = aligned_array<uint32_t>(kMC * kKP);
  std::unique_ptr<uint32_t[], AlignedFree> b = aligned_array<uint32_t>(kNC * kKP);
  std::unique_ptr<float[], AlignedFree> acc = aligned_array<float>(kBlock * kBlock);
};

// One stripe of C on this thread.
void gemm_serial(int64_t M, int64_t N, int64_t K, float alpha, const View& A, const View& B, float beta, float* C,
                 int64_t ldc, PackBuffers& buf) {
  configure_tiles();
  for (int64_t jc = 0; jc < N; jc += kNC) {
    const int64_t nc = min64(kNC, N - jc);
    for (int64_t pc = 0; pc < K; pc += 2 * kKP) {
      const int64_t kc = min64(2 * kKP, K - pc);
      const int64_t kpp = round_up((kc + 1) / 2, kTileQ);
      const float beta_k = pc == 0 ? beta : 1.0f;
      pack_b(B, pc, kc, jc, nc, kpp, buf.b.get());
      for (int64_t ic = 0; ic < M; ic += kMC) {
        const int64_t mc = min64(kMC, M - ic);
        const int64_t mcp = round_up(mc, kBlock);
        pack_a(A, ic, mc, mcp, pc, kc, kpp, buf.a.get());
        for (int64_t jr = 0; jr < nc; jr += kBlock) {
          const int nv = static_cast<int>(min64(kBlock, nc - jr));
          for (int64_t ir = 0; ir < mcp; ir += kBlock) {
            amx_block(kpp, buf.a.get() + ir * kpp, buf.b.get() + jr * kpp, buf.acc.get());
            store_block(buf.acc.get(), static_cast<int>(min64(kBlock, mc - ir)), nv, alpha, beta_k,
                        C + (ic + ir) * ldc + jc + jr, ldc);
          }
        }
      }
    }
  }
  release_tiles();
}

// AMX BF16 and tiles, and the AVX-512 the packers use, in this CPU; and the
// kernel's permission to use the tile registers (Linux asks processes to
// request it: arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA).
bool cpu_runs_amx_bf16() {
  static const bool runs = [] {
    __builtin_cpu_init();
    if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
          __builtin_cpu_supports("avx512bf16"))) {
      return false;
    }
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    const bool amx_bf16 = (edx >> 22) & 1u, amx_tile = (edx >> 24) & 1u;
    if (!amx_bf16 || !amx_tile) return false;
    constexpr long kArchReqXcompPerm = 0x1023;
    constexpr long kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return runs;
}

}  // namespace

bool gemm_bf16_available() { return cpu_runs_amx_bf16() && cpu_isa() == CpuIsa::kAvx512; }

void gemm_bf16(Transpose ta, Transpose tb, int64_t M, int64_t N, int64_t K, float alpha, const void* A,
               DType a_dtype, const void* B, DType b_dtype, float beta, float* C, int64_t ldc) {
  STRATA_CHECK(gemm_bf16_available(), "gemm_bf16 without AMX BF16 on the AVX-512 path");
  const auto allowed = [](DType d) { return d == DType::kBF16 || d == DType::kF32; };
  STRATA_CHECK(allowed(a_dtype) && allowed(b_dtype), "gemm_bf16: operands in bf16 or f32, got ", dtype_name(a_dtype),
               " and ", dtype_name(b_dtype));
  const View a = ta == Transpose::kNo ? View{A, K, 1, a_dtype == DType::kBF16} : View{A, 1, M, a_dtype == DType::kBF16};
  const View b = tb == Transpose::kNo ? View{B, N, 1, b_dtype == DType::kBF16} : View{B, 1, K, b_dtype == DType::kBF16};
  const size_t a_elem = dtype_size(a_dtype), b_elem = dtype_size(b_dtype);
  gemm_internal::for_each_stripe(M, N, K, kBlock, kBlock, [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    const View as{static_cast<const char*>(a.p) + static_cast<size_t>(i0 * a.rs) * a_elem, a.rs, a.cs, a.bf16};
    const View bs{static_cast<const char*>(b.p) + static_cast<size_t>(j0 * b.cs) * b_elem, b.rs, b.cs, b.bf16};
    thread_local PackBuffers buffers;
    gemm_serial(i1 - i0, j1 - j0, K, alpha, as, bs, beta, C + i0 * ldc + j0, ldc, buffers);
  });
}

#pragma GCC diagnostic pop

#else  // !STRATA_GEMM_BF16

bool gemm_bf16_available() { return false; }

void gemm_bf16(Transpose, Transpose, int64_t, int64_t, int64_t, float, const void*, DType, const void*, DType, float,
               float*, int64_t) {
  std::abort();  // unreachable: callers check gemm_bf16_available()
}

#endif  // STRATA_GEMM_BF16

}  // namespace strata
