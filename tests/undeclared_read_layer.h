// A layer for the tests of what backward may read: y = x * x, whose backward
// reads x but declares that it reads nothing (Layer::backward_reads). The
// blobs' memory by lifetime (tests/blob_memory_test.cpp) and the 16-bit
// storage (tests/storage_dtype_test.cpp) must each catch it.
#pragma once

#include <cstdint>
#include <vector>

#include "framework/layer.h"

namespace strata::test {

class UndeclaredReadLayer : public Layer {
 public:
  using Layer::Layer;
  static LayerSchema schema() { return {}; }
  BackwardReads backward_reads() const override { return {false, false}; }
  void reshape(const BlobVec& bottom, const BlobVec& top) override { top[0]->reshape_like(*bottom[0]); }
  void forward_cpu(const BlobVec& bottom, const BlobVec& top) override {
    const float* x = bottom[0]->data.data<float>();
    float* y = top[0]->data.data<float>();
    for (int64_t i = 0; i < top[0]->numel(); ++i) y[i] = x[i] * x[i];
  }
  void backward_cpu(const BlobVec& top, const std::vector<bool>&, const BlobVec& bottom) override {
    const float* x = bottom[0]->data.data<float>();
    const float* dy = top[0]->diff.data<float>();
    float* dx = bottom[0]->diff.data<float>();
    for (int64_t i = 0; i < top[0]->numel(); ++i) dx[i] = 2.0f * x[i] * dy[i];
  }
};

}  // namespace strata::test
