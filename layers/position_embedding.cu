// PositionEmbedding on the GPU: one thread per output value forward; the
// parameter gradients are batch sums (a thread per embedding value, samples
// in order, no atomics), and the input gradient is a strided copy.
#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "layers/position_embedding.h"

namespace strata {
namespace {

// y [N, T + E, D]: row 0 is cls + pos[0] when E == 1, then x + pos[E:].
__global__ void position_embedding_forward(int64_t n, int64_t t, int64_t d, int64_t e, const float* x,
                                           const float* pos, const float* cls, float* y) {
  const int64_t per = (t + e) * d;
  STRATA_CUDA_LOOP(i, n * per) {
    const int64_t s = i / per, r = i - s * per;
    y[i] = (r < e * d ? cls[r] : x[s * t * d + (r - e * d)]) + pos[r];
  }
}

// y[j] += sum over rows of a[row * ld + j], for j < cols.
__global__ void add_strided_column_sums(int64_t rows, int64_t cols, int64_t ld, const float* a, float* y) {
  STRATA_CUDA_LOOP(j, cols) {
    double s = 0.0;
    for (int64_t r = 0; r < rows; ++r) s += a[r * ld + j];
    y[j] += static_cast<float>(s);
  }
}

}  // namespace

void PositionEmbeddingLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  const int64_t total = n_ * (t_ + extra()) * d_;
  if (total == 0) return;
  const float* cls = class_token_ == ClassToken::kYes ? param(0).data.device_data<float>() : nullptr;
  position_embedding_forward<<<cuda::blocks_for(total), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      n_, t_, d_, extra(), bottom[0]->data.device_data<float>(), pos_embedding().data.device_data<float>(), cls,
      top[0]->data.device_data<float>());
  STRATA_KERNEL_CHECK();
}

void PositionEmbeddingLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                                           const BlobVec& bottom) {
  // A zero batch adds nothing to the parameter gradients and has no input gradient.
  if (n_ == 0) return;
  const int64_t E = extra(), per = (t_ + E) * d_;
  const float* dy = top[0]->diff.device_data<float>();
  cudaStream_t s = cuda::compute_stream();
  if (per > 0) {
    add_strided_column_sums<<<cuda::blocks_for(per), cuda::kThreadsPerBlock, 0, s>>>(
        n_, per, per, dy, pos_embedding().diff.device_data<float>());
    STRATA_KERNEL_CHECK();
  }
  if (class_token_ == ClassToken::kYes && d_ > 0) {
    add_strided_column_sums<<<cuda::blocks_for(d_), cuda::kThreadsPerBlock, 0, s>>>(n_, d_, per, dy,
                                                                                    param(0).diff.device_data<float>());
    STRATA_KERNEL_CHECK();
  }
  if (!propagate_down[0] || t_ * d_ == 0) return;
  // dx[n] = dy[n] without its class-token row: N rows of T * D floats.
  const size_t row_bytes = sizeof(float) * static_cast<size_t>(t_ * d_);
  STRATA_CUDA_CHECK(cudaMemcpy2DAsync(bottom[0]->diff.device_data<float>(), row_bytes, dy + E * d_,
                                      sizeof(float) * static_cast<size_t>(per), row_bytes, static_cast<size_t>(n_),
                                      cudaMemcpyDeviceToDevice, s));
}

}  // namespace strata
