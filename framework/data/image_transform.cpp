#include "framework/data/image_transform.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>

#include "framework/error.h"

namespace strata {

ImageTransform preset_transform(TransformPreset preset) {
  ImageTransform t;
  switch (preset) {
    case TransformPreset::kNone:
      break;
    case TransformPreset::kImagenet:
      t.resize = 256;
      t.interpolation = Interpolation::kBilinear;
      t.crop_height = t.crop_width = 224;
      t.mean = {0.485f, 0.456f, 0.406f};
      t.std = {0.229f, 0.224f, 0.225f};
      break;
    case TransformPreset::kVitEval:
      t.resize = 248;  // timm: floor(224 / crop_pct 0.9)
      t.interpolation = Interpolation::kBicubic;
      t.crop_height = t.crop_width = 224;
      t.mean = {0.5f, 0.5f, 0.5f};
      t.std = {0.5f, 0.5f, 0.5f};
      break;
  }
  return t;
}

TransformPreset parse_transform_preset(const std::string& text) {
  std::string up = text;
  std::transform(up.begin(), up.end(), up.begin(), [](unsigned char c) { return std::toupper(c); });
  if (up == "NONE") return TransformPreset::kNone;
  if (up == "IMAGENET") return TransformPreset::kImagenet;
  if (up == "VIT_EVAL" || up == "VIT") return TransformPreset::kVitEval;
  fail<ConfigError>("unknown transform preset '", text, "'; use none, imagenet or vit (VIT_EVAL)");
}

void resized_size(int width, int height, int size, int* out_width, int* out_height) {
  if (size <= 0) {
    *out_width = width;
    *out_height = height;
    return;
  }
  const bool portrait = width <= height;
  const int64_t short_side = portrait ? width : height;
  const int64_t long_side = portrait ? height : width;
  // Python: int(requested_new_short * long / short), in doubles.
  const int new_long = static_cast<int>(static_cast<double>(size * long_side) / static_cast<double>(short_side));
  *out_width = portrait ? size : new_long;
  *out_height = portrait ? new_long : size;
}

// ---- PIL's resampling (Pillow's libImaging/Resample.c), 8 bits per channel ----
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;

double bilinear_filter(double x) {
  if (x < 0.0) x = -x;
  if (x < 1.0) return 1.0 - x;
  return 0.0;
}

double bicubic_filter(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

// Per output pixel: first input pixel, tap count and fixed-point weights.
struct Coeffs {
  int ksize = 0;
  std::vector<int> bounds;  // xmin, count per output pixel
  std::vector<int32_t> kk;  // ksize weights per output pixel
};

Coeffs precompute_coeffs(int in_size, int out_size, Interpolation interp) {
  const double support_base = interp == Interpolation::kBilinear ? 1.0 : 2.0;
  double (*filter)(double) = interp == Interpolation::kBilinear ? bilinear_filter : bicubic_filter;
  const double scale = static_cast<double>(in_size) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = support_base * filterscale;
  Coeffs c;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.bounds.resize(static_cast<size_t>(out_size) * 2);
  c.kk.assign(static_cast<size_t>(out_size) * c.ksize, 0);
  std::vector<double> k(static_cast<size_t>(c.ksize));
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      const double w = filter((x + xmin - center + 0.5) * ss);
      k[static_cast<size_t>(x)] = w;
      ww += w;
    }
    int32_t* out = &c.kk[static_cast<size_t>(xx) * c.ksize];
    for (int x = 0; x < xmax; ++x) {
      double v = k[static_cast<size_t>(x)];
      if (ww != 0.0) v /= ww;
      out[x] = static_cast<int32_t>(v < 0 ? -0.5 + v * (1 << kPrecisionBits) : 0.5 + v * (1 << kPrecisionBits));
    }
    c.bounds[static_cast<size_t>(xx) * 2] = xmin;
    c.bounds[static_cast<size_t>(xx) * 2 + 1] = xmax;
  }
  return c;
}

inline uint8_t clip8(int32_t in) {
  if (in >= (1 << kPrecisionBits << 8)) return 255;
  if (in <= 0) return 0;
  return static_cast<uint8_t>(in >> kPrecisionBits);
}

// Rows [row0, row0 + out.height) of `in`, resampled along x.
void resample_horizontal(const RgbImage& in, int row0, const Coeffs& c, RgbImage& out) {
  for (int yy = 0; yy < out.height; ++yy) {
    const uint8_t* src = &in.pixels[static_cast<size_t>(yy + row0) * in.width * 3];
    uint8_t* dst = &out.pixels[static_cast<size_t>(yy) * out.width * 3];
    for (int xx = 0; xx < out.width; ++xx) {
      const int xmin = c.bounds[static_cast<size_t>(xx) * 2];
      const int xmax = c.bounds[static_cast<size_t>(xx) * 2 + 1];
      const int32_t* k = &c.kk[static_cast<size_t>(xx) * c.ksize];
      int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
      const uint8_t* p = src + static_cast<size_t>(xmin) * 3;
      for (int x = 0; x < xmax; ++x) {
        s0 += p[x * 3 + 0] * k[x];
        s1 += p[x * 3 + 1] * k[x];
        s2 += p[x * 3 + 2] * k[x];
      }
      dst[xx * 3 + 0] = clip8(s0);
      dst[xx * 3 + 1] = clip8(s1);
      dst[xx * 3 + 2] = clip8(s2);
    }
  }
}

