// ArrayData: serves a data set held in two .npy files (inputs and integer
// labels), loaded whole at setup. For small data sets such as data/digits.
#pragma once

#include "framework/layer_registry.h"
#include "layers/in_memory_data.h"

namespace strata {

class ArrayDataLayer : public InMemoryDataLayer {
 public:
  ArrayDataLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();

 protected:
  InMemoryData load() override;

 private:
  std::string source_path_;
  std::string label_path_;  // empty: no labels
};

}  // namespace strata
