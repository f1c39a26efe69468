// The CUDA dialect that a kernel file written for it
// (layers/multi_head_attention_flash_kernels.cuh) uses, emulated on the CPU
// so that a test can run the very kernel source without a GPU: each block's
// threads are std::threads (one block at a time), __syncthreads() and
// __syncwarp() are barriers, __shfl_xor_sync goes through a table, WMMA's
// 16x16x16 fragments are plain f32 products (done by lane 0 of the warp, as
// the warp's one result), and shared memory is a buffer filled with garbage
// bytes first. bf16 and f16 values are Bf16 / F16, rounded as framework/dtype.h
// rounds.
//
// It checks what a kernel computes and where it reads and writes, with the
// barriers where the kernel puts them; not its speed, and not races that
// only real warps would expose (a missing __syncwarp() between lanes of one
// warp may pass here).
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#include "framework/dtype.h"

struct SimtDim3 {
  unsigned x = 0, y = 0, z = 0;
};

namespace strata::simt {
// A reusable barrier for `count` threads (std::barrier is C++20).
class Barrier {
 public:
  explicit Barrier(unsigned count) : count_(count) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mu_);
    const unsigned generation = generation_;
    if (++arrived_ == count_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != generation; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  const unsigned count_;
  unsigned arrived_ = 0;
  unsigned generation_ = 0;
};

inline thread_local SimtDim3 thread_index;
inline SimtDim3 block_index;
inline SimtDim3 block_dim{128, 1, 1};
inline unsigned char* shared_memory = nullptr;
inline Barrier* block_barrier = nullptr;
inline std::vector<Barrier*> warp_barriers;
inline float shuffle_slots[1024];
}  // namespace strata::simt

#define threadIdx (::strata::simt::thread_index)
#define blockIdx (::strata::simt::block_index)
#define blockDim (::strata::simt::block_dim)
#define __global__
#define __device__
#define STRATA_FLASH_DEVICE_CODE 1
#define STRATA_FLASH_SHARED(name) unsigned char* name = ::strata::simt::shared_memory
#define STRATA_FLASH_BOUNDS(threads)
#define STRATA_CUDA_LOOP(i, n) for (int64_t i = 0; i < (n); ++i)

inline void __syncthreads() { strata::simt::block_barrier->arrive_and_wait(); }
inline void __syncwarp() { strata::simt::warp_barriers[threadIdx.x / 32]->arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned /*mask*/, float v, int lane_mask) {
  strata::simt::shuffle_slots[threadIdx.x] = v;
  __syncwarp();
  const float other = strata::simt::shuffle_slots[threadIdx.x ^ static_cast<unsigned>(lane_mask)];
  __syncwarp();
  return other;
}
using std::min;

namespace strata {

// 16-bit values as a kernel stores them.
struct Bf16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};

namespace cuda {
inline float load_element(float v) { return v; }
inline float load_element(Bf16 v) { return bf16_to_float(v.bits); }
inline float load_element(F16 v) { return f16_to_float(v.bits); }
template <class T>
T store_element(float f);
template <>
inline float store_element<float>(float f) { return f; }
template <>
inline Bf16 store_element<Bf16>(float f) { return Bf16{float_to_bf16(f)}; }
template <>
inline F16 store_element<F16>(float f) { return F16{float_to_f16(f)}; }
}  // namespace cuda

namespace simt {
inline bool lane_zero() { return threadIdx.x % 32 == 0; }
}  // namespace simt

}  // namespace strata

namespace nvcuda::wmma {
struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major };

// The warp's one fragment, held (and computed) by its lane 0.
template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  float v[16][16];
};

template <class F>
void fill_fragment(F& f, float x) {
  if (!strata::simt::lane_zero()) return;
  for (auto& row : f.v) std::fill(std::begin(row), std::end(row), x);
}

// row_major: element (i, j) at p[i * ldm + j]; col_major: at p[j * ldm + i].
template <class Use, class T, class Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ldm) {
  if (!strata::simt::lane_zero()) return;
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      f.v[i][j] = strata::cuda::load_element(std::is_same_v<Layout, col_major> ? p[j * ldm + i] : p[i * ldm + j]);
    }
  }
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ldm, layout_t) {
  if (!strata::simt::lane_zero()) return;
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) f.v[i][j] = p[i * ldm + j];
  }
}

// Stores are warp-collective: the warp meets before and after, so its lanes
// read what lane 0 wrote (a real warp's lanes each store their part).
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm, layout_t) {
  __syncwarp();
  if (strata::simt::lane_zero()) {
    for (int i = 0; i < 16; ++i) {
      for (int j = 0; j < 16; ++j) p[i * ldm + j] = f.v[i][j];
    }
  }
  __syncwarp();
}

template <class A, class B>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const A& a, const B& b,
              const fragment<accumulator, 16, 16, 16, float>& c) {
  if (!strata::simt::lane_zero()) return;
  fragment<accumulator, 16, 16, 16, float> r;
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      float s = c.v[i][j];
      for (int k = 0; k < 16; ++k) s += a.v[i][k] * b.v[k][j];
      r.v[i][j] = s;
    }
  }
  d = r;
}
}  // namespace nvcuda::wmma

namespace strata::simt {

// Runs kernel() as every thread of every block of a grid (gx, gy), `threads`
// per block (a multiple of 32), with `shared_bytes` of shared memory.
template <class Kernel>
void launch(unsigned gx, unsigned gy, unsigned threads, size_t shared_bytes, const Kernel& kernel) {
  std::vector<unsigned char> shared(shared_bytes);  // exactly: a sanitizer sees any read or write past it
  shared_memory = shared.data();
  block_dim = SimtDim3{threads, 1, 1};
  for (unsigned y = 0; y < gy; ++y) {
    for (unsigned x = 0; x < gx; ++x) {
      block_index = SimtDim3{x, y, 0};
      std::memset(shared.data(), 0xcd, shared.size());  // shared memory starts as garbage
      Barrier block(threads);
      std::vector<std::unique_ptr<Barrier>> warps;
      warp_barriers.clear();
      for (unsigned w = 0; w < threads / 32; ++w) {
        warps.push_back(std::make_unique<Barrier>(32));
        warp_barriers.push_back(warps.back().get());
      }
      block_barrier = &block;
      std::vector<std::thread> pool;
      for (unsigned i = 0; i < threads; ++i) {
        pool.emplace_back([&kernel, i] {
          thread_index = SimtDim3{i, 0, 0};
          kernel();
        });
      }
      for (std::thread& t : pool) t.join();
    }
  }
}

}  // namespace strata::simt
