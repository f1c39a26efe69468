// The fused attention kernels themselves (multi_head_attention_flash.h),
// in the CUDA dialect that both nvcc and tests/flash_attention_emulation_test.cpp
// compile: the test runs these very kernels on the CPU, each block's 128
// threads as threads with barriers, WMMA as plain 16x16 products, against a
// reference in double, so that their indexing and their algebra are checked
// in CI without a GPU. Whoever includes this file outside nvcc defines the
// names below first (the test's emulation); nvcc gets them here.
//
// Each block has four warps; a warp owns 16 rows of its block's tile and
// does every product and every per-row step for them, so the warps of a
// block share only the tiles of the other side (K and V forward; Q and dO,
// or K and V, backward), loaded by the whole block between two
// __syncthreads(). Tiles live in shared memory with the head dimension
// padded with zeros to a multiple of 16, rows past T zeroed; the products
// are WMMA 16x16x16 tiles (16-bit operands, f32 accumulators).
#pragma once

#include <cstddef>
#include <cstdint>

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <cmath>

#include "framework/cuda/elements.cuh"
#include "framework/cuda/math.h"  // STRATA_CUDA_LOOP
// The kernels' bodies exist for compute capability 8.0+ (bf16 WMMA); the
// host asks flash_attention::unavailable() before it launches them.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define STRATA_FLASH_DEVICE_CODE 1
#else
#define STRATA_FLASH_DEVICE_CODE 0
#endif
#define STRATA_FLASH_SHARED(name) extern __shared__ __align__(128) unsigned char name[]
#define STRATA_FLASH_BOUNDS(threads) __launch_bounds__(threads)
#endif

// Internal linkage: the test's emulated build of these kernels and the
// CUDA one must not meet at link time.
namespace strata::flash_attention::kernels {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = kWarps * 16;  // the rows a block owns: queries (forward, dQ) or keys (dK dV)
constexpr int kCols = 64;           // forward: keys per step
constexpr int kBackCols = 32;       // backward: the other side's rows per step

inline int padded(int64_t dh) { return static_cast<int>((dh + 15) / 16 * 16); }

// Shared memory of each kernel, in bytes, for padded head dim `dhp` and 16-bit elements.
inline size_t forward_bytes(int dhp) {
  return 2 * (static_cast<size_t>(kRows) * dhp + 2 * kCols * dhp + kRows * kCols) +
         4 * (static_cast<size_t>(kRows) * kCols + kRows * dhp);
}
inline size_t backward_kv_bytes(int dhp) {
  return 2 * (2 * static_cast<size_t>(kRows) * dhp + 2 * kBackCols * dhp + 2 * kRows * kBackCols) +
         4 * (2 * static_cast<size_t>(kRows) * kBackCols + 2 * kRows * dhp + 2 * kBackCols);
}
inline size_t backward_q_bytes(int dhp) {
  return 2 * (2 * static_cast<size_t>(kRows) * dhp + 2 * kBackCols * dhp + kRows * kBackCols) +
         4 * (2 * static_cast<size_t>(kRows) * kBackCols + kRows * dhp);
}

// Carves consecutive arrays out of dynamic shared memory; every size above is
// a multiple of 32 bytes (dhp of 16, tiles of 16 rows), so each array stays
// 32-byte aligned as WMMA's loads and stores want.
struct SharedCarver {
  unsigned char* at;
  template <class T>
  __device__ T* take(int count) {
    T* p = reinterpret_cast<T*>(at);
    at += static_cast<size_t>(count) * sizeof(T);
    return p;
  }
};

// dst [rows][dhp] from `valid` rows of src (row stride dh), zero past them and past dh.
template <class E>
__device__ void load_tile(E* dst, const E* src, int valid, int rows, int dh, int dhp) {
  for (int i = threadIdx.x; i < rows * dhp; i += blockDim.x) {
    const int r = i / dhp, c = i - r * dhp;
    dst[i] = (r < valid && c < dh) ? src[static_cast<int64_t>(r) * dh + c] : cuda::store_element<E>(0.0f);
  }
}

__device__ inline void zero(float* p, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) p[i] = 0.0f;
}

