// PositionEmbedding on the GPU: one thread per output value forward; the
// parameter gradients are batch sums (a thread per embedding value, samples
// in order, no atomics), and the input gradient is a strided copy. T is the
// blobs' element type (float, __nv_bfloat16, __half): sums in f32, each
// output rounded once, as position_embedding.cpp's 16-bit path.
#include "framework/cuda/elements.cuh"
#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "layers/neuron_layer.h"  // check_same_storage
#include "layers/position_embedding.h"

namespace strata {
namespace {

// y [N, T + E, D]: row 0 is cls + pos[0] when E == 1, then x + pos[E:].
template <class T>
__global__ void position_embedding_forward(int64_t n, int64_t t, int64_t d, int64_t e, const T* x, const float* pos,
                                           const float* cls, T* y) {
  const int64_t per = (t + e) * d;
  STRATA_CUDA_LOOP(i, n * per) {
    const int64_t s = i / per, r = i - s * per;
    const float v = r < e * d ? cls[r] : cuda::load_element(x[s * t * d + (r - e * d)]);
    y[i] = cuda::store_element<T>(v + pos[r]);
  }
}

// y[j] += sum over rows of a[row * ld + j], for j < cols.
template <class T>
__global__ void add_strided_column_sums(int64_t rows, int64_t cols, int64_t ld, const T* a, float* y) {
  STRATA_CUDA_LOOP(j, cols) {
    double s = 0.0;
    for (int64_t r = 0; r < rows; ++r) s += cuda::load_element(a[r * ld + j]);
    y[j] += static_cast<float>(s);
  }
}

}  // namespace

void PositionEmbeddingLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  const int64_t total = n_ * (t_ + extra()) * d_;
  if (total == 0) return;
  const Tensor& x = bottom[0]->data;
  Tensor& y = top[0]->data;
  if (x.dtype() != y.dtype()) check_same_storage("PositionEmbedding forward", {&x, &y});  // names both
  const float* cls = class_token_ == ClassToken::kYes ? param(0).data.device_data<float>() : nullptr;
  cuda::with_device_element(x.dtype(), "PositionEmbedding forward", [&](auto e) {
    using T = decltype(e);
    position_embedding_forward<T><<<cuda::blocks_for(total), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
        n_, t_, d_, extra(), static_cast<const T*>(x.raw_data()), pos_embedding().data.device_data<float>(), cls,
        static_cast<T*>(y.raw_data()));
    STRATA_KERNEL_CHECK();
  });
}

void PositionEmbeddingLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                                           const BlobVec& bottom) {
  // A zero batch adds nothing to the parameter gradients and has no input gradient.
  if (n_ == 0) return;
  const int64_t E = extra(), per = (t_ + E) * d_;
  const Tensor& dyt = top[0]->diff;
  cudaStream_t s = cuda::compute_stream();
  cuda::with_device_element(dyt.dtype(), "PositionEmbedding backward", [&](auto e) {
    using T = decltype(e);
    const T* dy = static_cast<const T*>(dyt.raw_data());
    if (per > 0) {
      add_strided_column_sums<T><<<cuda::blocks_for(per), cuda::kThreadsPerBlock, 0, s>>>(
          n_, per, per, dy, pos_embedding().diff.device_data<float>());
      STRATA_KERNEL_CHECK();
    }
    if (class_token_ == ClassToken::kYes && d_ > 0) {
      add_strided_column_sums<T><<<cuda::blocks_for(d_), cuda::kThreadsPerBlock, 0, s>>>(
          n_, d_, per, dy, param(0).diff.device_data<float>());
      STRATA_KERNEL_CHECK();
    }
    if (!propagate_down[0] || t_ * d_ == 0) return;
    Tensor& dxt = bottom[0]->diff;
    if (dxt.dtype() != dyt.dtype()) check_same_storage("PositionEmbedding backward", {&dyt, &dxt});
    // dx[n] = dy[n] without its class-token row: N rows of T * D values.
    const size_t row_bytes = sizeof(T) * static_cast<size_t>(t_ * d_);
    STRATA_CUDA_CHECK(cudaMemcpy2DAsync(dxt.raw_data(), row_bytes, dy + E * d_, sizeof(T) * static_cast<size_t>(per),
                                        row_bytes, static_cast<size_t>(n_), cudaMemcpyDeviceToDevice, s));
  });
}

}  // namespace strata
