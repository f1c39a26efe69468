// The image transforms of torchvision's (and timm's) evaluation and training
// pipelines, on 8-bit RGB images:
//   resize the shorter side (PIL's bilinear / bicubic resampling, whose
//   filter support widens with the downscale factor, i.e. antialiased, in
//   PIL's fixed-point arithmetic so results match Image.resize exactly),
//   centre or random crop (zero padding where the crop is larger, as
//   torchvision's CenterCrop), horizontal flip, and
//   out[c] = (pixel * scale - mean[c]) / std[c] into planar CHW floats.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/rng.h"
#include "framework/data/image_decode.h"

namespace strata {

enum class Interpolation { kBilinear, kBicubic };
enum class CropMode { kCenter, kRandom };
enum class MirrorMode { kOff, kRandom };
enum class TransformPreset { kNone, kImagenet, kVitEval };

struct ImageTransform {
  int resize = 0;        // shorter side after resizing; 0 = keep the size
  Interpolation interpolation = Interpolation::kBilinear;
  int crop_height = 0;   // 0 = no crop (the output is the resized image)
  int crop_width = 0;
  CropMode crop = CropMode::kCenter;
  MirrorMode mirror = MirrorMode::kOff;
  double scale = 1.0 / 255.0;  // ToTensor
  std::vector<float> mean = {0.0f, 0.0f, 0.0f};
  std::vector<float> std = {1.0f, 1.0f, 1.0f};

  // Consumes random numbers (random crop or flip)?
  bool is_random() const { return crop == CropMode::kRandom || mirror == MirrorMode::kRandom; }
};

// NONE: ToTensor only. IMAGENET (torchvision): resize 256 bilinear, centre
// crop 224, ImageNet mean/std. VIT_EVAL (timm ViT eval, crop_pct 0.9):
// resize 248 bicubic, centre crop 224, mean 0.5, std 0.5.
ImageTransform preset_transform(TransformPreset preset);
// "NONE"/"IMAGENET"/"VIT_EVAL" (any case; "vit" also); ConfigError otherwise.
TransformPreset parse_transform_preset(const std::string& text);

// torchvision's output size for resizing the shorter side to `size`:
// the longer side becomes int(size * long / short).
void resized_size(int width, int height, int size, int* out_width, int* out_height);

// PIL's Image.resize(..., BILINEAR | BICUBIC) on an RGB image.
RgbImage resize_image(const RgbImage& img, int out_width, int out_height, Interpolation interp);

// Top-left corner of a crop; negative offsets mean zero padding on that side.
struct CropBox {
  int top = 0;
  int left = 0;
  int height = 0;
  int width = 0;
};
// torchvision's CenterCrop: offset round((size - crop) / 2) with Python's
// round-half-to-even, or padding (crop - size) // 2 when the crop is larger.
CropBox center_crop_box(int height, int width, int crop_height, int crop_width);

// Output dims of apply_transform for an image of this size.
void transform_output_size(const ImageTransform& t, int width, int height, int* out_width, int* out_height);

// The whole pipeline into out (3 x H x W floats, H x W from
// transform_output_size). `rng` supplies the random crop offset and flip;
// it may be null when !t.is_random().
void apply_transform(const RgbImage& img, const ImageTransform& t, Rng* rng, float* out);

}  // namespace strata
