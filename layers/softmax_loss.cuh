// The device scratch of the softmax-loss core (layers/softmax_loss.h), for
// the .cu files of SoftmaxWithLoss and InfogainLoss.
#pragma once

#include "framework/cuda/math.h"
#include "framework/tensor.h"
#include "layers/softmax_loss.h"

namespace strata {

struct SoftmaxLossLayer::CudaScratch {
  Tensor labels;     // i32 per position: class index, -1 = ignored (or invalid)
  Tensor terms;      // f32 per position: its loss, 0 when ignored
  Tensor valid;      // f32 per position: 1 when the label counts
  Tensor divisor;    // f32 scalar: divisor of the summed loss, kept for backward
  Tensor per_class;  // f32 per class, a subclass's own (InfogainLoss: sum_k H[c, k])
  cuda::DeferredIndexCheck bad_label;
  int64_t checked_inner = 1, checked_classes = 0;  // geometry of the batch bad_label checks
};

}  // namespace strata
