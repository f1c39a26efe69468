// What the layers that read a data set share (Caffe's BaseDataLayer):
// no bottoms, one or two tops (the data, then the labels; a layer with more
// overrides max_tops), no gradient, and one way to the device. A layer
// writes each batch into host memory with next_batch(): on the CPU straight
// into the tops, on a GPU into pinned staging buffers that are copied to the
// device tops on the copy stream (framework/cuda/batch_upload.h, a double
// buffer per top), so that a data layer has no CUDA code of its own.
#pragma once

#include <memory>
#include <vector>

#include "framework/layer.h"

namespace strata {

// A layer with no bottoms whose tops take no gradient: the data layers
// below, Input and DummyData.
class SourceLayer : public Layer {
 public:
  using Layer::Layer;

  int min_bottoms() const override { return 0; }
  int max_bottoms() const override { return 0; }
  int max_tops() const override { return 2; }
  bool can_backward_to(int /*bottom_index*/) const override { return false; }
  void backward_cpu(const BlobVec& /*top*/, const std::vector<bool>& /*propagate_down*/,
                    const BlobVec& /*bottom*/) override {}
};

class DataLayer : public SourceLayer {
 public:
  using SourceLayer::SourceLayer;

  void forward_cpu(const BlobVec& bottom, const BlobVec& top) final;
  STRATA_CUDA_METHODS;  // in layers/data_layer.cu

 protected:
  // The next batch: top i's numel() floats into out[i] (host memory, one
  // pointer per top, in the tops' order and shapes from reshape()).
  virtual void next_batch(const BlobVec& top, const std::vector<float*>& out) = 0;
  // Copies a batch read into `values` to `out`, checking that it fills the
  // top: an Error naming the layer, `what` ("data", "labels") and both sizes.
  void copy_batch(const std::vector<float>& values, const Blob& top, float* out, const char* what) const;

#ifdef STRATA_WITH_CUDA
 private:
  struct CudaState;  // pinned staging buffers, one uploader per top
  std::shared_ptr<CudaState> cuda_;
#endif
};

}  // namespace strata
