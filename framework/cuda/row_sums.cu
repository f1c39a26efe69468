// cuda::channel_row_sums (framework/cuda/stored_math.h): per-channel sums over
// the rows of a channels-last tensor. Blocks of 32 channels x 8 row lanes;
// each block sums one slab of rows for its channels (lanes in a fixed order),
// and a second kernel adds the slabs' partial sums in order.
#include <algorithm>
#include <limits>

#include "framework/cuda/elements.cuh"
#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "framework/cuda/stored_math.h"
#include "framework/error.h"

namespace strata::cuda {

namespace {

constexpr int kChannelsPerBlock = 32;
constexpr int kRowLanes = 8;
constexpr int64_t kRowsPerSlab = 512;  // at least: fewer, longer slabs for small tensors
constexpr int64_t kMaxSlabs = 128;

int64_t slabs_for(int64_t rows) {
  return std::max<int64_t>(1, std::min<int64_t>(kMaxSlabs, (rows + kRowsPerSlab - 1) / kRowsPerSlab));
}

template <class T>
__device__ __forceinline__ double row_term(RowTerm term, const T* x, const T* w, const float* center, int64_t at,
                                           int64_t c) {
  const double v = load_element(x[at]);
  if (term == RowTerm::kProduct) return v * static_cast<double>(load_element(w[at]));
  if (term == RowTerm::kCenteredSquare) {
    const double d = v - static_cast<double>(center[c]);
    return d * d;
  }
  return v;
}

// Block (channel group blockIdx.x, slab blockIdx.y): partial[slab][c].
template <class T>
__global__ void row_slab_sums_kernel(int64_t rows, int64_t channels, int64_t slab_rows, const T* x, const T* w,
                                     const float* center, RowTerm term, double* partial) {
  __shared__ double lanes[kRowLanes][kChannelsPerBlock + 1];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kChannelsPerBlock + threadIdx.x;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * slab_rows;
  const int64_t end = begin + slab_rows < rows ? begin + slab_rows : rows;
  double s = 0.0;
  if (c < channels) {
    for (int64_t r = begin + threadIdx.y; r < end; r += kRowLanes) s += row_term(term, x, w, center, r * channels + c, c);
  }
  lanes[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < channels) {
    double total = 0.0;
    for (int l = 0; l < kRowLanes; ++l) total += lanes[l][threadIdx.x];
    partial[static_cast<int64_t>(blockIdx.y) * channels + c] = total;
  }
}

__global__ void add_slabs_kernel(int64_t slabs, int64_t channels, const double* partial, double divisor, float beta,
                                 float* y) {
  STRATA_CUDA_LOOP(c, channels) {
    double s = 0.0;
    for (int64_t k = 0; k < slabs; ++k) s += partial[k * channels + c];
    y[c] = static_cast<float>(s / divisor) + (beta == 0.0f ? 0.0f : beta * y[c]);
  }
}

}  // namespace

int64_t row_sums_partials(int64_t rows, int64_t channels) { return slabs_for(rows) * std::max<int64_t>(channels, 0); }

void channel_row_sums(int64_t rows, int64_t channels, const void* x, const void* w, const float* center, DType dtype,
                      RowTerm term, double divisor, float beta, float* y, double* partial) {
  if (channels <= 0) return;
  STRATA_CHECK(divisor > 0.0, "channel_row_sums: divisor ", divisor, " must be positive");
  STRATA_CHECK(term != RowTerm::kProduct || w, "channel_row_sums: a product needs w");
  STRATA_CHECK(term != RowTerm::kCenteredSquare || center, "channel_row_sums: a centred square needs center");
  const int64_t groups = (channels + kChannelsPerBlock - 1) / kChannelsPerBlock;
  STRATA_CHECK(groups <= std::numeric_limits<int>::max(), "channel_row_sums: too many channels (", channels, ")");
  const int64_t slabs = slabs_for(rows);
  const int64_t slab_rows = (std::max<int64_t>(rows, 0) + slabs - 1) / slabs;
  with_device_element(dtype, "channel_row_sums", [&](auto e) {
    using T = decltype(e);
    const dim3 grid(static_cast<unsigned>(groups), static_cast<unsigned>(slabs));
    const dim3 block(kChannelsPerBlock, kRowLanes);
    row_slab_sums_kernel<T><<<grid, block, 0, compute_stream()>>>(rows, channels, slab_rows, static_cast<const T*>(x),
                                                                  static_cast<const T*>(w), center, term, partial);
    STRATA_KERNEL_CHECK();
  });
  add_slabs_kernel<<<blocks_for(channels), kThreadsPerBlock, 0, compute_stream()>>>(slabs, channels, partial, divisor,
                                                                                   beta, y);
  STRATA_KERNEL_CHECK();
}

}  // namespace strata::cuda
