#include <cmath>

#include "framework/cuda/elements.cuh"
#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "framework/cuda/stored_math.h"
#include "layers/batch_norm.h"
#include "layers/neuron_layer.h"  // check_same_storage

namespace strata {

namespace {

constexpr int kStatThreads = 256;

// One block per channel, two passes in double as on the CPU (the mean, then
// squared deviations); thread 0 then writes mean, biased variance, inv_std
// and (TRAIN, m > 1) updates the running statistics.
template <class T>
__global__ void batch_stats_kernel(int64_t num, int64_t channels, int64_t spatial, const T* x, float eps,
                                   int update_running, float fraction, float* mean, float* var, float* inv_std,
                                   float* running_mean, float* running_var) {
  const int64_t c = blockIdx.x;
  const int64_t m = num * spatial;
  double sum = 0.0;
  for (int64_t k = threadIdx.x; k < m; k += blockDim.x) {
    const int64_t n = k / spatial, i = k - n * spatial;
    sum += cuda::load_element(x[(n * channels + c) * spatial + i]);
  }
  sum = cuda::block_sum(sum);
  const double mu = m > 0 ? sum / static_cast<double>(m) : 0.0;
  double sq = 0.0;
  for (int64_t k = threadIdx.x; k < m; k += blockDim.x) {
    const int64_t n = k / spatial, i = k - n * spatial;
    const double d = cuda::load_element(x[(n * channels + c) * spatial + i]) - mu;
    sq += d * d;
  }
  sq = cuda::block_sum(sq);
  if (threadIdx.x == 0) {
    const float mean_c = static_cast<float>(mu);
    const float var_c = m > 0 ? static_cast<float>(sq / static_cast<double>(m)) : 0.0f;
    mean[c] = mean_c;
    var[c] = var_c;
    inv_std[c] = static_cast<float>(1.0 / sqrt(static_cast<double>(var_c) + eps));
    if (update_running) {
      const double f = fraction;
      const double unbias = static_cast<double>(m) / static_cast<double>(m - 1);
      running_mean[c] = static_cast<float>(f * running_mean[c] + (1.0 - f) * mean_c);
      running_var[c] = static_cast<float>(f * running_var[c] + (1.0 - f) * var_c * unbias);
    }
  }
}

// NHWC: the statistics from channel_row_sums' mean and biased variance, as
// batch_stats_kernel's thread 0 finishes them.
__global__ void finish_stats_kernel(int64_t channels, int64_t m, float eps, int update_running, float fraction,
                                    const float* mean, const float* var, float* inv_std, float* running_mean,
                                    float* running_var) {
  STRATA_CUDA_LOOP(c, channels) {
    inv_std[c] = static_cast<float>(1.0 / sqrt(static_cast<double>(var[c]) + eps));
    if (update_running) {
      const double f = fraction;
      const double unbias = static_cast<double>(m) / static_cast<double>(m - 1);
      running_mean[c] = static_cast<float>(f * running_mean[c] + (1.0 - f) * mean[c]);
      running_var[c] = static_cast<float>(f * running_var[c] + (1.0 - f) * var[c] * unbias);
    }
  }
}

__global__ void global_stats_kernel(int64_t channels, const float* running_mean, const float* running_var, float eps,
                                    float* mean, float* inv_std) {
  STRATA_CUDA_LOOP(c, channels) {
    mean[c] = running_mean[c];
    inv_std[c] = static_cast<float>(1.0 / sqrt(static_cast<double>(running_var[c]) + eps));
  }
}

// y may equal x: each element is read before the same thread writes it.
// x_norm is y as stored (rounded once).
template <class T>
__global__ void normalize_kernel(int64_t total, int64_t channels, int64_t spatial, const T* x, const float* mean,
                                 const float* inv_std, T* x_norm, T* y) {
  STRATA_CUDA_LOOP(k, total) {
    const int64_t c = (k / spatial) % channels;
    const T v = cuda::store_element<T>((cuda::load_element(x[k]) - mean[c]) * inv_std[c]);
    if (x_norm) x_norm[k] = v;
    y[k] = v;
  }
}

// Per channel: mean(dy) and mean(dy * x_norm), in double.
template <class T>
__global__ void grad_means_kernel(int64_t num, int64_t channels, int64_t spatial, const T* dy, const T* xn,
                                  float* mean_dy, float* mean_dy_xn) {
  const int64_t c = blockIdx.x;
  const int64_t m = num * spatial;
  double s1 = 0.0, s2 = 0.0;
  for (int64_t k = threadIdx.x; k < m; k += blockDim.x) {
    const int64_t n = k / spatial, i = k - n * spatial;
    const int64_t at = (n * channels + c) * spatial + i;
    const float g = cuda::load_element(dy[at]);
    s1 += g;
    s2 += static_cast<double>(g) * cuda::load_element(xn[at]);
  }
  s1 = cuda::block_sum(s1);
  s2 = cuda::block_sum(s2);
  if (threadIdx.x == 0) {
    mean_dy[c] = m > 0 ? static_cast<float>(s1 / static_cast<double>(m)) : 0.0f;
    mean_dy_xn[c] = m > 0 ? static_cast<float>(s2 / static_cast<double>(m)) : 0.0f;
  }
}

// dx may equal dy (in place): each element is read before it is written.
template <class T>
__global__ void batch_grad_kernel(int64_t total, int64_t channels, int64_t spatial, const T* dy, const T* xn,
                                  const float* inv_std, const float* mean_dy, const float* mean_dy_xn, T* dx) {
  STRATA_CUDA_LOOP(k, total) {
    const int64_t c = (k / spatial) % channels;
    dx[k] = cuda::store_element<T>(inv_std[c] * (cuda::load_element(dy[k]) - mean_dy[c] -
                                                 cuda::load_element(xn[k]) * mean_dy_xn[c]));
  }
}

template <class T>
__global__ void global_grad_kernel(int64_t total, int64_t channels, int64_t spatial, const T* dy,
                                   const float* inv_std, T* dx) {
  STRATA_CUDA_LOOP(k, total) dx[k] = cuda::store_element<T>(cuda::load_element(dy[k]) * inv_std[(k / spatial) % channels]);
}

}  // namespace

void BatchNormLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  const Device dev = device();
  cuda::ensure_on_device(mean_, {channels_}, DType::kF32, dev);
  cuda::ensure_on_device(var_, {channels_}, DType::kF32, dev);
  cuda::ensure_on_device(inv_std_, {channels_}, DType::kF32, dev);
  const int64_t m = num_ * spatial_;
  const int64_t total = num_ * channels_ * spatial_;
  const Tensor& xt = bottom[0]->data;
  Tensor& yt = top[0]->data;
  check_same_storage("BatchNorm forward", {&xt, &yt});
  cudaStream_t s = cuda::compute_stream();
  if (channels_ == 0) return;
  if (stats_ == Stats::kBatch && m == 1 && phase() == Phase::kTrain) {
    shape_error("batch statistics need more than one value per channel, got bottom " + shape_str(bottom[0]->shape()) +
                "; use a larger batch or batch_norm_param { use_global_stats: true }");
  }
  Kept kept = take_kept();
  cuda::with_device_element(xt.dtype(), "BatchNorm forward", [&](auto e) {
    using T = decltype(e);
    const T* x = static_cast<const T*>(xt.raw_data());
    if (stats_ == Stats::kGlobal) {
      global_stats_kernel<<<cuda::blocks_for(channels_), cuda::kThreadsPerBlock, 0, s>>>(
          channels_, param(0).data.device_data<float>(), param(1).data.device_data<float>(), eps_,
          mean_.device_data<float>(), inv_std_.device_data<float>());
      STRATA_KERNEL_CHECK();
    } else {
      // Only TRAIN updates the running statistics (see forward_cpu).
      const int update = phase() == Phase::kTrain && m > 1 ? 1 : 0;
      if (call_layout() == Layout::kNHWC && m > 0) {
        // Rows of channels: one block per channel would read one element in
        // every C; the coalesced row sums instead (mean, then the centred squares).
        cuda::ensure_on_device(row_partials_, {cuda::row_sums_partials(num_, channels_) * 8}, DType::kU8, dev);
        double* partial = static_cast<double*>(row_partials_.raw_data());
        float* mean = mean_.device_data<float>();
        float* var = var_.device_data<float>();
        cuda::channel_row_sums(num_, channels_, x, nullptr, nullptr, xt.dtype(), cuda::RowTerm::kValue,
                               static_cast<double>(m), 0.0f, mean, partial);
        cuda::channel_row_sums(num_, channels_, x, nullptr, mean, xt.dtype(), cuda::RowTerm::kCenteredSquare,
                               static_cast<double>(m), 0.0f, var, partial);
        finish_stats_kernel<<<cuda::blocks_for(channels_), cuda::kThreadsPerBlock, 0, s>>>(
            channels_, m, eps_, update, moving_average_fraction_, mean, var, inv_std_.device_data<float>(),
            param(0).data.device_data<float>(), param(1).data.device_data<float>());
        STRATA_KERNEL_CHECK();
      } else {
        batch_stats_kernel<T><<<static_cast<unsigned>(channels_), kStatThreads, 0, s>>>(
            num_, channels_, spatial_, x, eps_, update, moving_average_fraction_, mean_.device_data<float>(),
            var_.device_data<float>(), inv_std_.device_data<float>(), param(0).data.device_data<float>(),
            param(1).data.device_data<float>());
        STRATA_KERNEL_CHECK();
      }
    }
    if (total == 0) return;
    T* xn = keeps_x_norm() ? static_cast<T*>(kept.x_norm.raw_data()) : nullptr;
    normalize_kernel<T><<<cuda::blocks_for(total), cuda::kThreadsPerBlock, 0, s>>>(
        total, channels_, spatial_, x, mean_.device_data<float>(), inv_std_.device_data<float>(), xn,
        static_cast<T*>(yt.raw_data()));
    STRATA_KERNEL_CHECK();
  });
}

void BatchNormLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                                   const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const int64_t total = num_ * channels_ * spatial_;
  if (total == 0) return;
  const Tensor& dyt = top[0]->diff;
  Tensor& dxt = bottom[0]->diff;  // may be dy itself when in place
  check_same_storage("BatchNorm backward", {&dyt, &dxt});
  const float* inv_std = inv_std_.device_data<float>();
  cudaStream_t s = cuda::compute_stream();
  const Kept kept = take_kept();  // as forward left it
  cuda::with_device_element(dyt.dtype(), "BatchNorm backward", [&](auto e) {
    using T = decltype(e);
    const T* dy = static_cast<const T*>(dyt.raw_data());
    T* dx = static_cast<T*>(dxt.raw_data());
    if (stats_ == Stats::kGlobal) {
      global_grad_kernel<T><<<cuda::blocks_for(total), cuda::kThreadsPerBlock, 0, s>>>(total, channels_, spatial_,
                                                                                     dy, inv_std, dx);
      STRATA_KERNEL_CHECK();
      return;
    }
    cuda::ensure_on_device(grad_means_, {2, channels_}, DType::kF32, device());
    float* mean_dy = grad_means_.device_data<float>();
    float* mean_dy_xn = mean_dy + channels_;
    // The normalised input: forward's copy, or the top as forward left it.
    const T* xn = static_cast<const T*>(keeps_x_norm() ? kept.x_norm.raw_data() : top[0]->data.raw_data());
    // Both means are complete before dx (possibly dy's memory) is written.
    const int64_t m = num_ * spatial_;
    if (call_layout() == Layout::kNHWC) {  // rows of channels: the coalesced row sums (see forward)
      cuda::ensure_on_device(row_partials_, {cuda::row_sums_partials(num_, channels_) * 8}, DType::kU8, device());
      double* partial = static_cast<double*>(row_partials_.raw_data());
      cuda::channel_row_sums(num_, channels_, dy, nullptr, nullptr, dyt.dtype(), cuda::RowTerm::kValue,
                             static_cast<double>(m), 0.0f, mean_dy, partial);
      cuda::channel_row_sums(num_, channels_, dy, xn, nullptr, dyt.dtype(), cuda::RowTerm::kProduct,
                             static_cast<double>(m), 0.0f, mean_dy_xn, partial);
    } else {
      grad_means_kernel<T><<<static_cast<unsigned>(channels_), kStatThreads, 0, s>>>(num_, channels_, spatial_, dy,
                                                                                     xn, mean_dy, mean_dy_xn);
      STRATA_KERNEL_CHECK();
    }
    batch_grad_kernel<T><<<cuda::blocks_for(total), cuda::kThreadsPerBlock, 0, s>>>(
        total, channels_, spatial_, dy, xn, inv_std, mean_dy, mean_dy_xn, dx);
    STRATA_KERNEL_CHECK();
  });
}

}  // namespace strata
