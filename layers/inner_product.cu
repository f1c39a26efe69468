// Tensor parallel (split: COLUMN / ROW) works as on the CPU: the ROW partial
// outputs and the COLUMN input gradient are allreduced over the group on the
// device (the nccl backend takes device tensors and orders itself after the
// compute stream; staging backends copy through the host).
#include "framework/communicator.h"
#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "framework/error.h"
#include "layers/inner_product.h"

namespace strata {

void InnerProductLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  // Every rank of a tensor-parallel group has the same batch, so all return here together.
  if (m_ == 0) return;
  const float* x = bottom[0]->data.device_data<float>();
  const float* w = param(0).data.device_data<float>();
  float* y = top[0]->data.device_data<float>();
  const Transpose tw = layout_ == WeightLayout::kOutputMajor ? Transpose::kYes : Transpose::kNo;
  cuda::gemm(Transpose::kNo, tw, m_, num_output_, k_, 1.0f, x, w, 0.0f, y);
  // ROW: each rank multiplied its slice of the inputs; the sum is the output.
  if (split_ == Split::kRow) tp_.comm->allreduce(top[0]->data, ReduceOp::kSum);
  if (bias_ == Bias::kYes) cuda::add_row_bias(m_, num_output_, param(1).data.device_data<float>(), y);
}

void InnerProductLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                                      const BlobVec& bottom) {
  // A zero batch adds nothing to the parameter gradients and has no input gradient.
  if (m_ == 0) return;
  const float* dy = top[0]->diff.device_data<float>();
  const float* x = bottom[0]->data.device_data<float>();
  const float* w = param(0).data.device_data<float>();
  float* dw = param(0).diff.device_data<float>();
  if (layout_ == WeightLayout::kOutputMajor) {
    cuda::gemm(Transpose::kYes, Transpose::kNo, num_output_, k_, m_, 1.0f, dy, x, 1.0f, dw);
  } else {
    cuda::gemm(Transpose::kYes, Transpose::kNo, k_, num_output_, m_, 1.0f, x, dy, 1.0f, dw);
  }
  if (bias_ == Bias::kYes) cuda::column_sums(m_, num_output_, dy, 1.0f, param(1).diff.device_data<float>());
  if (propagate_down[0]) {
    const Transpose tw = layout_ == WeightLayout::kOutputMajor ? Transpose::kNo : Transpose::kYes;
    cuda::gemm(Transpose::kNo, tw, m_, k_, num_output_, 1.0f, dy, w, 0.0f, bottom[0]->diff.device_data<float>());
    // COLUMN: each rank's outputs depend on all inputs; sum their gradients.
    if (split_ == Split::kColumn) tp_.comm->allreduce(bottom[0]->diff, ReduceOp::kSum);
  }
}

}  // namespace strata
