// Tensor parallel (split: COLUMN / ROW) works as on the CPU: the ROW partial
// outputs and the COLUMN input gradient are allreduced over the group on the
// device (the nccl backend takes device tensors and orders itself after the
// compute stream; staging backends copy through the host).
#include "framework/communicator.h"
#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "framework/cuda/stored_math.h"
#include "framework/scratch.h"
#include "framework/error.h"
#include "layers/epilogue.h"
#include "layers/inner_product.h"

namespace strata {

// The weight in the blobs' dtype, kept from forward to backward (rounded on the device).
Tensor InnerProductLayer::stored_weight(bool refresh) {
  ScratchCarver carver(kept(kept_bytes()));
  Tensor w = carver.take(param(0).shape(), call_dtype());
  if (refresh) cast_into(w, param(0).data);
  return w;
}

void InnerProductLayer::forward_stored_cuda(const Tensor& x, Tensor& y) {
  const DType st = x.dtype();
  const Tensor w = stored_weight(true);
  const Transpose tw = layout_ == WeightLayout::kOutputMajor ? Transpose::kYes : Transpose::kNo;
  // The bias in the GEMM's epilogue where cuBLASLt takes it: y written once, rounded once.
  cuda::linear_stored(tw, m_, num_output_, k_, x.raw_data(), w.raw_data(), st,
                      bias_ == Bias::kYes ? param(1).data.device_data<float>() : nullptr, y.raw_data());
}

void InnerProductLayer::backward_stored_cuda(const Tensor& dy, const Tensor& x, Tensor* dx) {
  const DType st = dy.dtype();
  // The weight gradient straight into its f32 parameter, accumulated.
  // The bias gradient from the weight gradient's epilogue where cuBLASLt takes it.
  cuda::linear_grads_stored(layout_ == WeightLayout::kOutputMajor, m_, num_output_, k_, dy.raw_data(), x.raw_data(),
                            st, param(0).diff.device_data<float>(),
                            bias_ == Bias::kYes ? param(1).diff.device_data<float>() : nullptr);
  if (dx) {
    const Tensor w = stored_weight(false);  // as the forward rounded it
    const Transpose tw = layout_ == WeightLayout::kOutputMajor ? Transpose::kNo : Transpose::kYes;
    cuda::gemm_stored(Transpose::kNo, tw, m_, k_, num_output_, 1.0f, dy.raw_data(), w.raw_data(), st, 0.0f,
                      dx->raw_data(), st);
  }
}

void InnerProductLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  // Every rank of a tensor-parallel group has the same batch, so all return here together.
  if (m_ == 0) return;
  if (call_dtype() != DType::kF32 || bottom[0]->data.dtype() != DType::kF32) {
    check_call_dtype({&bottom[0]->data, &top[0]->data});  // the scratch follows it
    return forward_stored_cuda(bottom[0]->data, top[0]->data);
  }
  const float* x = bottom[0]->data.device_data<float>();
  const float* w = param(0).data.device_data<float>();
  float* y = top[0]->data.device_data<float>();
  const Transpose tw = layout_ == WeightLayout::kOutputMajor ? Transpose::kYes : Transpose::kNo;
  cuda::gemm(Transpose::kNo, tw, m_, num_output_, k_, 1.0f, x, w, 0.0f, y);
  // ROW: each rank multiplied its slice of the inputs; the sum is the output.
  if (split_ == Split::kRow) tp_.comm->allreduce(top[0]->data, ReduceOp::kSum);
  if (bias_ == Bias::kYes) {
    cuda::add_row_bias(m_, num_output_, param(1).data.device_data<float>(), y, device_activation(epilogue()));
  }
}

void InnerProductLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                                      const BlobVec& bottom) {
  // A zero batch adds nothing to the parameter gradients and has no input gradient.
  if (m_ == 0) return;
  if (call_dtype() != DType::kF32 || top[0]->diff.dtype() != DType::kF32) {
    check_call_dtype({&top[0]->diff, &bottom[0]->data, &bottom[0]->diff});
    return backward_stored_cuda(top[0]->diff, bottom[0]->data, propagate_down[0] ? &bottom[0]->diff : nullptr);
  }
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
