// cuda::convert_layout (framework/cuda/device_api.h): NCHW <-> NHWC per
// image, a transpose of [rows][cols] to [cols][rows] through 32x32 tiles in
// shared memory, so that reads and writes are both coalesced (a side under 8,
// as 3 colour channels: element by element); each element
// converted as cast.cu does (round to nearest even, elements.cuh), or added
// into f32.
#include <algorithm>
#include <limits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "framework/cuda/device_api.h"
#include "framework/cuda/elements.cuh"
#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "framework/error.h"

namespace strata::cuda {

namespace {

constexpr int kTile = 32;
constexpr int kRowsPerPass = 8;  // a block is kTile x kRowsPerPass threads

// Image blockIdx.z: src [rows][cols] -> dst [cols][rows]. Column tiles on
// blockIdx.x; row tiles from blockIdx.y on, gridDim.y apart (a grid holds at
// most 65535 in y, and rows can be H * W).
template <typename From, typename To>
__global__ void transpose_kernel(int64_t rows, int64_t cols, const From* src, To* dst, int accumulate) {
  __shared__ float tile[kTile][kTile + 1];  // +1: no bank conflicts on the transposed read
  const int64_t image = static_cast<int64_t>(blockIdx.z) * rows * cols;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  // The loop's bounds are the block's alone: every thread reaches each __syncthreads.
  for (int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile; r0 < rows; r0 += static_cast<int64_t>(gridDim.y) * kTile) {
    for (int k = threadIdx.y; k < kTile; k += kRowsPerPass) {
      const int64_t r = r0 + k, c = c0 + threadIdx.x;
      if (r < rows && c < cols) tile[k][threadIdx.x] = load_element(src[image + r * cols + c]);
    }
    __syncthreads();
    for (int k = threadIdx.y; k < kTile; k += kRowsPerPass) {
      const int64_t c = c0 + k, r = r0 + threadIdx.x;  // dst row c, column r
      if (r < rows && c < cols) {
        const int64_t at = image + c * rows + r;
        const float v = tile[threadIdx.x][k];
        dst[at] = store_element<To>(accumulate ? load_element(dst[at]) + v : v);
      }
    }
    __syncthreads();  // the tile is read before the next pass writes it
  }
}

// A side of fewer than kNarrow (an RGB image's 3 channels): a tile would
// leave most of its threads idle, so one thread per element instead, in
// dst's order (writes coalesced; reads in `narrow` runs).
constexpr int64_t kNarrow = 8;

template <typename From, typename To>
__global__ void narrow_transpose_kernel(int64_t images, int64_t rows, int64_t cols, const From* src, To* dst,
                                        int accumulate) {
  STRATA_CUDA_LOOP(k, images * rows * cols) {
    const int64_t per_image = rows * cols;
    const int64_t image = k / per_image, at = k - image * per_image;  // dst [cols][rows]
    const int64_t c = at / rows, r = at - c * rows;
    const float v = load_element(src[image * per_image + r * cols + c]);
    dst[k] = store_element<To>(accumulate ? load_element(dst[k]) + v : v);
  }
}

template <typename From, typename To>
void launch(int64_t images, int64_t rows, int64_t cols, const void* src, void* dst, bool accumulate) {
  if (rows < kNarrow || cols < kNarrow) {
    const int64_t n = images * rows * cols;
    narrow_transpose_kernel<From, To><<<blocks_for(n), kThreadsPerBlock, 0, compute_stream()>>>(
        images, rows, cols, static_cast<const From*>(src), static_cast<To*>(dst), accumulate ? 1 : 0);
    STRATA_KERNEL_CHECK();
    return;
  }
  STRATA_CHECK(images <= 65535, "convert_layout: ", images, " images in one call (65535 at most)");
  const int64_t col_tiles = (cols + kTile - 1) / kTile, row_tiles = (rows + kTile - 1) / kTile;
  STRATA_CHECK(col_tiles <= std::numeric_limits<int>::max(), "convert_layout: ", cols, " columns");
  const dim3 block(kTile, kRowsPerPass);
  const dim3 grid(static_cast<unsigned>(col_tiles), static_cast<unsigned>(std::min<int64_t>(row_tiles, 65535)),
                  static_cast<unsigned>(images));
  transpose_kernel<From, To><<<grid, block, 0, compute_stream()>>>(rows, cols, static_cast<const From*>(src),
                                                                   static_cast<To*>(dst), accumulate ? 1 : 0);
  STRATA_KERNEL_CHECK();
}

template <typename From>
void launch_to(DType to, int64_t images, int64_t rows, int64_t cols, const void* src, void* dst, bool accumulate) {
  switch (to) {
    case DType::kF32: return launch<From, float>(images, rows, cols, src, dst, accumulate);
    case DType::kBF16: return launch<From, __nv_bfloat16>(images, rows, cols, src, dst, accumulate);
    case DType::kF16: return launch<From, __half>(images, rows, cols, src, dst, accumulate);
    default: break;
  }
  STRATA_CHECK(false, "convert_layout: cannot convert to ", dtype_name(to), " (f32, f16 and bf16 only)");
}

}  // namespace

void convert_layout(void* dst, DType to, const void* src, DType from, int64_t images, int64_t channels,
                    int64_t spatial, bool to_nhwc, bool accumulate, int index) {
  if (images <= 0 || channels <= 0 || spatial <= 0) return;
  STRATA_CHECK(!accumulate || to == DType::kF32, "convert_layout: adds into f32 only, not ",
               dtype_name(to));
  DeviceGuard g(index);
  const int64_t rows = to_nhwc ? channels : spatial;
  const int64_t cols = to_nhwc ? spatial : channels;
  // Grids of at most 65535 images: larger batches in several launches.
  const size_t in_size = dtype_size(from), out_size = dtype_size(to);
  for (int64_t i0 = 0; i0 < images; i0 += 65535) {
    const int64_t n = images - i0 < 65535 ? images - i0 : 65535;
    const auto* s = static_cast<const char*>(src) + static_cast<size_t>(i0 * rows * cols) * in_size;
    auto* d = static_cast<char*>(dst) + static_cast<size_t>(i0 * rows * cols) * out_size;
    switch (from) {
      case DType::kF32: launch_to<float>(to, n, rows, cols, s, d, accumulate); break;
      case DType::kBF16: launch_to<__nv_bfloat16>(to, n, rows, cols, s, d, accumulate); break;
      case DType::kF16: launch_to<__half>(to, n, rows, cols, s, d, accumulate); break;
      default: STRATA_CHECK(false, "convert_layout: cannot convert from ", dtype_name(from), " (f32, f16 and bf16 only)");
    }
  }
}

}  // namespace strata::cuda
