// DummyData (Caffe "DummyData"): tops of fixed shapes filled by fillers on
// every forward: constant 0 without a data_filler, one filler for every top,
// or one per top. Shapes come from `shape { dim: ... }` (one for every top,
// or one per top) or from Caffe's legacy num/channels/height/width (each
// given once for every top, or once per top). Used for nets that need a
// blob of a given shape without data (benchmarks, deploy stubs).
#pragma once

#include <vector>

#include "framework/filler.h"
#include "framework/layer.h"
#include "layers/data_layer.h"

namespace strata {

class DummyDataLayer : public SourceLayer {
 public:
  DummyDataLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();

  int max_tops() const override { return -1; }

  void setup(const BlobVec& bottom, const BlobVec& top) override;
  void reshape(const BlobVec& bottom, const BlobVec& top) override;
  void forward_cpu(const BlobVec& bottom, const BlobVec& top) override;
  STRATA_CUDA_METHODS;  // in dummy_data.cu

 private:
  // Fills every top from its filler, on whichever device the tops live:
  // random fillers draw on the host (the layer's RNG, so CPU and GPU runs
  // see the same numbers) and copy to the device.
  void refill(const BlobVec& top);

  std::vector<Shape> shapes_;        // one per top
  std::vector<FillerSpec> fillers_;  // one per top
  std::vector<Tensor> staging_;      // host buffers for tops on a device
};

}  // namespace strata
