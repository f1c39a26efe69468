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

namespace strata {

class Hdf5DataLayer : public Layer {
 public:
  Hdf5DataLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();

  int min_bottoms() const override { return 0; }
  int max_bottoms() const override { return 0; }
  int min_tops() const override { return 1; }
  int max_tops() const override { return -1; }
  bool can_backward_to(int /*bottom_index*/) const override { return false; }

  void setup(const BlobVec& bottom, const BlobVec& top) override;
  void reshape(const BlobVec& bottom, const BlobVec& top) override;
  void forward_cpu(const BlobVec& bottom, const BlobVec& top) override;
  void backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                    const BlobVec& bottom) override;

  std::string save_state() const override;
  void load_state(const std::string& state) override;

 private:
  std::string where_at() const;
  // The next batch into staged_ (one vector per top).
  void read_batch();

  std::string source_;
  hdf5::ReaderOptions options_;
  std::unique_ptr<hdf5::Reader> reader_;
  std::vector<std::vector<float>> staged_;

#ifdef STRATA_WITH_CUDA
 public:
  STRATA_CUDA_METHODS;

 private:
  struct CudaState;  // pinned staging buffers per top, in layers/hdf5_data.cu
  std::shared_ptr<CudaState> cuda_;
#endif
};

}  // namespace strata
