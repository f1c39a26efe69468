// InMemoryDataLayer: the base of the data layers that load a whole data set
// at setup (ArrayData, MnistData, Cifar10Data) and serve it through a
// DataSource (framework/data/data_source.h, the input pipeline's sampling,
// sharding and transform). Not registered itself: its subclasses are.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/data/data_source.h"
#include "framework/layer.h"

namespace strata {

// Base class of the layers that load a whole data set at setup and serve it
// through a DataSource: no bottoms; tops `data` and (optionally) `label`.
// Subclasses only read their files.
class InMemoryDataLayer : public Layer {
 public:
  // `param_block` is the layer's own block ("mnist_data_param").
  InMemoryDataLayer(const LayerSpec& spec, const LayerContext& ctx, std::string param_block);

  int min_bottoms() const override { return 0; }
  int max_bottoms() const override { return 0; }
  int min_tops() const override { return 1; }
  int max_tops() const override { return 2; }
  bool can_backward_to(int /*bottom_index*/) const override { return false; }

  void setup(const BlobVec& bottom, const BlobVec& top) override;
  void reshape(const BlobVec& bottom, const BlobVec& top) override;
  void forward_cpu(const BlobVec& bottom, const BlobVec& top) override;
  void backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                    const BlobVec& bottom) override;

  std::string save_state() const override;
  void load_state(const std::string& state) override;

  // Valid after setup().
  const DataSource& source() const;
  const DataSource* data_source() const override { return source_.get(); }

 protected:
  // Reads the data set; called once by setup(). IoErrors it throws are
  // prefixed with the layer's name.
  virtual InMemoryData load() = 0;
  const ConfigNode& data_param() const { return block(param_block_); }
  // A config path looked up in the config file's folder, then in the working
  // directory, where Caffe's files name their data from (framework/io/input_path.h).
  std::string resolve(const std::string& path) const;
  // "layer 'x' (Type) at file:line:col"
  std::string where_at() const;

 private:
  std::string param_block_;
  DataOptions options_;
  DataTransform transform_;
  std::unique_ptr<DataSource> source_;

#ifdef STRATA_WITH_CUDA
 public:
  STRATA_CUDA_METHODS;

 private:
  struct CudaState;  // device scratch and library handles, in layers/in_memory_data.cu
  std::shared_ptr<CudaState> cuda_;
#endif
};

}  // namespace strata
