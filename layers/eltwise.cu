#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "layers/eltwise.h"
#include "layers/neuron_layer.cuh"  // neuron_load/neuron_store, with_device_element

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

// The 16-bit paths: every bottom's element widened, combined in f32 as the
// CPU's forward_stored_cpu does, rounded once. The bottoms by value.
template <class T>
struct StoredBottoms {
  const T* x[EltwiseLayer::kMaxStoredBottoms];
  float coeff[EltwiseLayer::kMaxStoredBottoms];
  int k;
};

enum class StoredOp { kSum, kProd, kMax };

template <class T>
__global__ void stored_forward(int64_t n, StoredOp op, StoredBottoms<T> in, T* y, int32_t* arg) {
  STRATA_CUDA_LOOP(j, n) {
    float acc = neuron_load(in.x[0][j]);
    if (op == StoredOp::kSum) acc *= in.coeff[0];
    int32_t won = 0;
    for (int i = 1; i < in.k; ++i) {
      const float v = neuron_load(in.x[i][j]);
      if (op == StoredOp::kSum) {
        acc += in.coeff[i] * v;
      } else if (op == StoredOp::kProd) {
        acc *= v;
      } else if (v > acc) {  // strict: ties go to the earlier bottom
        acc = v;
        won = i;
      }
    }
    y[j] = neuron_store<T>(acc);
    if (arg) arg[j] = won;
  }
}

// dx for bottom `me`: SUM c * dy; MAX dy where `me` won; PROD dy times the
// other bottoms (y == nullptr) or dy * y / x_me.
template <class T>
__global__ void stored_backward(int64_t n, StoredOp op, int me, StoredBottoms<T> in, const T* y, const int32_t* arg,
                                const T* dy, T* dx) {
  STRATA_CUDA_LOOP(j, n) {
    float g = neuron_load(dy[j]);
    if (op == StoredOp::kSum) {
      g *= in.coeff[me];
    } else if (op == StoredOp::kMax) {
      g = arg[j] == me ? g : 0.0f;
    } else if (y == nullptr) {
      for (int o = 0; o < in.k; ++o) {
        if (o != me) g *= neuron_load(in.x[o][j]);
      }
    } else {
      g = g * neuron_load(y[j]) / neuron_load(in.x[me][j]);
    }
    dx[j] = neuron_store<T>(g);
  }
}

}  // namespace

void EltwiseLayer::forward_stored_cuda(const BlobVec& bottom, const BlobVec& top) {
  Tensor& out = top[0]->data;
  for (const Blob* b : bottom) check_same_storage("Eltwise forward", {&out, &b->data});
  STRATA_CHECK(bottom.size() <= kMaxStoredBottoms, "Eltwise: ", bottom.size(), " bottoms stored in ",
               dtype_name(out.dtype()), " (takes_storage allows ", kMaxStoredBottoms, ")");
  const int64_t n = out.numel();
  if (n == 0) return;
  const StoredOp op = op_ == Op::kSum ? StoredOp::kSum : op_ == Op::kProd ? StoredOp::kProd : StoredOp::kMax;
  with_device_element(out.dtype(), "Eltwise forward", [&](auto e) {
    using T = decltype(e);
    StoredBottoms<T> in{};
    in.k = static_cast<int>(bottom.size());
    for (size_t i = 0; i < bottom.size(); ++i) {
      in.x[i] = static_cast<const T*>(bottom[i]->data.raw_data());
      in.coeff[i] = op_ == Op::kSum ? coeffs_[i] : 1.0f;
    }
    int32_t* arg = op_ == Op::kMax ? argmax_.device_data<int32_t>() : nullptr;
    stored_forward<T><<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
        n, op, in, static_cast<T*>(out.raw_data()), arg);
    STRATA_KERNEL_CHECK();
  });
}

void EltwiseLayer::backward_stored_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                                        const BlobVec& bottom) {
  const Tensor& grad = top[0]->diff;
  const int64_t n = grad.numel();
  if (n == 0) return;
  STRATA_CHECK(bottom.size() <= kMaxStoredBottoms, "Eltwise: ", bottom.size(), " bottoms stored in ",
               dtype_name(grad.dtype()), " (takes_storage allows ", kMaxStoredBottoms, ")");
  const StoredOp op = op_ == Op::kSum ? StoredOp::kSum : op_ == Op::kProd ? StoredOp::kProd : StoredOp::kMax;
  with_device_element(grad.dtype(), "Eltwise backward", [&](auto e) {
    using T = decltype(e);
    // The values read: PROD's bottoms (and output), MAX's winners; SUM none.
    StoredBottoms<T> in{};
    in.k = static_cast<int>(bottom.size());
    for (size_t i = 0; i < bottom.size(); ++i) {
      in.x[i] = op_ == Op::kProd ? static_cast<const T*>(bottom[i]->data.raw_data()) : nullptr;
      in.coeff[i] = op_ == Op::kSum ? coeffs_[i] : 1.0f;
    }
    const T* y = op_ == Op::kProd && prod_grad_ == ProdGrad::kDivide ? static_cast<const T*>(top[0]->data.raw_data())
                                                                      : nullptr;
    const int32_t* arg = op_ == Op::kMax ? argmax_.device_data<int32_t>() : nullptr;
    for (size_t i = 0; i < bottom.size(); ++i) {
      if (!propagate_down[i]) continue;
      check_same_storage("Eltwise backward", {&grad, &bottom[i]->diff});
      stored_backward<T><<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
          n, op, static_cast<int>(i), in, y, arg, static_cast<const T*>(grad.raw_data()),
          static_cast<T*>(bottom[i]->diff.raw_data()));
      STRATA_KERNEL_CHECK();
    }
  });
}

void EltwiseLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  const int64_t n = top[0]->numel();
  if (op_ == Op::kMax) cuda::ensure_on_device(argmax_, top[0]->shape(), DType::kI32, device());
  if (top[0]->data.dtype() != DType::kF32) return forward_stored_cuda(bottom, top);
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
  if (top[0]->diff.dtype() != DType::kF32) return backward_stored_cuda(top, propagate_down, bottom);
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
