// Element-wise reduction kernels shared by every collective algorithm:
// dst[i] = op(dst[i], src[i]) over raw buffers of a given DType.
//
// Semantics per type:
//   f32           computed in f32.
//   f16, bf16     each element widened to f32, combined, rounded back to
//                 nearest-even; so a sum over several ranks rounds once per
//                 step (the order of steps is the algorithm's).
//   i32           two's-complement; sums wrap around on overflow.
//   u8            unsigned; sums wrap modulo 256.
// kAverage reduces like kSum; the algorithms call scale_average() once on
// the fully reduced data. For i32 and u8 that is integer division truncating
// toward zero (sum 7 over 2 ranks gives 3), applied to the wrapped sum.
#pragma once

#include <cstddef>

#include "framework/communicator.h"
#include "framework/dtype.h"

namespace strata::parallel {

// dst = op(dst, src) for n elements; kAverage behaves as kSum here.
void reduce_into(void* dst, const void* src, size_t n, DType dtype, ReduceOp op);

// Divides n elements by world_size (the finishing step of kAverage).
void scale_average(void* data, size_t n, DType dtype, int world_size);

// "sum", "average", "min", "max".
const char* reduce_op_name(ReduceOp op);

}  // namespace strata::parallel
