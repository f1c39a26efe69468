#include "framework/scratch.h"

#include <limits>

#include "framework/byte_size.h"
#include "framework/error.h"

namespace strata {

Tensor ScratchCarver::take(const Shape& shape, DType dtype) {
  const int64_t numel = shape_numel(shape);
  const size_t bytes = shape_bytes(shape, numel, dtype);
  if (bytes == 0) return block_ ? Tensor(shape, dtype, block_->device()) : Tensor();
  const size_t offset = (used_ + kAlignment - 1) / kAlignment * kAlignment;
  used_ = offset + bytes;
  if (!block_) return Tensor();
  if (used_ > block_->nbytes()) {
    fail<ShapeError>("scratch of ", format_bytes(block_->nbytes()), " is too small: the layout needs at least ",
                     format_bytes(used_), " (a layer's scratch_bytes() is smaller than what it takes)");
  }
  return block_->view_bytes(offset, bytes, shape, dtype);
}

Tensor ScratchCarver::f32_for(const Tensor& t) { return t.dtype() == DType::kF32 ? t : take(t.shape()); }

Tensor ScratchCarver::f32_of(const Tensor& t) {
  if (t.dtype() == DType::kF32) return t;
  Tensor wide = take(t.shape());
  cast_into(wide, t);
  return wide;
}

void SharedScratch::reserve(size_t bytes) {
  if (bytes <= buffer_.nbytes()) return;
  buffer_ = Tensor(Shape{static_cast<int64_t>(bytes)}, DType::kU8, device_);
}

const Tensor& SharedScratch::get(size_t bytes) {
  reserve(bytes);
  if (poison_ && buffer_.nbytes() >= sizeof(float)) {
    const size_t floats = buffer_.nbytes() / sizeof(float);
    buffer_.view_bytes(0, floats * sizeof(float), {static_cast<int64_t>(floats)}, DType::kF32)
        .fill(std::numeric_limits<float>::quiet_NaN());
  }
  return buffer_;
}

}  // namespace strata
