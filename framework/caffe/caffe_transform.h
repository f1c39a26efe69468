// Caffe's DataTransformer (transform_param), so that the numbers match a
// Caffe run. Images are planar C x H x W in Caffe's channel order (BGR for
// colour, 0-255 bytes, or floats from a Datum's float_data). Per output
// value, with (h_off, w_off) the crop corner:
//
//   v   = image[c][h_off + h][w_off + w]
//   out = (v - mean_file[c][h_off + h][w_off + w]) * scale   with mean_file
//       = (v - mean_value[c]) * scale                         with mean_value
//       = v * scale                                           otherwise
//   written at column (width - 1 - w) when mirrored.
//
// Crop: random corner (uniform over every position) in TRAIN, the centre
// ((size - crop) / 2, rounded down) in TEST. Mirror: when `mirror: true`, each
// image is flipped with probability 1/2 in either phase (as Caffe does; its
// files set mirror in the TRAIN layer only). The random draws per image come
// in Caffe's order: mirror, then the crop's row, then its column.
// force_color / force_gray apply to encoded (JPEG/PNG) images only, as in Caffe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/caffe/caffe_proto.h"
#include "framework/data/image_decode.h"
#include "framework/data/image_transform.h"  // CropMode, MirrorMode
#include "framework/layer.h"                  // Phase
#include "framework/rng.h"
#include "framework/tensor.h"

namespace strata::caffe {

enum class ColorMode { kNative, kColor, kGray };

struct Transform {
  float scale = 1.0f;
  std::vector<float> mean_values;  // empty, one for all channels, or one per channel
  Tensor mean;                     // [C, H, W] from mean_file; empty without one
  std::string mean_file;           // its path, for messages
  int crop_size = 0;
  CropMode crop = CropMode::kCenter;
  MirrorMode mirror = MirrorMode::kOff;
  ColorMode color = ColorMode::kNative;

  bool is_random() const { return mirror == MirrorMode::kRandom || (crop_size > 0 && crop == CropMode::kRandom); }
};

// Caffe's transform_param keys.
const std::vector<std::string>& transform_keys();
// Reads transform_param; mean_file is resolved against `base_dir` and read
// here. `where` names the layer in errors.
Transform read_transform(const ConfigNode& transform_param, Phase phase, const std::string& base_dir,
                         const std::string& where);

// An image before the transform: planar, BGR (or gray), bytes or floats.
struct Image {
  int channels = 0;
  int height = 0;
  int width = 0;
  std::vector<uint8_t> bytes;  // channels*height*width, or empty when floats are used
  std::vector<float> floats;
};

// A decoded RGB image in Caffe's form: BGR, or one gray channel where the
// file is gray (kNative) or kGray asks (OpenCV's BT.601 weights in fixed point).
Image from_rgb(const RgbImage& rgb, ColorMode color);
// A Datum's pixels; encoded ones are decoded (JPEG/PNG) with `color`.
// IoError naming `what` when the sizes and the payload disagree.
Image from_datum(const Datum& d, ColorMode color, const std::string& what);

// cv::resize(..., INTER_LINEAR) of 8-bit planes, as Caffe's ImageData
// resizes to new_height x new_width: half-pixel centres, edge pixels
// repeated, OpenCV's 11-bit fixed-point weights with its portable rounding
// (OpenCV's vectorised path may differ by one in the last bit). No
// antialiasing when shrinking, as in OpenCV.
Image resize_linear(const Image& img, int height, int width);

// The transform's output size for an image of this size; ShapeError when
// the crop is larger than the image.
void output_size(const Transform& t, const Image& img, int* out_height, int* out_width, const std::string& what);
// Writes channels x out_height x out_width floats to `out`; `rng` may be
// null when !t.is_random(). ShapeError naming `what` when the mean file or
// mean values do not fit the image.
void apply(const Transform& t, const Image& img, Rng* rng, float* out, const std::string& what);

}  // namespace strata::caffe
