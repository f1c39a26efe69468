#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "layers/eltwise.h"

namespace strata {

namespace {

__global__ void scaled_copy(int64_t n, float c, const float* x, float* y) {
  STRATA_CUDA_LOOP(j, n) y[j] = c * x[j];
}

__global__ void multiply_into(int64_t n, const float* x, float* y) {
  STRATA_CUDA_LOOP(j, n) y[j] *= x[j];
}

__global__ void max_first(int64_t n, const float* x, float* y, int32_t* arg) {
  STRATA_CUDA_LOOP(j, n) {
    y[j] = x[j];
    arg[j] = 0;
  }
}

// Strict '>' so ties go to the earlier bottom, as in Caffe.
__global__ void max_next(int64_t n, int32_t index, const float* x, float* y, int32_t* arg) {
  STRATA_CUDA_LOOP(j, n) {
    if (x[j] > y[j]) {
      y[j] = x[j];
      arg[j] = index;
    }
  }
}

__global__ void prod_divide_grad(int64_t n, const float* dy, const float* y, const float* x, float* dx) {
  STRATA_CUDA_LOOP(j, n) dx[j] = dy[j] * y[j] / x[j];
}

__global__ void max_grad(int64_t n, int32_t me, const int32_t* arg, const float* dy, float* dx) {
  STRATA_CUDA_LOOP(j, n) dx[j] = arg[j] == me ? dy[j] : 0.0f;
}

}  // namespace

void EltwiseLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  const int64_t n = top[0]->numel();
  if (op_ == Op::kMax) cuda::ensure_on_device(argmax_, top[0]->shape(), DType::kI32, device());
  if (n == 0) return;
  float* y = top[0]->data.device_data<float>();
  const unsigned blocks = cuda::blocks_for(n);
  cudaStream_t s = cuda::compute_stream();
  switch (op_) {
    case Op::kSum:
      scaled_copy<<<blocks, cuda::kThreadsPerBlock, 0, s>>>(n, coeffs_[0], bottom[0]->data.device_data<float>(), y);
      STRATA_KERNEL_CHECK();
      for (size_t i = 1; i < bottom.size(); ++i) cuda::axpy(n, coeffs_[i], bottom[i]->data.device_data<float>(), y);
      break;
    case Op::kProd:
      cuda::copy(n, bottom[0]->data.device_data<float>(), y);
      for (size_t i = 1; i < bottom.size(); ++i) {
        multiply_into<<<blocks, cuda::kThreadsPerBlock, 0, s>>>(n, bottom[i]->data.device_data<float>(), y);
        STRATA_KERNEL_CHECK();
      }
      break;
    case Op::kMax: {
      int32_t* arg = argmax_.device_data<int32_t>();
      max_first<<<blocks, cuda::kThreadsPerBlock, 0, s>>>(n, bottom[0]->data.device_data<float>(), y, arg);
      STRATA_KERNEL_CHECK();
      for (size_t i = 1; i < bottom.size(); ++i) {
        max_next<<<blocks, cuda::kThreadsPerBlock, 0, s>>>(n, static_cast<int32_t>(i),
                                                           bottom[i]->data.device_data<float>(), y, arg);
        STRATA_KERNEL_CHECK();
      }
      break;
    }
  }
}

void EltwiseLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                                 const BlobVec& bottom) {
  const int64_t n = top[0]->numel();
  if (n == 0) return;
  const float* dy = top[0]->diff.device_data<float>();
  const unsigned blocks = cuda::blocks_for(n);
  cudaStream_t s = cuda::compute_stream();
  for (size_t i = 0; i < bottom.size(); ++i) {
    if (!propagate_down[i]) continue;
    float* dx = bottom[i]->diff.device_data<float>();
    switch (op_) {
      case Op::kSum:
        scaled_copy<<<blocks, cuda::kThreadsPerBlock, 0, s>>>(n, coeffs_[i], dy, dx);
        STRATA_KERNEL_CHECK();
        break;
      case Op::kProd:
        if (prod_grad_ == ProdGrad::kStable) {
          // The product of the other bottoms: exact even where bottom i is 0.
          cuda::copy(n, dy, dx);
          for (size_t o = 0; o < bottom.size(); ++o) {
            if (o == i) continue;
            multiply_into<<<blocks, cuda::kThreadsPerBlock, 0, s>>>(n, bottom[o]->data.device_data<float>(), dx);
            STRATA_KERNEL_CHECK();
          }
        } else {
          // The output is read only here: SUM and MAX declare that backward reads no values.
          const float* y = top[0]->data.device_data<float>();
          prod_divide_grad<<<blocks, cuda::kThreadsPerBlock, 0, s>>>(n, dy, y, bottom[i]->data.device_data<float>(),
                                                                     dx);
          STRATA_KERNEL_CHECK();
        }
        break;
      case Op::kMax:
        max_grad<<<blocks, cuda::kThreadsPerBlock, 0, s>>>(n, static_cast<int32_t>(i), argmax_.device_data<int32_t>(),
                                                           dy, dx);
        STRATA_KERNEL_CHECK();
        break;
    }
  }
}

}  // namespace strata
