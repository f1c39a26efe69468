// MnistData: the MNIST idx files (idx3 images, idx1 labels, uncompressed),
// served as [N, 1, rows, cols] floats: raw bytes through transform_param
// (Caffe's LeNet uses scale: 0.00390625).
#pragma once

#include "framework/layer_registry.h"
#include "layers/in_memory_data.h"

namespace strata {

class MnistDataLayer : public InMemoryDataLayer {
 public:
  MnistDataLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();

 protected:
  InMemoryData load() override;

 private:
  std::string source_path_;
  std::string label_path_;  // empty: no labels
};

}  // namespace strata
