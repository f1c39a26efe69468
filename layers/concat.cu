#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "framework/error.h"
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
  Tensor& all = whole.*field;
  const size_t elem = dtype_size(all.dtype());  // any dtype: bytes are moved, not values
  char* w = static_cast<char*>(all.raw_data());
  int64_t offset = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const int64_t row = parts[i]->data.dim(a) * inner;
    if (enabled[i] && row > 0 && outer > 0) {
      Tensor& part = parts[i]->*field;
      if (part.dtype() != all.dtype()) {
        fail<ShapeError>("Concat: bottom ", i, " is ", dtype_name(part.dtype()), " but the top is ",
                         dtype_name(all.dtype()), "; one call's blobs must be of one dtype");
      }
      char* p = static_cast<char*>(part.raw_data());
      const size_t wide = elem * static_cast<size_t>(top_row);
      const size_t narrow = elem * static_cast<size_t>(row);
      char* wp = w + elem * static_cast<size_t>(offset);
      if (dir == Direction::kGather) {
        STRATA_CUDA_CHECK(cudaMemcpy2DAsync(wp, wide, p, narrow, narrow, static_cast<size_t>(outer),
                                            cudaMemcpyDeviceToDevice, cuda::compute_stream()));
      } else {
        STRATA_CUDA_CHECK(cudaMemcpy2DAsync(p, narrow, wp, wide, narrow, static_cast<size_t>(outer),
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
