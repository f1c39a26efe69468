// Image decoding with stb_image (JPEG, PNG, BMP, GIF (first frame), TGA, PSD,
// PNM, HDR, PIC). Every image comes out as 8-bit RGB, as PIL's
// Image.convert("RGB") gives it to torchvision: grayscale is replicated into
// the three channels and an alpha channel is dropped (not composited).
// Built without stb (libstb-dev), decoding throws an IoError saying so.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata {

// Interleaved RGB, row-major: pixel (y, x) channel c at ((y * width) + x) * 3 + c.
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;
  // Channels stored in the file (1 gray, 2 gray+alpha, 3 RGB, 4 RGBA): what
  // Caffe's "native" decoding (cv::IMREAD_ANYCOLOR) keeps. 0 when unknown.
  int file_channels = 0;
};

// False when this build has no stb_image.
bool image_decoding_available();

// IoError naming `path` (and stb's reason) when the file is missing,
// unreadable, not an image stb knows, or corrupt.
RgbImage decode_image_file(const std::string& path);
// The same from bytes in memory; `what` stands in for the path in errors.
RgbImage decode_image_memory(const uint8_t* bytes, size_t size, const std::string& what);

// True for the file name extensions stb decodes (case-insensitive):
// .jpg .jpeg .png .bmp .gif .tga .psd .pnm .ppm .pgm .hdr .pic
bool has_image_extension(const std::string& path);

}  // namespace strata
