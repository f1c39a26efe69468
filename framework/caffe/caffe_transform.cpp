#include "framework/caffe/caffe_transform.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "framework/caffe/caffe_db.h"
#include "framework/error.h"
#include "framework/io/file_util.h"

namespace strata::caffe {

const std::vector<std::string>& transform_keys() {
  static const std::vector<std::string> keys = {"scale",      "mirror",      "crop_size", "mean_file",
                                                "mean_value", "force_color", "force_gray"};
  return keys;
}

Transform read_transform(const ConfigNode& p, Phase phase, const std::string& base_dir, const std::string& where) {
  Transform t;
  t.scale = static_cast<float>(p.get_double("scale", 1.0));
  const int64_t crop = p.get_int("crop_size", 0);
  if (crop < 0 || crop > 65535) {
    fail<ConfigError>(where, ": transform_param crop_size must be in 0..65535, got ", crop, " at ",
                      p.find("crop_size")->loc().str());
  }
  t.crop_size = static_cast<int>(crop);
  t.crop = phase == Phase::kTrain ? CropMode::kRandom : CropMode::kCenter;
  t.mirror = p.get_bool("mirror", false) ? MirrorMode::kRandom : MirrorMode::kOff;
  for (double m : p.get_doubles("mean_value")) t.mean_values.push_back(static_cast<float>(m));
  if (p.has("mean_file")) {
    if (!t.mean_values.empty()) {
      fail<ConfigError>(where, ": transform_param has both mean_file and mean_value at ",
                        p.find("mean_file")->loc().str(), "; Caffe takes one or the other");
    }
    t.mean_file = resolve_caffe_path(base_dir, p.get_string("mean_file"));
    try {
      t.mean = read_binaryproto(t.mean_file);
    } catch (const IoError& e) {
      fail<IoError>(where, ": transform_param mean_file at ", p.find("mean_file")->loc().str(), ": ", e.what());
    }
  }
  const bool color = p.get_bool("force_color", false), gray = p.get_bool("force_gray", false);
  if (color && gray) {
    fail<ConfigError>(where, ": transform_param sets both force_color and force_gray; choose one");
  }
  t.color = color ? ColorMode::kColor : gray ? ColorMode::kGray : ColorMode::kNative;
  return t;
}

Image from_rgb(const RgbImage& rgb, ColorMode color) {
  Image img;
  const bool gray = color == ColorMode::kGray ||
                    (color == ColorMode::kNative && (rgb.file_channels == 1 || rgb.file_channels == 2));
  img.channels = gray ? 1 : 3;
  img.height = rgb.height;
  img.width = rgb.width;
  const size_t plane = static_cast<size_t>(rgb.height) * rgb.width;
  img.bytes.resize(plane * img.channels);
  for (size_t i = 0; i < plane; ++i) {
    const uint8_t r = rgb.pixels[3 * i], g = rgb.pixels[3 * i + 1], b = rgb.pixels[3 * i + 2];
    if (gray) {
      // OpenCV's RGB -> gray: BT.601 weights in 14-bit fixed point, rounded.
      img.bytes[i] = static_cast<uint8_t>((b * 1868 + g * 9617 + r * 4899 + (1 << 13)) >> 14);
    } else {
      img.bytes[i] = b;
      img.bytes[plane + i] = g;
      img.bytes[2 * plane + i] = r;
    }
  }
  return img;
}

Image from_datum(const Datum& d, ColorMode color, const std::string& what) {
  if (d.encoded) {
    const RgbImage rgb =
        decode_image_memory(reinterpret_cast<const uint8_t*>(d.data.data()), d.data.size(), what);
    return from_rgb(rgb, color);
  }
  Image img;
  img.channels = d.channels;
  img.height = d.height;
  img.width = d.width;
  const int64_t count = int64_t{d.channels} * d.height * d.width;
  if (count <= 0) {
    fail<IoError>(what, ": Datum has no pixels (channels ", d.channels, ", height ", d.height, ", width ", d.width,
                  ")");
  }
  if (!d.data.empty()) {
    if (static_cast<int64_t>(d.data.size()) != count) {
      fail<IoError>(what, ": Datum data holds ", d.data.size(), " bytes, but channels x height x width is ",
                    d.channels, " x ", d.height, " x ", d.width, " = ", count);
    }
    img.bytes.assign(d.data.begin(), d.data.end());
  } else {
    if (static_cast<int64_t>(d.float_data.size()) != count) {
      fail<IoError>(what, ": Datum float_data holds ", d.float_data.size(),
                    " values, but channels x height x width is ", d.channels, " x ", d.height, " x ", d.width,
                    " = ", count);
    }
    img.floats = d.float_data;
  }
  return img;
}

namespace {

// Per output position: the first source index and its two weights (of 2048).
struct LinearTaps {
  std::vector<int> index;
  std::vector<int> w0, w1;
};

LinearTaps linear_taps(int src, int dst) {
  LinearTaps t;
  const double scale = 1.0 / (static_cast<double>(dst) / src);
  for (int d = 0; d < dst; ++d) {
    float f = static_cast<float>((d + 0.5) * scale - 0.5);
    int s = static_cast<int>(std::floor(f));
    f -= static_cast<float>(s);
    if (s < 0) {
      f = 0;
      s = 0;
    }
    if (s >= src - 1) {
      f = 0;
      s = src - 1;
    }
    t.index.push_back(s);
    t.w0.push_back(static_cast<int>(std::lrint((1.0f - f) * 2048.0f)));
    t.w1.push_back(static_cast<int>(std::lrint(f * 2048.0f)));
  }
  return t;
}

}  // namespace

Image resize_linear(const Image& img, int height, int width) {
  STRATA_CHECK(height > 0 && width > 0 && !img.bytes.empty(), "resize of a byte image to a positive size");
  if (height == img.height && width == img.width) return img;
  const LinearTaps tx = linear_taps(img.width, width), ty = linear_taps(img.height, height);
  Image out;
  out.channels = img.channels;
  out.height = height;
  out.width = width;
  out.bytes.resize(static_cast<size_t>(img.channels) * height * width);
  std::vector<int> row0(static_cast<size_t>(width)), row1(static_cast<size_t>(width));
  auto horizontal = [&](const uint8_t* src, std::vector<int>& out_row) {
    for (int x = 0; x < width; ++x) {
      const int s = tx.index[x];
      const int s1 = std::min(s + 1, img.width - 1);
      out_row[static_cast<size_t>(x)] = src[s] * tx.w0[x] + src[s1] * tx.w1[x];
    }
  };
  for (int c = 0; c < img.channels; ++c) {
    const uint8_t* plane = img.bytes.data() + static_cast<size_t>(c) * img.height * img.width;
    uint8_t* dst = out.bytes.data() + static_cast<size_t>(c) * height * width;
    for (int y = 0; y < height; ++y) {
      const int s = ty.index[y];
      const int s1 = std::min(s + 1, img.height - 1);
      horizontal(plane + static_cast<size_t>(s) * img.width, row0);
      horizontal(plane + static_cast<size_t>(s1) * img.width, row1);
      for (int x = 0; x < width; ++x) {
        const int64_t v = int64_t{row0[static_cast<size_t>(x)]} * ty.w0[y] +
                          int64_t{row1[static_cast<size_t>(x)]} * ty.w1[y];
        const int64_t r = (v + (int64_t{1} << 21)) >> 22;
        dst[static_cast<size_t>(y) * width + x] = static_cast<uint8_t>(std::clamp<int64_t>(r, 0, 255));
      }
    }
  }
  return out;
}

void output_size(const Transform& t, const Image& img, int* out_height, int* out_width, const std::string& what) {
  if (t.crop_size > 0) {
    if (img.height < t.crop_size || img.width < t.crop_size) {
      fail<ShapeError>(what, ": the image is ", img.height, "x", img.width, " (height x width), smaller than "
                       "transform_param crop_size ", t.crop_size);
    }
    *out_height = *out_width = t.crop_size;
  } else {
    *out_height = img.height;
    *out_width = img.width;
  }
}

namespace {

template <typename T>
void transform_pixels(const Transform& t, const T* src, const Image& img, int out_h, int out_w, int h_off,
                      int w_off, bool flip, const float* mean_values, float* out) {
  const float* mean = t.mean.numel() > 0 ? t.mean.data<float>() : nullptr;
  for (int c = 0; c < img.channels; ++c) {
    for (int h = 0; h < out_h; ++h) {
      const size_t src_row = (static_cast<size_t>(c) * img.height + h_off + h) * img.width + w_off;
      float* dst_row = out + (static_cast<size_t>(c) * out_h + h) * out_w;
      for (int w = 0; w < out_w; ++w) {
        const float v = static_cast<float>(src[src_row + w]);
        float o;
        if (mean) {
          o = (v - mean[src_row + w]) * t.scale;
        } else if (mean_values) {
          o = (v - mean_values[c]) * t.scale;
        } else {
          o = v * t.scale;
        }
        dst_row[flip ? out_w - 1 - w : w] = o;
      }
    }
  }
}

}  // namespace

void apply(const Transform& t, const Image& img, Rng* rng, float* out, const std::string& what) {
  STRATA_CHECK(rng || !t.is_random(), "a random transform needs an Rng");
  int out_h = 0, out_w = 0;
  output_size(t, img, &out_h, &out_w, what);
  if (t.mean.numel() > 0) {
    const Shape& m = t.mean.shape();
    if (m[0] != img.channels || m[1] != img.height || m[2] != img.width) {
      fail<ShapeError>(what, ": the mean file '", t.mean_file, "' is ", shape_str(m),
                       " (channels, height, width) but the image is [", img.channels, ", ", img.height, ", ",
                       img.width, "]; Caffe subtracts the mean before cropping, so they must match");
    }
  }
  std::vector<float> means;
  if (!t.mean_values.empty()) {
    if (t.mean_values.size() != 1 && static_cast<int>(t.mean_values.size()) != img.channels) {
      fail<ShapeError>(what, ": transform_param has ", t.mean_values.size(), " mean_value entries but the image has ",
                       img.channels, " channels; give one for all channels or one per channel");
    }
    means.resize(static_cast<size_t>(img.channels));
    for (int c = 0; c < img.channels; ++c) means[c] = t.mean_values[t.mean_values.size() == 1 ? 0 : c];
  }
  // Caffe draws the mirror first, then the crop corner.
  const bool flip = t.mirror == MirrorMode::kRandom && rng->uniform_int(2) == 1;
  int h_off = 0, w_off = 0;
  if (t.crop_size > 0) {
    if (t.crop == CropMode::kRandom) {
      h_off = static_cast<int>(rng->uniform_int(static_cast<uint64_t>(img.height - t.crop_size + 1)));
      w_off = static_cast<int>(rng->uniform_int(static_cast<uint64_t>(img.width - t.crop_size + 1)));
    } else {
      h_off = (img.height - t.crop_size) / 2;
      w_off = (img.width - t.crop_size) / 2;
    }
  }
  const float* mv = means.empty() ? nullptr : means.data();
  if (!img.bytes.empty()) {
    transform_pixels(t, img.bytes.data(), img, out_h, out_w, h_off, w_off, flip, mv, out);
  } else {
    transform_pixels(t, img.floats.data(), img, out_h, out_w, h_off, w_off, flip, mv, out);
  }
}

}  // namespace strata::caffe
