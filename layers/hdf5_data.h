// HDF5Data: Caffe's HDF5 input layer. hdf5_data_param { source: a text file
// listing .h5 files, batch_size, shuffle }; each top reads the dataset of
// its own name ("data", "label", ...) from every file, rows along axis 0
// (framework/data/hdf5_reader.h). No transform, as in Caffe. Sharded per
// rank; the reading position is saved in snapshots.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "framework/data/hdf5_reader.h"
#include "framework/layer_registry.h"
#include "layers/data_layer.h"

namespace strata {

class Hdf5DataLayer : public DataLayer {
 public:
  Hdf5DataLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();

  int max_tops() const override { return -1; }

  void setup(const BlobVec& bottom, const BlobVec& top) override;
  void reshape(const BlobVec& bottom, const BlobVec& top) override;

  std::string save_state() const override;
  void load_state(const std::string& state) override;

 private:
  void next_batch(const BlobVec& top, const std::vector<float*>& out) override;

  std::string source_;
  hdf5::ReaderOptions options_;
  std::unique_ptr<hdf5::Reader> reader_;
};

}  // namespace strata
