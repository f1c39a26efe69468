// Scratch: memory a layer needs only inside one forward or backward call
// (im2col columns, Winograd tiles, per-thread partial sums, attention's
// backward temporaries), as opposed to what it keeps between calls (a
// pooling mask, attention's q, k and v).
//
// A layer says how much it needs (Layer::scratch_bytes) and takes it at the
// start of each call (Layer::scratch). In a Net planned by lifetime each
// call has a place in the net's arena at its step (framework/net_plan.cpp),
// in bytes nothing else holds then; a call that needs more than its place
// takes the net's SharedScratch, grown to the need (a TEST net shares the
// TRAIN net's). Under SEPARATE every layer has a SharedScratch of its own. A
// layer run alone (a test calling forward_cpu) gets a buffer of its own.
#pragma once

#include <cstddef>

#include "framework/tensor.h"

namespace strata {

// Lays tensors out one after another in a block of bytes, each at a 64-byte
// boundary (a cache line, the widest SIMD load). Without a block it only
// counts: a layer runs the same layout once counting (scratch_bytes) and
// once over the block it was given, so the two always agree.
class ScratchCarver {
 public:
  static constexpr size_t kAlignment = 64;
  ScratchCarver() = default;  // counts only; take() returns empty tensors
  explicit ScratchCarver(const Tensor& block) : block_(&block) {}
  // The next `shape` of `dtype`: a view of the block, or (counting) an
  // empty tensor. ShapeError when the block is too small, naming both sizes.
  Tensor take(const Shape& shape, DType dtype = DType::kF32);
  // For f32 code in a call on 16-bit blobs: `t` itself when it is f32, else
  // its values widened (cast_into, on t's device) into the next block of its
  // shape.
  Tensor f32_of(const Tensor& t);
  // `t` itself when it is f32, else the next block of its shape in f32, for
  // the call to write and then round into t (cast_into).
  Tensor f32_for(const Tensor& t);
  size_t bytes() const { return used_; }

 private:
  const Tensor* block_ = nullptr;
  size_t used_ = 0;
};

// One u8 buffer for the layers of the nets that run one after another on one
// thread and one device. It grows to the largest request and never shrinks;
// what it held is undefined at every hand-out (checked mode: all NaN).
class SharedScratch {
 public:
  explicit SharedScratch(Device device) : device_(device) {}
  // Sizes the buffer for `bytes` without writing to it: under an open
  // MemoryPlan it is counted there, and host memory is taken on first use.
  void reserve(size_t bytes);
  // At least `bytes`, valid until the next get() by anyone.
  const Tensor& get(size_t bytes);
  // Checked mode (BlobMemory::kByLifetimeChecked): every get() first fills
  // the buffer with NaN, so a layer that reads scratch written by an earlier
  // call (its own forward's, or another layer's) reads NaN.
  void set_poison(bool poison) { poison_ = poison; }
  size_t bytes() const { return buffer_.nbytes(); }
  const void* storage_id() const { return buffer_.storage_id(); }

 private:
  Device device_;
  Tensor buffer_;
  bool poison_ = false;
};

}  // namespace strata
