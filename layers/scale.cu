#include "framework/cuda/elements.cuh"
#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "framework/cuda/stored_math.h"
#include "layers/neuron_layer.h"  // check_same_storage
#include "layers/scale.h"

namespace strata {

namespace {

// x viewed as [outer, dim, inner]; y may equal x. T is the blobs' element
// (f32, or bf16/f16 with one bottom: the scale is then an f32 parameter).
template <class T>
__global__ void scale_forward(int64_t total, int64_t dim, int64_t inner, const T* x, const float* scale,
                              const float* bias, T* y) {
  STRATA_CUDA_LOOP(k, total) {
    const int64_t c = (k / inner) % dim;
    y[k] = cuda::store_element<T>(cuda::load_element(x[k]) * scale[c] + (bias ? bias[c] : 0.0f));
  }
}

template <class T>
__global__ void scale_backward(int64_t total, int64_t dim, int64_t inner, const T* dy, const float* scale, T* dx) {
  STRATA_CUDA_LOOP(k, total) {
    dx[k] = cuda::store_element<T>(cuda::load_element(dy[k]) * scale[(k / inner) % dim]);
  }
}

}  // namespace

void ScaleLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  const int64_t total = outer_ * dim_ * inner_;
  const Tensor& xt = bottom[0]->data;
  Tensor& yt = top[0]->data;
  check_same_storage("Scale forward", {&xt, &yt});
  // In place: the scale gradient needs the input the top overwrites.
  if (in_place_) take_x_copy().copy_from(xt);
  if (total == 0) return;
  const Blob* bias = bias_blob();
  const float* b = bias ? bias->data.device_data<float>() : nullptr;
  cuda::with_device_element(xt.dtype(), "Scale forward", [&](auto e) {
    using T = decltype(e);
    const T* x = static_cast<const T*>(xt.raw_data());
    T* y = static_cast<T*>(yt.raw_data());
    // The scale is f32: a parameter, or the second bottom (a form that runs in f32 only: takes_storage).
    const float* sc = scale_blob(bottom).data.device_data<float>();
    scale_forward<T><<<cuda::blocks_for(total), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
        total, dim_, inner_, x, sc, b, y);
    STRATA_KERNEL_CHECK();
  });
}

void ScaleLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  const Tensor& dyt = top[0]->diff;
  const Tensor xt = in_place_ ? take_x_copy() : bottom[0]->data;
  check_same_storage("Scale backward", {&dyt, &xt});
  const bool two_bottoms = bottom.size() > 1;
  const DType dtype = dyt.dtype();

  // Scale and bias gradients first: when in place, dx below overwrites dy.
  float* dscale = nullptr;
  float beta = 1.0f;  // params accumulate, bottom gradients are overwritten
  if (two_bottoms) {
    if (propagate_down[1]) {
      dscale = bottom[1]->diff.device_data<float>();
      beta = 0.0f;
    }
  } else {
    dscale = param(0).diff.device_data<float>();
  }
  Blob* bias = bias_blob();
  if (call_layout() == Layout::kNHWC && outer_ > 0) {
    // Rows of channels: the coalesced row sums (one block per channel would
    // read one element in every C).
    cuda::ensure_on_device(row_partials_, {cuda::row_sums_partials(outer_, dim_) * 8}, DType::kU8, device());
    double* partial = static_cast<double*>(row_partials_.raw_data());
    if (dscale) {
      cuda::channel_row_sums(outer_, dim_, dyt.raw_data(), xt.raw_data(), nullptr, dtype, cuda::RowTerm::kProduct, 1.0,
                             beta, dscale, partial);
    }
    if (bias) {
      cuda::channel_row_sums(outer_, dim_, dyt.raw_data(), nullptr, nullptr, dtype, cuda::RowTerm::kValue, 1.0, 1.0f,
                             bias->diff.device_data<float>(), partial);
    }
  } else {
    if (dscale) cuda::channel_sums_stored(outer_, dim_, inner_, dyt.raw_data(), xt.raw_data(), dtype, beta, dscale);
    if (bias) {
      cuda::channel_sums_stored(outer_, dim_, inner_, dyt.raw_data(), nullptr, dtype, 1.0f,
                                bias->diff.device_data<float>());
    }
  }

  const int64_t total = outer_ * dim_ * inner_;
  if (!propagate_down[0] || total == 0) return;
  Tensor& dxt = bottom[0]->diff;
  check_same_storage("Scale backward", {&dyt, &dxt});
  cuda::with_device_element(dtype, "Scale backward", [&](auto e) {
    using T = decltype(e);
    scale_backward<T><<<cuda::blocks_for(total), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
        total, dim_, inner_, static_cast<const T*>(dyt.raw_data()), scale_blob(bottom).data.device_data<float>(),
        static_cast<T*>(dxt.raw_data()));
    STRATA_KERNEL_CHECK();
  });
}

}  // namespace strata
