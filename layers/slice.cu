// Slice on the GPU: one strided 2-D copy per top, as Concat's in reverse.
#include "framework/cuda/runtime.h"
#include "layers/slice.h"

namespace strata {

namespace {

enum class Direction { kScatter, kGather };

void move_parts_cuda(Direction dir, Blob& whole, const BlobVec& parts, const std::vector<int64_t>& sizes,
                     Tensor Blob::*field, int64_t outer, int64_t inner) {
  int64_t dim = 0;
  for (int64_t s : sizes) dim += s;
  const size_t wide = sizeof(float) * static_cast<size_t>(dim * inner);
  float* w = (whole.*field).device_data<float>();
  int64_t offset = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const int64_t part_row = sizes[i] * inner;
    if (part_row > 0 && outer > 0) {
      float* p = (parts[i]->*field).device_data<float>();
      const size_t narrow = sizeof(float) * static_cast<size_t>(part_row);
      if (dir == Direction::kScatter) {
        STRATA_CUDA_CHECK(cudaMemcpy2DAsync(p, narrow, w + offset, wide, narrow, static_cast<size_t>(outer),
                                            cudaMemcpyDeviceToDevice, cuda::compute_stream()));
      } else {
        STRATA_CUDA_CHECK(cudaMemcpy2DAsync(w + offset, wide, p, narrow, narrow, static_cast<size_t>(outer),
                                            cudaMemcpyDeviceToDevice, cuda::compute_stream()));
      }
    }
    offset += part_row;
  }
}

}  // namespace

void SliceLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  move_parts_cuda(Direction::kScatter, *bottom[0], top, sizes_, &Blob::data, outer_, inner_);
}

void SliceLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  move_parts_cuda(Direction::kGather, *bottom[0], top, sizes_, &Blob::diff, outer_, inner_);
}

}  // namespace strata
