// HDF5Output: Caffe's HDF5 output layer. Appends each forward's bottoms to
// the datasets "data" and "label" (Caffe's names) of
// hdf5_output_param { file_name }, created when the net is built and
// flushed after every batch, so the file is complete at any point. No tops.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "framework/data/hdf5_file.h"
#include "framework/layer_registry.h"

namespace strata {

class Hdf5OutputLayer : public Layer {
 public:
  Hdf5OutputLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();

  int min_bottoms() const override { return 1; }
  int max_bottoms() const override { return 2; }
  int min_tops() const override { return 0; }
  int max_tops() const override { return 0; }
  bool can_backward_to(int /*bottom_index*/) const override { return false; }

  void setup(const BlobVec& bottom, const BlobVec& top) override;
  STRATA_CPU_METHODS;

  const std::string& file_name() const { return file_name_; }

 private:
  void write(const std::vector<const float*>& rows, const BlobVec& bottom);

  std::string file_name_;
  std::vector<Shape> row_shapes_;
  std::unique_ptr<hdf5::AppendFile> file_;

 public:
  STRATA_CUDA_METHODS;  // in hdf5_output.cu
};

}  // namespace strata
