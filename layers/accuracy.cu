#include <string>

#include "framework/cuda/elements.cuh"
#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "framework/error.h"
#include "layers/accuracy.h"
#include "layers/loss_layer.h"

namespace strata {

struct AccuracyLayer::CudaState {
  Tensor counts;  // i32 [2 + 2 * C]: total, correct, then per class total and correct
  cuda::DeferredIndexCheck bad_label;
  int64_t checked_inner = 1, checked_classes = 0;
};

namespace {

// Caffe's tie rule: correct when fewer than top_k scores are strictly greater
// than the label's. Integer atomics: exact and order-independent.
// Scores stored as T (float, bf16, half): widening keeps their order.
template <class T>
__global__ void accuracy_count_kernel(int64_t positions, int64_t channels, int64_t inner, int64_t top_k,
                                      const T* x, const float* label, int has_ignore, float ignore,
                                      int32_t* counts, unsigned long long* bad) {
  int32_t* class_total = counts + 2;
  int32_t* class_correct = counts + 2 + channels;
  STRATA_CUDA_LOOP(pos, positions) {
    const int32_t l = device_class_label(label[pos], channels, has_ignore != 0, ignore, pos, bad);
    if (l < 0) continue;
    const int64_t o = pos / inner, i = pos - o * inner;
    const T* xo = x + o * channels * inner + i;
    const float target = cuda::load_element(xo[l * inner]);
    bool finite = isfinite(target);  // a non-finite score anywhere in the row counts as wrong (as on the CPU)
    int64_t greater = 0;
    for (int64_t c = 0; c < channels; ++c) {
      const float s = cuda::load_element(xo[c * inner]);
      greater += s > target;
      finite = finite && isfinite(s);
    }
    atomicAdd(&counts[0], 1);
    atomicAdd(&class_total[l], 1);
    if (finite && greater < top_k) {
      atomicAdd(&counts[1], 1);
      atomicAdd(&class_correct[l], 1);
    }
  }
}

__global__ void accuracy_finish_kernel(int64_t channels, const int32_t* counts, float* accuracy, float* per_class) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    accuracy[0] = counts[0] > 0 ? static_cast<float>(static_cast<double>(counts[1]) / counts[0]) : 0.0f;
  }
  if (!per_class) return;
  STRATA_CUDA_LOOP(c, channels) {
    const int32_t t = counts[2 + c];
    per_class[c] = t > 0 ? static_cast<float>(static_cast<double>(counts[2 + channels + c]) / t) : 0.0f;
  }
}

}  // namespace

void AccuracyLayer::before_replay() {
  if (!cuda_) return;
  CudaState& st = *cuda_;
  report_bad_label_of_previous_batch(where(), st.bad_label.before_replay(), st.checked_inner, st.checked_classes,
                                     ignore_label_);
}

void AccuracyLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  if (!cuda_) cuda_ = std::make_shared<CudaState>();
  CudaState& st = *cuda_;
  report_bad_label_of_previous_batch(where(), st.bad_label.previous(), st.checked_inner, st.checked_classes,
                                     ignore_label_);
  const int64_t positions = outer_ * inner_;
  cuda::ensure_on_device(st.counts, {2 + 2 * channels_}, DType::kI32, device());
  int32_t* counts = st.counts.device_data<int32_t>();
  STRATA_CUDA_CHECK(cudaMemsetAsync(counts, 0, sizeof(int32_t) * static_cast<size_t>(2 + 2 * channels_),
                                    cuda::compute_stream()));
  unsigned long long* bad_slot = st.bad_label.arm();
  st.checked_inner = inner_ > 0 ? inner_ : 1;
  st.checked_classes = channels_;
  if (positions > 0) {
    const Tensor& xt = bottom[0]->data;
    cuda::with_device_element(xt.dtype(), "Accuracy forward", [&](auto e) {
      using T = decltype(e);
      accuracy_count_kernel<T><<<cuda::blocks_for(positions), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
          positions, channels_, inner_, top_k_, static_cast<const T*>(xt.raw_data()),
          bottom[1]->data.device_data<float>(), ignore_label_ ? 1 : 0,
          ignore_label_ ? static_cast<float>(*ignore_label_) : 0.0f, counts, bad_slot);
      STRATA_KERNEL_CHECK();
    });
  }
  st.bad_label.record();
  float* per_class = top.size() > 1 ? top[1]->data.device_data<float>() : nullptr;
  accuracy_finish_kernel<<<cuda::blocks_for(channels_), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      channels_, counts, top[0]->data.device_data<float>(), per_class);
  STRATA_KERNEL_CHECK();
}

void AccuracyLayer::backward_cuda(const BlobVec& /*top*/, const std::vector<bool>& /*propagate_down*/,
                                  const BlobVec& /*bottom*/) {}

}  // namespace strata
