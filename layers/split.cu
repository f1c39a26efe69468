#include "framework/cuda/math.h"
#include "layers/neuron_layer.cuh"  // neuron_load/neuron_store, with_device_element
#include "layers/split.h"

namespace strata {

namespace {

// The 16-bit backward: the tops' gradients summed in f32 (in the CPU's
// order), rounded once. The tops by value.
template <class T>
struct StoredTops {
  const T* d[SplitLayer::kMaxStoredTops];
  int k;
};

template <class T>
__global__ void sum_tops(int64_t n, StoredTops<T> tops, T* dx) {
  STRATA_CUDA_LOOP(j, n) {
    float sum = neuron_load(tops.d[0][j]);
    for (int i = 1; i < tops.k; ++i) sum += neuron_load(tops.d[i][j]);
    dx[j] = neuron_store<T>(sum);
  }
}

}  // namespace

void SplitLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  for (Blob* t : top) {
    // Any dtype; queued on the compute stream.
    if (!is_bottom_memory(t->data, bottom[0]->data)) t->data.copy_from(bottom[0]->data);
  }
}

void SplitLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  Tensor& grad = bottom[0]->diff;
  for (const Blob* t : top) check_same_storage("Split backward", {&grad, &t->diff});
  const int64_t n = bottom[0]->numel();
  if (grad.dtype() == DType::kF32) {
    float* dx = grad.device_data<float>();
    cuda::copy(n, top[0]->diff.device_data<float>(), dx);
    for (size_t i = 1; i < top.size(); ++i) cuda::axpy(n, 1.0f, top[i]->diff.device_data<float>(), dx);
    return;
  }
  STRATA_CHECK(top.size() <= kMaxStoredTops, "Split: ", top.size(), " tops stored in ", dtype_name(grad.dtype()),
               " (takes_storage allows ", kMaxStoredTops, ")");
  if (n == 0) return;
  with_device_element(grad.dtype(), "Split backward", [&](auto e) {
    using T = decltype(e);
    StoredTops<T> tops{};
    tops.k = static_cast<int>(top.size());
    for (size_t i = 0; i < top.size(); ++i) tops.d[i] = static_cast<const T*>(top[i]->diff.raw_data());
    sum_tops<T><<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
        n, tops, static_cast<T*>(grad.raw_data()));
    STRATA_KERNEL_CHECK();
  });
}

}  // namespace strata
