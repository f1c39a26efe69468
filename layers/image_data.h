// ImageData: reads image files (a folder of class subfolders, or a list file
// of "path label" lines), decodes and transforms them on a pool of threads
// (framework/data/image_loader.h) and serves batches: top data [batch, 3, H, W] f32
// and optional top label [batch] (the class index as a float).
// TRAIN applies the random crop and mirror of transform_param; TEST always
// crops the centre and never mirrors. Sharded per rank like the other data
// layers; the reading position is saved in snapshots, so resume is exact.
//
// Caffe's spelling (new_height / new_width / is_color / rand_skip, or
// mean_file / mean_value / force_color / force_gray) switches to Caffe's meaning: images in BGR
// (or gray with is_color: false) resized with OpenCV's bilinear filter to
// new_height x new_width, then Caffe's DataTransformer
// (framework/caffe/caffe_transform.h), no shuffling unless asked.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "framework/caffe/caffe_transform.h"
#include "framework/data/image_loader.h"
#include "framework/layer_registry.h"
#include "layers/data_layer.h"

namespace strata {

class ImageDataLayer : public DataLayer {
 public:
  ImageDataLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();

  void setup(const BlobVec& bottom, const BlobVec& top) override;
  void reshape(const BlobVec& bottom, const BlobVec& top) override;

  std::string save_state() const override;
  void load_state(const std::string& state) override;

  // Valid after setup().
  const ImageLoader& loader() const;
  std::optional<PassSize> pass_size() const override {
    if (!loader_) return std::nullopt;
    return PassSize{static_cast<int64_t>(loader_->shard().size()), loader_->batch_size()};
  }
  const ImageTransform& transform() const { return transform_; }

 private:
  void next_batch(const BlobVec& top, const std::vector<float*>& out) override;
  // Caffe's meaning: the transform, and the output size from the first image when no size is set.
  void setup_caffe(const std::vector<ImageItem>& items);

  enum class Convention { kTorchvision, kCaffe };
  Convention convention_ = Convention::kTorchvision;
  caffe::Transform caffe_transform_;
  int new_height_ = 0, new_width_ = 0;
  caffe::ColorMode color_ = caffe::ColorMode::kColor;
  int64_t rand_skip_ = 0;

  std::string source_;
  std::string root_folder_;
  ImageTransform transform_;
  ImageLoaderOptions options_;
  std::unique_ptr<ImageLoader> loader_;
  ImageBatch batch_;
};

// The transform_param of an ImageData layer (also used by `strata embed`).
// Random crop and mirror apply only in TRAIN.
const std::vector<std::string>& image_transform_keys();
ImageTransform read_image_transform(const ConfigNode& transform_param, Phase phase, const std::string& where);

}  // namespace strata
