// Input: declares the shapes of blobs whose values the user of the Net sets
// (deploy nets, or feeding data from outside). Forward does nothing.
#pragma once

#include <vector>

#include "framework/layer.h"
#include "layers/data_layer.h"

namespace strata {

class InputLayer : public SourceLayer {
 public:
  InputLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();

  int max_tops() const override { return -1; }

  void setup(const BlobVec& bottom, const BlobVec& top) override;
  void reshape(const BlobVec& bottom, const BlobVec& top) override;
  void forward_cpu(const BlobVec& bottom, const BlobVec& top) override;
  STRATA_CUDA_METHODS;  // in input.cu

 private:
  std::vector<Shape> shapes_;  // one per top, or a single one shared by all tops
};

}  // namespace strata
