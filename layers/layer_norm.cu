// LayerNorm on the GPU, as layer_norm.cpp: a block per row computes the
// row's mean and 1/std in double (two passes) and writes the normalised row;
// backward reduces dy * weight over the row the same way. The parameter
// gradients sum over rows in two deterministic stages (per chunk of rows,
// then over the chunks), with no atomics. T is the blobs' element type
// (float, __nv_bfloat16, __half): every value widened to f32 on load, each
// output rounded once, as layer_norm.cpp's 16-bit path.
#include <algorithm>

#include "framework/cuda/elements.cuh"
#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "framework/error.h"
#include "layers/layer_norm.h"
#include "layers/neuron_layer.h"  // check_same_storage

namespace strata {

namespace {

// A block per row (grid-stride over rows); threads a multiple of 32.
int row_threads(int64_t d) { return d <= 32 ? 32 : d <= 64 ? 64 : d <= 128 ? 128 : 256; }
unsigned row_blocks(int64_t rows) { return static_cast<unsigned>(std::min<int64_t>(rows, 65535LL * 32)); }

using cuda::load_element;
using cuda::store_element;

// With ra and rb (a fused residual sum), x = ra + rb is written first, as
// Eltwise SUM writes it, and each thread reads back the elements it wrote.
template <class T>
__global__ void layer_norm_forward(int64_t rows, int64_t d, double eps, T* x, const T* ra, const T* rb,
                                   const float* w, const float* b, T* y, float* mean, float* rstd) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    T* xr = x + r * d;
    double sum = 0.0;
    if (ra) {
      for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
        const T v = store_element<T>(load_element(ra[r * d + j]) + load_element(rb[r * d + j]));
        xr[j] = v;
        sum += load_element(v);
      }
    } else {
      for (int64_t j = threadIdx.x; j < d; j += blockDim.x) sum += load_element(xr[j]);
    }
    sum = cuda::block_sum(sum);
    const double mu = sum / static_cast<double>(d);
    double sq = 0.0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const double c = load_element(xr[j]) - mu;
      sq += c * c;
    }
    sq = cuda::block_sum(sq);
    const float m = static_cast<float>(mu);
    const float is = static_cast<float>(1.0 / sqrt(sq / static_cast<double>(d) + eps));
    if (threadIdx.x == 0) {
      mean[r] = m;
      rstd[r] = is;
    }
    T* yr = y + r * d;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      yr[j] = store_element<T>((load_element(xr[j]) - m) * is * w[j] + b[j]);
    }
  }
}

template <class T>
__global__ void layer_norm_backward_input(int64_t rows, int64_t d, const T* x, const T* dy, const float* w,
                                          const float* mean, const float* rstd, T* dx) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * d;
    const T* gr = dy + r * d;
    const float m = mean[r], is = rstd[r];
    double sum_g = 0.0, sum_gx = 0.0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const double g = static_cast<double>(load_element(gr[j])) * w[j];
      sum_g += g;
      sum_gx += g * ((load_element(xr[j]) - m) * is);
    }
    sum_g = cuda::block_sum(sum_g);
    sum_gx = cuda::block_sum(sum_gx);
    const float mg = static_cast<float>(sum_g / static_cast<double>(d));
    const float mgx = static_cast<float>(sum_gx / static_cast<double>(d));
    T* dxr = dx + r * d;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const float xhat = (load_element(xr[j]) - m) * is;
      dxr[j] = store_element<T>(is * (load_element(gr[j]) * w[j] - mg - xhat * mgx));
    }
  }
}

constexpr int kColTile = 32;   // columns per block (threadIdx.x)
constexpr int kRowLanes = 8;   // rows in flight per block (threadIdx.y)

// Block (x, y): columns [x * 32, x * 32 + 32) of rows chunk y, summed in
// double; partials[0][y][j] = sum dy * xhat, partials[1][y][j] = sum dy.
template <class T>
__global__ void layer_norm_param_partials(int64_t rows, int64_t d, int64_t chunk_rows, const T* x, const T* dy,
                                          const float* mean, const float* rstd, float* partials) {
  __shared__ double s_w[kRowLanes][kColTile];
  __shared__ double s_b[kRowLanes][kColTile];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kColTile + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * chunk_rows;
  const int64_t r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
  double sw = 0.0, sb = 0.0;
  if (j < d) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) {
      const float g = load_element(dy[r * d + j]);
      sw += static_cast<double>(g) * ((load_element(x[r * d + j]) - mean[r]) * rstd[r]);
      sb += g;
    }
  }
  s_w[threadIdx.y][threadIdx.x] = sw;
  s_b[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y == 0 && j < d) {
    for (int k = 1; k < kRowLanes; ++k) {
      sw += s_w[k][threadIdx.x];
      sb += s_b[k][threadIdx.x];
    }
    const int64_t chunks = gridDim.y;
    partials[chunk * d + j] = static_cast<float>(sw);
    partials[(chunks + chunk) * d + j] = static_cast<float>(sb);
  }
}

