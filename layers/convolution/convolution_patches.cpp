// Patch packing for the Convolution layer (see convolution_patches.h); the
// layer's own members on that path are in layers/convolution/convolution_patch_path.cpp.
#include "layers/convolution/convolution_patches.h"

#include "framework/cpu/cpu_isa.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "framework/error.h"
#include "framework/cpu/gemm_avx512.h"
#include "framework/cpu/math.h"

#ifdef STRATA_CONV_PATCHES
#include <immintrin.h>
#define STRATA_CONV_AVX512 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")))
#endif

namespace strata {
namespace conv_patches {

#ifdef STRATA_CONV_PATCHES
namespace {
STRATA_CONV_AVX512 float sum_avx512(const float* p, int64_t n);
}  // namespace
#endif

bool use_avx512() {
#ifdef STRATA_CONV_PATCHES
  return cpu_isa() == CpuIsa::kAvx512;
#else
  return false;
#endif
}
// Sum of n floats: a plain loop is one long dependency chain (the compiler
// may not reorder float additions), so use independent partial sums.
float row_sum(const float* p, int64_t n) {
#ifdef STRATA_CONV_PATCHES
  if (use_avx512()) return sum_avx512(p, n);
#endif
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int u = 0; u < 8; ++u) acc[u] += p[j + u];
  }
  for (; j < n; ++j) acc[0] += p[j];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

#ifdef STRATA_CONV_PATCHES

// GCC 12 warns inside its own AVX-512 intrinsics (their deliberately
// undefined pass-through operand).
#pragma GCC diagnostic push
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace {

using gemm_internal::transpose16;

// Pixels [lane, lane + len) of a panel that lie on one output row; `base` is
// the offset of the first one's window origin, minus lane (stride 1), so that
// lane l of a load at base + row_offset reads pixel l's value.
struct Segment {
  int64_t base;
  uint32_t mask;  // lanes [lane, lane + len)
  int lane, len;
};

// Bits [lo, hi) of a 32-bit lane mask (0 <= lo <= hi <= 32).
inline uint32_t lane_bits(int lo, int hi) {
  const uint32_t upto = hi >= 32 ? 0xFFFFFFFFu : (1u << hi) - 1u;
  return upto & ~((1u << lo) - 1u);
}

// Appends the row segments of pixels [j, j + count) to `out`.
void split_rows(const PatchGeometry& g, int64_t j, int count, std::vector<Segment>& out) {
  const int64_t hw = g.out_h * g.out_w;
  int lane = 0;
  while (lane < count) {
    const int64_t img = j / hw;
    const int64_t r = j % hw;
    const int64_t oh = r / g.out_w;
    const int64_t ow = r % g.out_w;
    const int len = static_cast<int>(g.out_w - ow < count - lane ? g.out_w - ow : count - lane);
    const int64_t origin = img * g.image_stride + oh * g.sh * g.width + ow * g.sw;
    out.push_back(Segment{g.sw == 1 ? origin - lane : origin, lane_bits(lane, lane + len), lane, len});
    j += len;
    lane += len;
  }
}

// Fills lanes of v0 (0-15) and v1 (16-31) from one segment at row offset `off`.
STRATA_CONV_AVX512 inline void load_segment(const PatchGeometry& g, const Segment& sg, int64_t off, __m512& v0,
                                            __m512& v1) {
  const float* p = g.x + sg.base + off;
  if (g.sw == 1) {
    if (sg.mask & 0xFFFFu) v0 = _mm512_mask_loadu_ps(v0, static_cast<__mmask16>(sg.mask), p);
    if (sg.mask >> 16) v1 = _mm512_mask_loadu_ps(v1, static_cast<__mmask16>(sg.mask >> 16), p + 16);
    return;
  }
  alignas(64) float tmp[32];
  _mm512_store_ps(tmp, v0);
  _mm512_store_ps(tmp + 16, v1);
  for (int l = 0; l < sg.len; ++l) tmp[sg.lane + l] = p[l * g.sw];
  v0 = _mm512_load_ps(tmp);
  v1 = _mm512_load_ps(tmp + 16);
}

// op(B)[k][j] = patch row k of pixel j (forward, and the stride-1 input
// gradient): panels of 32 pixels; panel p's segments are seg[first[p] ..
// first[p + 1]), off[k] the row offsets. Masked loads merge the segments
// into two registers (masked stores are slow on some AVX-512 CPUs).
STRATA_CONV_AVX512 void pack_across_avx512(const PatchGeometry& g, int64_t kc, int64_t panels,
                                           const Segment* seg, const int* first, const int64_t* off,
                                           float* dst) {
  for (int64_t p = 0; p < panels; ++p) {
    const Segment* s0 = seg + first[p];
    const Segment* s1 = seg + first[p + 1];
    for (int64_t k = 0; k < kc; ++k, dst += kGemmPanel) {
      __m512 v0 = _mm512_setzero_ps();
      __m512 v1 = _mm512_setzero_ps();
      for (const Segment* sg = s0; sg < s1; ++sg) load_segment(g, *sg, off[k], v0, v1);
      _mm512_store_ps(dst, v0);
      _mm512_store_ps(dst + 16, v1);
    }
  }
}

// op(B)[k][j] = patch row j of pixel k (the weight-gradient operand, the
// transpose of the above): panels of 32 patch rows (offsets off[j], -1 past
// the end), built 16 pixels x 16 rows at a time: block b's segments are
// seg[first[b] .. first[b + 1]).
STRATA_CONV_AVX512 void pack_down_avx512(const PatchGeometry& g, int64_t kc, int64_t panels, const Segment* seg,
                                         const int* first, const int64_t* off, float* dst) {
  const int64_t blocks = (kc + 15) / 16;
  for (int64_t p = 0; p < panels; ++p, dst += kc * kGemmPanel) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int kv = static_cast<int>(kc - 16 * b < 16 ? kc - 16 * b : 16);
      const Segment* s0 = seg + first[b];
      const Segment* s1 = seg + first[b + 1];
      for (int h = 0; h < 2; ++h) {
        __m512 r[16];
        for (int i = 0; i < 16; ++i) {
          const int64_t o = off[p * kGemmPanel + 16 * h + i];
          __m512 v = _mm512_setzero_ps();
          __m512 unused = _mm512_setzero_ps();
          if (o >= 0) {
            for (const Segment* sg = s0; sg < s1; ++sg) load_segment(g, *sg, o, v, unused);
          }
          r[i] = v;
        }
        transpose16(r);
        for (int t = 0; t < kv; ++t) _mm512_store_ps(dst + (16 * b + t) * kGemmPanel + 16 * h, r[t]);
      }
    }
  }
}

