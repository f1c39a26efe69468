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
#include "layers/data_layer.h"

namespace strata {

// Base class of the layers that load a whole data set at setup and serve it
// through a DataSource: no bottoms; tops `data` and (optionally) `label`.
// Subclasses only read their files.
class InMemoryDataLayer : public DataLayer {
 public:
  // `param_block` is the layer's own block ("mnist_data_param").
  InMemoryDataLayer(const LayerSpec& spec, const LayerContext& ctx, std::string param_block);

  void setup(const BlobVec& bottom, const BlobVec& top) override;
  void reshape(const BlobVec& bottom, const BlobVec& top) override;

  std::string save_state() const override;
  void load_state(const std::string& state) override;

  // Valid after setup().
  const DataSource& source() const;
  std::optional<PassSize> pass_size() const override {
    if (!source_) return std::nullopt;
    return PassSize{static_cast<int64_t>(source_->shard().size()), source_->batch_size()};
  }

 protected:
  // Reads the data set; called once by setup(). IoErrors it throws are
  // prefixed with the layer's name.
  virtual InMemoryData load() = 0;
  const ConfigNode& data_param() const { return block(param_block_); }
  // A config path looked up in the config file's folder, then in the working
  // directory, where Caffe's files name their data from (framework/io/input_path.h).
  std::string resolve(const std::string& path) const;

 private:
  void next_batch(const BlobVec& top, const std::vector<float*>& out) override;

  std::string param_block_;
  DataOptions options_;
  DataTransform transform_;
  std::unique_ptr<DataSource> source_;
};

}  // namespace strata
