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
#include "layers/data_layer.h"

namespace strata {

class CaffeDataLayer : public DataLayer {
 public:
  CaffeDataLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();

  void setup(const BlobVec& bottom, const BlobVec& top) override;
  void reshape(const BlobVec& bottom, const BlobVec& top) override;

  std::string save_state() const override;
  void load_state(const std::string& state) override;

  // Valid after setup().
  const caffe::DatumReader& reader() const;

 private:
  void next_batch(const BlobVec& top, const std::vector<float*>& out) override;

  caffe::DatumReaderOptions options_;

  std::string source_places_;  // where a source found nowhere was looked for, for the error
  std::unique_ptr<caffe::DatumReader> reader_;
  std::vector<float> data_, labels_;
};

}  // namespace strata