STRATA_CONV_AVX512 float sum_avx512(const float* p, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 64 <= n; j += 64) {
    a0 = _mm512_add_ps(a0, _mm512_loadu_ps(p + j));
    a1 = _mm512_add_ps(a1, _mm512_loadu_ps(p + j + 16));
    a2 = _mm512_add_ps(a2, _mm512_loadu_ps(p + j + 32));
    a3 = _mm512_add_ps(a3, _mm512_loadu_ps(p + j + 48));
  }
  for (; j < n; j += 16) {
    const __mmask16 m = static_cast<__mmask16>(lane_bits(0, n - j < 16 ? static_cast<int>(n - j) : 16));
    a0 = _mm512_add_ps(a0, _mm512_maskz_loadu_ps(m, p + j));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

// Per-thread tables for the packers, reused: no allocation once grown.
struct PackTables {
  std::vector<Segment> seg;
  std::vector<int> first;
  std::vector<int64_t> off;
};

PackTables& pack_tables() {
  thread_local PackTables t;
  return t;
}

}  // namespace

void pack_patches_across(const PatchGeometry& g, int64_t k0, int64_t kc, int64_t j0, int64_t nc, float* dst) {
  PackTables& t = pack_tables();
  const int64_t panels = (nc + kGemmPanel - 1) / kGemmPanel;
  t.seg.clear();
  t.first.resize(static_cast<size_t>(panels + 1));
  for (int64_t p = 0; p < panels; ++p) {
    t.first[p] = static_cast<int>(t.seg.size());
    const int64_t count = nc - p * kGemmPanel < kGemmPanel ? nc - p * kGemmPanel : kGemmPanel;
    split_rows(g, j0 + p * kGemmPanel, static_cast<int>(count), t.seg);
  }
  t.first[panels] = static_cast<int>(t.seg.size());
  t.off.resize(static_cast<size_t>(kc));
  for (int64_t k = 0; k < kc; ++k) t.off[k] = g.row_offset(k0 + k);
  pack_across_avx512(g, kc, panels, t.seg.data(), t.first.data(), t.off.data(), dst);
}

void pack_patches_down(const PatchGeometry& g, int64_t k0, int64_t kc, int64_t j0, int64_t nc, float* dst) {
  PackTables& t = pack_tables();
  const int64_t panels = (nc + kGemmPanel - 1) / kGemmPanel;
  const int64_t blocks = (kc + 15) / 16;
  t.seg.clear();
  t.first.resize(static_cast<size_t>(blocks + 1));
  for (int64_t b = 0; b < blocks; ++b) {
    t.first[b] = static_cast<int>(t.seg.size());
    const int64_t count = kc - 16 * b < 16 ? kc - 16 * b : 16;
    split_rows(g, k0 + 16 * b, static_cast<int>(count), t.seg);
  }
  t.first[blocks] = static_cast<int>(t.seg.size());
  t.off.resize(static_cast<size_t>(panels * kGemmPanel));
  for (int64_t j = 0; j < panels * kGemmPanel; ++j) t.off[j] = j < nc ? g.row_offset(j0 + j) : -1;
  pack_down_avx512(g, kc, panels, t.seg.data(), t.first.data(), t.off.data(), dst);
}

#pragma GCC diagnostic pop

#endif  // STRATA_CONV_PATCHES

}  // namespace conv_patches

}  // namespace strata
