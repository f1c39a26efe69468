// Embed on the GPU: one thread per top element forward; backward adds each
// position's top gradient into its row with atomicAdd (rows chosen by
// several positions are summed in no fixed order). Indices are checked on
// the device; a bad one is reported at the next forward, so that no step
// waits for the GPU.
#include <cmath>
#include <string>

#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "framework/error.h"
#include "layers/embed.h"

namespace strata {

struct EmbedLayer::CudaState {
  cuda::DeferredIndexCheck bad;
  Shape checked_shape;  // bottom shape of the checked batch, for the message
};

namespace {

__device__ inline bool valid_index(float v, int64_t rows) {
  return v >= 0.0f && v < static_cast<float>(rows) && v == floorf(v);
}

__global__ void embed_forward_kernel(int64_t total, int64_t n, int64_t rows, const float* idx, const float* w,
                                     const float* b, float* y, unsigned long long* bad) {
  STRATA_CUDA_LOOP(k, total) {
    const int64_t i = k / n, j = k - i * n;
    const float v = idx[i];
    if (!valid_index(v, rows)) {
      atomicMin(bad, static_cast<unsigned long long>(i));
      y[k] = 0.0f;
      continue;
    }
    y[k] = w[static_cast<int64_t>(v) * n + j] + (b ? b[j] : 0.0f);
  }
}

__global__ void embed_weight_grad_kernel(int64_t total, int64_t n, int64_t rows, const float* idx, const float* dy,
                                         float* dw) {
  STRATA_CUDA_LOOP(k, total) {
    const int64_t i = k / n, j = k - i * n;
    const float v = idx[i];
    if (valid_index(v, rows)) atomicAdd(&dw[static_cast<int64_t>(v) * n + j], dy[k]);
  }
}

}  // namespace

void EmbedLayer::report_bad_index(int64_t bad) const {
  if (bad < 0) return;
  shape_error("an index at position " + std::to_string(bad) + " of the previous batch's bottom " +
              shape_str(cuda_->checked_shape) + " is not a whole number in [0, " + std::to_string(input_dim_) +
              "); the indices must be row numbers of the table (raise embed_param input_dim if the data has more)");
}

void EmbedLayer::before_replay() {
  if (cuda_) report_bad_index(cuda_->bad.before_replay());
}

void EmbedLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  if (!cuda_) cuda_ = std::make_shared<CudaState>();
  CudaState& st = *cuda_;
  report_bad_index(st.bad.previous());
  unsigned long long* slot = st.bad.arm();
  st.checked_shape = bottom[0]->shape();
  const int64_t total = positions_ * num_output_;
  if (total > 0) {
    embed_forward_kernel<<<cuda::blocks_for(total), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
        total, num_output_, input_dim_, bottom[0]->data.device_data<float>(), param(0).data.device_data<float>(),
        bias_ == Bias::kYes ? param(1).data.device_data<float>() : nullptr, top[0]->data.device_data<float>(), slot);
    STRATA_KERNEL_CHECK();
  }
  st.bad.record();
}

void EmbedLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& /*propagate_down*/,
                               const BlobVec& bottom) {
  const int64_t total = positions_ * num_output_;
  if (total == 0) return;
  const float* dy = top[0]->diff.device_data<float>();
  embed_weight_grad_kernel<<<cuda::blocks_for(total), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      total, num_output_, input_dim_, bottom[0]->data.device_data<float>(), dy, param(0).diff.device_data<float>());
  STRATA_KERNEL_CHECK();
  if (bias_ == Bias::kYes) cuda::column_sums(positions_, num_output_, dy, 1.0f, param(1).diff.device_data<float>());
}

}  // namespace strata
