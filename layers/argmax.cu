// ArgMax on the GPU: one thread per row, with the selection of
// layers/argmax.h (top_k passes over the row, no scratch memory).
#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "layers/argmax.h"

namespace strata {

namespace {

__global__ void argmax_kernel(ArgMaxGeometry g, int64_t rows, const float* x, float* y) {
  STRATA_CUDA_LOOP(i, rows) g.row(i, x, y);
}

}  // namespace

void ArgMaxLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  if (rows_ == 0) return;
  argmax_kernel<<<cuda::blocks_for(rows_), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      geom_, rows_, bottom[0]->data.device_data<float>(), top[0]->data.device_data<float>());
  STRATA_KERNEL_CHECK();
}

void ArgMaxLayer::backward_cuda(const BlobVec& /*top*/, const std::vector<bool>& /*propagate_down*/,
                                const BlobVec& /*bottom*/) {}

}  // namespace strata
