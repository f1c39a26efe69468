// ImageData: reads image files (a folder of class subfolders, or a list file
// of "path label" lines), decodes and transforms them on a pool of threads
// (framework/data/image_loader.h) and serves batches: top data [batch, 3, H, W] f32
// and optional top label [batch] (the class index as a float).
// TRAIN applies the random crop and mirror of transform_param; TEST always
// crops the centre and never mirrors. Sharded per rank like the other data
// layers; the reading position is saved in snapshots, so resume is exact.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "framework/layer_registry.h"
#include "framework/data/image_loader.h"

namespace strata {

class ImageDataLayer : public Layer {
 public:
  ImageDataLayer(const LayerSpec& spec, const LayerContext& ctx);
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
  const ImageLoader& loader() const;
  const ImageTransform& transform() const { return transform_; }

 private:
  std::string where_at() const;

  std::string source_;
  std::string root_folder_;
  ImageTransform transform_;
  ImageLoaderOptions options_;
  std::unique_ptr<ImageLoader> loader_;
  ImageBatch batch_;

#ifdef STRATA_WITH_CUDA
 public:
  bool has_cuda() const override { return true; }
  void forward_cuda(const BlobVec& bottom, const BlobVec& top) override;
  void backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                     const BlobVec& bottom) override;

 private:
  struct CudaState;  // pinned staging buffers and events, in layers/image_data.cu
  std::shared_ptr<CudaState> cuda_;
#endif
};

// The transform_param of an ImageData layer (also used by `strata embed`).
// Random crop and mirror apply only in TRAIN.
const std::vector<std::string>& image_transform_keys();
ImageTransform read_image_transform(const ConfigNode& transform_param, Phase phase, const std::string& where);

}  // namespace strata
