#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "layers/concat.h"

namespace strata {

namespace {

enum class Direction { kGather, kScatter };

// Each bottom's [outer, dim_i * inner] block to or from its column range of
// the top's [outer, top_dim * inner]: one strided 2-D copy per bottom.
void move_slices_cuda(Direction dir, const BlobVec& parts, const std::vector<bool>& enabled, Blob& whole,
                      Tensor Blob::*field, int64_t outer, int64_t inner, int64_t axis) {
  const int a = static_cast<int>(axis);
  const int64_t top_row = whole.data.dim(a) * inner;
  float* w = (whole.*field).device_data<float>();
  int64_t offset = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const int64_t row = parts[i]->data.dim(a) * inner;
    if (enabled[i] && row > 0 && outer > 0) {
      float* p = (parts[i]->*field).device_data<float>();
      const size_t wide = sizeof(float) * static_cast<size_t>(top_row);
      const size_t narrow = sizeof(float) * static_cast<size_t>(row);
      if (dir == Direction::kGather) {
        STRATA_CUDA_CHECK(cudaMemcpy2DAsync(w + offset, wide, p, narrow, narrow, static_cast<size_t>(outer),
                                            cudaMemcpyDeviceToDevice, cuda::compute_stream()));
      } else {
        STRATA_CUDA_CHECK(cudaMemcpy2DAsync(p, narrow, w + offset, wide, narrow, static_cast<size_t>(outer),
                                            cudaMemcpyDeviceToDevice, cuda::compute_stream()));
      }
    }
    offset += row;
  }
}

}  // namespace

void ConcatLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  all_.assign(bottom.size(), true);
  move_slices_cuda(Direction::kGather, bottom, all_, *top[0], &Blob::data, outer_, inner_, axis_);
}

void ConcatLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                                const BlobVec& bottom) {
  move_slices_cuda(Direction::kScatter, bottom, propagate_down, *top[0], &Blob::diff, outer_, inner_, axis_);
}

}  // namespace strata