__global__ void layer_norm_param_finish(int64_t chunks, int64_t d, const float* partials, float* dw, float* db) {
  STRATA_CUDA_LOOP(j, d) {
    double sw = 0.0, sb = 0.0;
    for (int64_t c = 0; c < chunks; ++c) {
      sw += partials[c * d + j];
      sb += partials[(chunks + c) * d + j];
    }
    dw[j] += static_cast<float>(sw);
    db[j] += static_cast<float>(sb);
  }
}

}  // namespace

void LayerNormLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  Kept kept = take_kept();
  if (rows_ == 0) return;
  Tensor& x = bottom[0]->data;
  Tensor& y = top[0]->data;
  check_same_storage("LayerNorm forward", {&x, &y});
  const ResidualSum& sum = residual_sum();
  if (!sum.none()) {
    check_same_storage("LayerNorm forward", {&x, &sum.a->data, &sum.b->data});
    STRATA_CHECK(sum.a->numel() == x.numel() && sum.b->numel() == x.numel(), where(), ": the residual sum's ",
                 sum.a->numel(), " + ", sum.b->numel(), " elements do not match the bottom's ", x.numel());
  }
  cuda::with_device_element(x.dtype(), "LayerNorm forward", [&](auto e) {
    using T = decltype(e);
    layer_norm_forward<T><<<row_blocks(rows_), row_threads(d_), 0, cuda::compute_stream()>>>(
        rows_, d_, eps_, static_cast<T*>(x.raw_data()),
        sum.none() ? nullptr : static_cast<const T*>(sum.a->data.raw_data()),
        sum.none() ? nullptr : static_cast<const T*>(sum.b->data.raw_data()), param(0).data.device_data<float>(),
        param(1).data.device_data<float>(), static_cast<T*>(y.raw_data()), kept.mean.device_data<float>(),
        kept.rstd.device_data<float>());
    STRATA_KERNEL_CHECK();
  });
}

void LayerNormLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                                   const BlobVec& bottom) {
  // A zero batch adds nothing to the parameter gradients and has no input gradient.
  if (rows_ == 0) return;
  const Kept kept = take_kept();  // as forward left it
  const Tensor& xt = bottom[0]->data;
  const Tensor& dyt = top[0]->diff;
  check_same_storage("LayerNorm backward", {&xt, &dyt});
  const float* mean = kept.mean.device_data<float>();
  const float* rstd = kept.rstd.device_data<float>();
  cudaStream_t s = cuda::compute_stream();

  const Shape shape = partials_shape();
  const int64_t chunks = shape[1];
  const int64_t chunk_rows = (rows_ + chunks - 1) / chunks;
  const int64_t col_blocks = (d_ + kColTile - 1) / kColTile;
  STRATA_CHECK(col_blocks <= 0x7fffffffLL, "LayerNorm: ", d_, " values per row is too many for one grid");
  ScratchCarver counter;
  counter.take(shape);
  ScratchCarver carver(scratch(counter.bytes()));
  float* partials = carver.take(shape).device_data<float>();  // per chunk of rows: sum dy * xhat, then sum dy
  cuda::with_device_element(xt.dtype(), "LayerNorm backward", [&](auto e) {
    using T = decltype(e);
    const T* x = static_cast<const T*>(xt.raw_data());
    const T* dy = static_cast<const T*>(dyt.raw_data());
    layer_norm_param_partials<T><<<dim3(static_cast<unsigned>(col_blocks), static_cast<unsigned>(chunks)),
                                   dim3(kColTile, kRowLanes), 0, s>>>(rows_, d_, chunk_rows, x, dy, mean, rstd,
                                                                      partials);
    STRATA_KERNEL_CHECK();
    layer_norm_param_finish<<<cuda::blocks_for(d_), cuda::kThreadsPerBlock, 0, s>>>(
        chunks, d_, partials, param(0).diff.device_data<float>(), param(1).diff.device_data<float>());
    STRATA_KERNEL_CHECK();

    if (!propagate_down[0]) return;
    Tensor& dxt = bottom[0]->diff;
    check_same_storage("LayerNorm backward", {&dyt, &dxt});
    layer_norm_backward_input<T><<<row_blocks(rows_), row_threads(d_), 0, s>>>(
        rows_, d_, x, dy, param(0).data.device_data<float>(), mean, rstd, static_cast<T*>(dxt.raw_data()));
    STRATA_KERNEL_CHECK();
  });
}

}  // namespace strata