template <class E>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, E, wmma::row_major>;
template <class E>
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, E, wmma::row_major>;
template <class E>
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, E, wmma::col_major>;
using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// out [16][cols] (f32, row stride cols) = a [16][dhp] b^T, b [cols][dhp]:
// 16 rows of a tile against `cols` rows of another, over the head dim.
template <class E>
__device__ void rows_times_rows(const E* a, const E* b, int cols, int dhp, float* out) {
  for (int c = 0; c < cols / 16; ++c) {
    Acc acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int kk = 0; kk < dhp / 16; ++kk) {
      FragA<E> fa;
      FragBCol<E> fb;  // b^T: element (k, n) at b[n * dhp + k]
      wmma::load_matrix_sync(fa, a + kk * 16, dhp);
      wmma::load_matrix_sync(fb, b + c * 16 * dhp + kk * 16, dhp);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(out + c * 16, acc, cols, wmma::mem_row_major);
  }
}

// acc [16][dhp] (f32, row stride dhp) += p [16][inner] b, b [inner][dhp].
template <class E>
__device__ void accumulate_product(const E* p, int inner, const E* b, int dhp, float* acc_rows) {
  for (int c = 0; c < dhp / 16; ++c) {
    Acc acc;
    wmma::load_matrix_sync(acc, acc_rows + c * 16, dhp, wmma::mem_row_major);
    for (int kk = 0; kk < inner / 16; ++kk) {
      FragA<E> fa;
      FragBRow<E> fb;
      wmma::load_matrix_sync(fa, p + kk * 16, inner);
      wmma::load_matrix_sync(fb, b + kk * 16 * dhp + c * 16, dhp);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(acc_rows + c * 16, acc, dhp, wmma::mem_row_major);
  }
}

// Where a thread works: its block's item (sample, head) and first row (of
// the queries or keys the block owns), the item's first element, its warp's
// 16 rows from r0, and the row whose per-row steps it shares with one other
// lane (lanes 2r and 2r + 1), `half` telling the two apart.
struct Place {
  int64_t item, base;
  int first, r0, row, half;
};

__device__ inline Place place_of(int t, int dh) {
  Place p;
  p.item = blockIdx.x;
  p.first = static_cast<int>(blockIdx.y) * kRows;
  p.base = p.item * t * dh;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  p.r0 = warp * 16;
  p.row = p.r0 + lane / 2;
  p.half = lane % 2;
  return p;
}

// One block per (item, 64 queries). Lanes 2r and 2r + 1 of a warp share its
// row r's softmax, each over half the columns.
template <class E>
__global__ void STRATA_FLASH_BOUNDS(kThreads) forward_kernel(int t, int dh, int dhp, float scale, const E* q,
                                                           const E* k, const E* v, E* o, float* lse) {
#if STRATA_FLASH_DEVICE_CODE
  STRATA_FLASH_SHARED(smem);
  SharedCarver carve{smem};
  E* qs = carve.take<E>(kRows * dhp);
  E* ks = carve.take<E>(kCols * dhp);
  E* vs = carve.take<E>(kCols * dhp);
  E* ps = carve.take<E>(kRows * kCols);
  float* ss = carve.take<float>(kRows * kCols);
  float* os = carve.take<float>(kRows * dhp);

  const Place place = place_of(t, dh);
  const int64_t item = place.item, base = place.base;
  const int q0 = place.first, r0 = place.r0, row = place.row, half = place.half;

  load_tile(qs, q + base + static_cast<int64_t>(q0) * dh, min(kRows, t - q0), kRows, dh, dhp);
  zero(os, kRows * dhp);
  float m = -INFINITY, l = 0.0f;
  for (int k0 = 0; k0 < t; k0 += kCols) {
    __syncthreads();  // every warp is done with the previous K and V
    const int kv = min(kCols, t - k0);
    load_tile(ks, k + base + static_cast<int64_t>(k0) * dh, kv, kCols, dh, dhp);
    load_tile(vs, v + base + static_cast<int64_t>(k0) * dh, kv, kCols, dh, dhp);
    __syncthreads();

    rows_times_rows(qs + r0 * dhp, ks, kCols, dhp, ss + r0 * kCols);
    __syncwarp();
    // The running maximum and sum over the keys so far; P rounded as it is stored.
    float* srow = ss + row * kCols;
    E* prow = ps + row * kCols;
    const int j0 = half * (kCols / 2), j1 = j0 + kCols / 2;
    float mx = -INFINITY;
    for (int j = j0; j < j1; ++j) {
      if (j < kv) mx = fmaxf(mx, srow[j] * scale);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float m_new = fmaxf(m, mx);
    float sum = 0.0f;
    for (int j = j0; j < j1; ++j) {
      const float p = j < kv ? expf(srow[j] * scale - m_new) : 0.0f;
      prow[j] = cuda::store_element<E>(p);
      sum += p;
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    const float rescale = expf(m - m_new);  // 0 at the first block (m = -inf)
    l = l * rescale + sum;
    m = m_new;
    float* orow = os + row * dhp;
    for (int d = half; d < dhp; d += 2) orow[d] *= rescale;
    __syncwarp();

    accumulate_product(ps + r0 * kCols, kCols, vs, dhp, os + r0 * dhp);
    __syncwarp();
  }
  const int qi = q0 + row;
  if (qi < t) {
    const float* orow = os + row * dhp;
    for (int d = half; d < dh; d += 2) o[base + static_cast<int64_t>(qi) * dh + d] = cuda::store_element<E>(orow[d] / l);
    if (half == 0) lse[item * t + qi] = m + logf(l);
  }
#endif
}

template <class E>
__global__ void row_dots_kernel(int64_t n, int64_t t, int64_t heads, int64_t dh, const E* o, const E* dout,
                                float* dots) {
  STRATA_CUDA_LOOP(r, n * heads * t) {  // r = (sample * heads + head) * t + i
    const int64_t i = r % t, item = r / t;
    const int64_t s = item / heads, h = item % heads;
    const E* orow = o + (s * t + i) * heads * dh + h * dh;
    const E* grow = dout + r * dh;
    float sum = 0.0f;
    for (int64_t d = 0; d < dh; ++d) sum += cuda::load_element(orow[d]) * cuda::load_element(grow[d]);
    dots[r] = sum;
  }
}

// One block per (item, 64 keys): dV = sum over queries of P^T dO, dK = scale
// sum of dS^T Q, the queries 32 at a time. A warp's 16 key rows against the
// 32 queries: S^T = K Q^T and dP^T = V dO^T, then per element (lanes 2r and
// 2r + 1 share row r, 16 queries each) P^T = exp(scale S^T - lse) and
// dS^T = P^T (dP^T - dots).
template <class E>
__global__ void STRATA_FLASH_BOUNDS(kThreads) backward_kv_kernel(int t, int dh, int dhp, float scale, const E* q,
                                                               const E* k, const E* v, const E* dout,
                                                               const float* lse, const float* dots, E* dk, E* dv) {
#if STRATA_FLASH_DEVICE_CODE
  STRATA_FLASH_SHARED(smem);
  SharedCarver carve{smem};
  E* ks = carve.take<E>(kRows * dhp);
  E* vs = carve.take<E>(kRows * dhp);
  E* qs = carve.take<E>(kBackCols * dhp);
  E* gs = carve.take<E>(kBackCols * dhp);  // dO
  E* ps = carve.take<E>(kRows * kBackCols);
  E* dss = carve.take<E>(kRows * kBackCols);
  float* sf = carve.take<float>(kRows * kBackCols);
  float* dpf = carve.take<float>(kRows * kBackCols);
  float* dks = carve.take<float>(kRows * dhp);
  float* dvs = carve.take<float>(kRows * dhp);
  float* ls = carve.take<float>(kBackCols);
  float* ds = carve.take<float>(kBackCols);

  const Place place = place_of(t, dh);
  const int64_t item = place.item, base = place.base;
  const int k0 = place.first, r0 = place.r0, row = place.row, half = place.half;

  load_tile(ks, k + base + static_cast<int64_t>(k0) * dh, min(kRows, t - k0), kRows, dh, dhp);
  load_tile(vs, v + base + static_cast<int64_t>(k0) * dh, min(kRows, t - k0), kRows, dh, dhp);
  zero(dks, kRows * dhp);
  zero(dvs, kRows * dhp);
  for (int q0 = 0; q0 < t; q0 += kBackCols) {
    __syncthreads();  // every warp is done with the previous queries
    const int nq = min(kBackCols, t - q0);
    load_tile(qs, q + base + static_cast<int64_t>(q0) * dh, nq, kBackCols, dh, dhp);
    load_tile(gs, dout + base + static_cast<int64_t>(q0) * dh, nq, kBackCols, dh, dhp);
    for (int j = threadIdx.x; j < kBackCols; j += blockDim.x) {
      ls[j] = j < nq ? lse[item * t + q0 + j] : 0.0f;
      ds[j] = j < nq ? dots[item * t + q0 + j] : 0.0f;
    }
    __syncthreads();

    rows_times_rows(ks + r0 * dhp, qs, kBackCols, dhp, sf + r0 * kBackCols);
    rows_times_rows(vs + r0 * dhp, gs, kBackCols, dhp, dpf + r0 * kBackCols);
    __syncwarp();
    const int j0 = half * (kBackCols / 2), j1 = j0 + kBackCols / 2;
    for (int j = j0; j < j1; ++j) {
      const int at = row * kBackCols + j;
      const float p = j < nq ? expf(sf[at] * scale - ls[j]) : 0.0f;
      ps[at] = cuda::store_element<E>(p);
      dss[at] = cuda::store_element<E>(p * (dpf[at] - ds[j]));
    }
    __syncwarp();
    accumulate_product(ps + r0 * kBackCols, kBackCols, gs, dhp, dvs + r0 * dhp);
    accumulate_product(dss + r0 * kBackCols, kBackCols, qs, dhp, dks + r0 * dhp);
    __syncwarp();
  }
  const int ki = k0 + row;
  if (ki < t) {
    const int64_t at = base + static_cast<int64_t>(ki) * dh;
    for (int d = half; d < dh; d += 2) {
      dk[at + d] = cuda::store_element<E>(scale * dks[row * dhp + d]);
      dv[at + d] = cuda::store_element<E>(dvs[row * dhp + d]);
    }
  }
#endif
}

// One block per (item, 64 queries): dQ = scale sum over keys of dS K, the
// keys 32 at a time, S = Q K^T and dP = dO V^T for the warp's 16 queries.
template <class E>
__global__ void STRATA_FLASH_BOUNDS(kThreads) backward_q_kernel(int t, int dh, int dhp, float scale, const E* q,
                                                              const E* k, const E* v, const E* dout,
                                                              const float* lse, const float* dots, E* dq) {
#if STRATA_FLASH_DEVICE_CODE
  STRATA_FLASH_SHARED(smem);
  SharedCarver carve{smem};
  E* qs = carve.take<E>(kRows * dhp);
  E* gs = carve.take<E>(kRows * dhp);  // dO
  E* ks = carve.take<E>(kBackCols * dhp);
  E* vs = carve.take<E>(kBackCols * dhp);
  E* dss = carve.take<E>(kRows * kBackCols);
  float* sf = carve.take<float>(kRows * kBackCols);
  float* dpf = carve.take<float>(kRows * kBackCols);
  float* dqs = carve.take<float>(kRows * dhp);

  const Place place = place_of(t, dh);
  const int64_t item = place.item, base = place.base;
  const int q0 = place.first, r0 = place.r0, row = place.row, half = place.half;
  const int qi = q0 + row;
  const float row_lse = qi < t ? lse[item * t + qi] : 0.0f;
  const float row_dot = qi < t ? dots[item * t + qi] : 0.0f;

  load_tile(qs, q + base + static_cast<int64_t>(q0) * dh, min(kRows, t - q0), kRows, dh, dhp);
  load_tile(gs, dout + base + static_cast<int64_t>(q0) * dh, min(kRows, t - q0), kRows, dh, dhp);
  zero(dqs, kRows * dhp);
  for (int k0 = 0; k0 < t; k0 += kBackCols) {
    __syncthreads();  // every warp is done with the previous keys
    const int nk = min(kBackCols, t - k0);
    load_tile(ks, k + base + static_cast<int64_t>(k0) * dh, nk, kBackCols, dh, dhp);
    load_tile(vs, v + base + static_cast<int64_t>(k0) * dh, nk, kBackCols, dh, dhp);
    __syncthreads();

    rows_times_rows(qs + r0 * dhp, ks, kBackCols, dhp, sf + r0 * kBackCols);
    rows_times_rows(gs + r0 * dhp, vs, kBackCols, dhp, dpf + r0 * kBackCols);
    __syncwarp();
    const int j0 = half * (kBackCols / 2), j1 = j0 + kBackCols / 2;
    for (int j = j0; j < j1; ++j) {
      const int at = row * kBackCols + j;
      const float p = j < nk ? expf(sf[at] * scale - row_lse) : 0.0f;
      dss[at] = cuda::store_element<E>(p * (dpf[at] - row_dot));
    }
    __syncwarp();
    accumulate_product(dss + r0 * kBackCols, kBackCols, ks, dhp, dqs + r0 * dhp);
    __syncwarp();
  }
  if (qi < t) {
    const int64_t at = base + static_cast<int64_t>(qi) * dh;
    for (int d = half; d < dh; d += 2) dq[at + d] = cuda::store_element<E>(scale * dqs[row * dhp + d]);
  }
#endif
}

}  // namespace
}  // namespace strata::flash_attention::kernels
