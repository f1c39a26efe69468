// Data: Caffe's database input layer. Reads Datum records from an LMDB or
// LevelDB database (data_param { source backend batch_size rand_skip
// prefetch }) on a prefetch thread (framework/caffe/datum_reader.h), applies
// Caffe's transform_param (framework/caffe/caffe_transform.h) and serves
// top data [batch, C, H, W] f32 and optional top label [batch].
// Sharded per rank; the reading position is saved in snapshots.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "framework/caffe/datum_reader.h"
#include "framework/layer_registry.h"

namespace strata {

class CaffeDataLayer : public Layer {
 public:
  CaffeDataLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();

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
  const caffe::DatumReader& reader() const;

 private:
  std::string where_at() const;
  // The next batch into data_ and labels_.
  void read_batch();

  caffe::DatumReaderOptions options_;

  std::string source_places_;  // where a source found nowhere was looked for, for the error
  std::unique_ptr<caffe::DatumReader> reader_;
  std::vector<float> data_, labels_;

#ifdef STRATA_WITH_CUDA
 public:
  STRATA_CUDA_METHODS;

 private:
  struct CudaState;  // pinned staging buffers and events, in layers/caffe_data.cu
  std::shared_ptr<CudaState> cuda_;
#endif
};

}  // namespace strata
