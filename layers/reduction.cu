// Reduction on the GPU: one block per row, each thread summing a strided
// part of it in double, then cuda::block_sum; backward is elementwise with
// layers/reduction.h's gradient.
#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "layers/reduction.h"

namespace strata {

namespace {

constexpr int kRowThreads = 256;  // a multiple of 32, as block_sum needs

__global__ void reduction_forward_kernel(ReductionOp op, int64_t rows, int64_t dim, double scale, const float* x,
                                         float* y) {
  // Every thread of the block runs the same number of rounds (block_sum needs them all).
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) s += reduction_term(op, x[r * dim + j]);
    s = cuda::block_sum(s);
    if (threadIdx.x == 0) y[r] = static_cast<float>(s * scale);
  }
}

__global__ void reduction_backward_kernel(ReductionOp op, int64_t n, int64_t dim, float scale, const float* x,
                                          const float* dy, float* dx) {
  STRATA_CUDA_LOOP(j, n) dx[j] = reduction_grad(op, x[j], dy[j / dim], scale);
}

}  // namespace

void ReductionLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  if (rows_ == 0) return;
  const unsigned blocks = static_cast<unsigned>(rows_ < 65535 ? rows_ : 65535);
  reduction_forward_kernel<<<blocks, kRowThreads, 0, cuda::compute_stream()>>>(
      op_, rows_, dim_, static_cast<double>(scale()), bottom[0]->data.device_data<float>(),
      top[0]->data.device_data<float>());
  STRATA_KERNEL_CHECK();
}

void ReductionLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                                   const BlobVec& bottom) {
  const int64_t n = bottom[0]->numel();
  if (!propagate_down[0] || n == 0) return;
  reduction_backward_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      op_, n, dim_, scale(), bottom[0]->data.device_data<float>(), top[0]->diff.device_data<float>(),
      bottom[0]->diff.device_data<float>());
  STRATA_KERNEL_CHECK();
}

}  // namespace strata
