// Cifar10Data: CIFAR-10 binary batches (records of 1 label byte + 3x32x32
// pixel bytes), one or more files concatenated in the order given, served as
// [N, 3, 32, 32] floats through transform_param.
#pragma once

#include <vector>

#include "framework/layer_registry.h"
#include "layers/in_memory_data.h"

namespace strata {

class Cifar10DataLayer : public InMemoryDataLayer {
 public:
  Cifar10DataLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();

 protected:
  InMemoryData load() override;

 private:
  std::vector<std::string> source_paths_;
};

}  // namespace strata