// `bounds` already shifted by the first input row the caller kept.
void resample_vertical(const RgbImage& in, const Coeffs& c, int row_shift, RgbImage& out) {
  const size_t row = static_cast<size_t>(in.width) * 3;
  for (int yy = 0; yy < out.height; ++yy) {
    const int ymin = c.bounds[static_cast<size_t>(yy) * 2] - row_shift;
    const int ymax = c.bounds[static_cast<size_t>(yy) * 2 + 1];
    const int32_t* k = &c.kk[static_cast<size_t>(yy) * c.ksize];
    uint8_t* dst = &out.pixels[static_cast<size_t>(yy) * row];
    for (size_t i = 0; i < row; ++i) {
      int32_t s = 1 << (kPrecisionBits - 1);
      const uint8_t* p = &in.pixels[static_cast<size_t>(ymin) * row + i];
      for (int y = 0; y < ymax; ++y) s += p[static_cast<size_t>(y) * row] * k[y];
      dst[i] = clip8(s);
    }
  }
}

}  // namespace

RgbImage resize_image(const RgbImage& img, int out_width, int out_height, Interpolation interp) {
  STRATA_CHECK(out_width > 0 && out_height > 0, "resize to ", out_width, "x", out_height);
  const bool need_h = out_width != img.width;
  const bool need_v = out_height != img.height;
  if (!need_h && !need_v) return img;
  const Coeffs cv = precompute_coeffs(img.height, out_height, interp);
  RgbImage cur;
  int row_shift = 0;
  if (need_h) {
    const Coeffs ch = precompute_coeffs(img.width, out_width, interp);
    // Only the input rows the vertical pass reads (as PIL does; same values).
    int first = 0, last = img.height;
    if (need_v) {
      first = cv.bounds[0];
      last = cv.bounds[static_cast<size_t>(out_height) * 2 - 2] + cv.bounds[static_cast<size_t>(out_height) * 2 - 1];
    }
    cur.width = out_width;
    cur.height = last - first;
    cur.pixels.resize(static_cast<size_t>(cur.width) * cur.height * 3);
    resample_horizontal(img, first, ch, cur);
    row_shift = first;
    if (!need_v) return cur;
  }
  const RgbImage& src = need_h ? cur : img;
  RgbImage out;
  out.width = src.width;
  out.height = out_height;
  out.pixels.resize(static_cast<size_t>(out.width) * out.height * 3);
  resample_vertical(src, cv, row_shift, out);
  return out;
}

CropBox center_crop_box(int height, int width, int crop_height, int crop_width) {
  auto offset = [](int size, int crop) {
    // nearbyint rounds half to even in the default rounding mode, as Python's round().
    if (crop <= size) return static_cast<int>(std::nearbyint((size - crop) / 2.0));
    return -((crop - size) / 2);
  };
  return CropBox{offset(height, crop_height), offset(width, crop_width), crop_height, crop_width};
}

void transform_output_size(const ImageTransform& t, int width, int height, int* out_width, int* out_height) {
  resized_size(width, height, t.resize, out_width, out_height);
  if (t.crop_height > 0) *out_height = t.crop_height;
  if (t.crop_width > 0) *out_width = t.crop_width;
}

void apply_transform(const RgbImage& img, const ImageTransform& t, Rng* rng, float* out) {
  STRATA_CHECK(rng || !t.is_random(), "a random transform needs an Rng");
  STRATA_CHECK(t.mean.size() == 3 && t.std.size() == 3, "mean and std need 3 values");
  int rw = img.width, rh = img.height;
  resized_size(img.width, img.height, t.resize, &rw, &rh);
  RgbImage resized;
  const RgbImage* src = &img;
  if (rw != img.width || rh != img.height) {
    resized = resize_image(img, rw, rh, t.interpolation);
    src = &resized;
  }
  const int ch = t.crop_height > 0 ? t.crop_height : rh;
  const int cw = t.crop_width > 0 ? t.crop_width : rw;
  CropBox box = center_crop_box(rh, rw, ch, cw);
  if (t.crop == CropMode::kRandom) {
    if (rh >= ch) box.top = static_cast<int>(rng->uniform_int(static_cast<uint64_t>(rh - ch + 1)));
    if (rw >= cw) box.left = static_cast<int>(rng->uniform_int(static_cast<uint64_t>(rw - cw + 1)));
  }
  const bool flip = t.mirror == MirrorMode::kRandom && rng->uniform() < 0.5f;

  // One table per channel: the float value of every byte, computed in float
  // in torchvision's order (x / 255 - mean) / std.
  std::array<std::array<float, 256>, 3> lut;
  for (int c = 0; c < 3; ++c) {
    for (int v = 0; v < 256; ++v) {
      const float x = static_cast<float>(v * t.scale);
      lut[c][v] = (x - t.mean[c]) / t.std[c];
    }
  }
  const size_t plane = static_cast<size_t>(ch) * cw;
  for (int y = 0; y < ch; ++y) {
    const int sy = box.top + y;
    for (int x = 0; x < cw; ++x) {
      const int sx = box.left + (flip ? cw - 1 - x : x);
      const size_t o = static_cast<size_t>(y) * cw + x;
      if (sy < 0 || sy >= rh || sx < 0 || sx >= rw) {
        for (int c = 0; c < 3; ++c) out[c * plane + o] = lut[c][0];
        continue;
      }
      const uint8_t* p = &src->pixels[(static_cast<size_t>(sy) * rw + sx) * 3];
      for (int c = 0; c < 3; ++c) out[c * plane + o] = lut[c][p[c]];
    }
  }
}

}  // namespace strata
