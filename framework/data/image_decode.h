// Image decoding: JPEG with libjpeg(-turbo), as PIL decodes it
// (jpeg_decode.h), every other format with stb_image (PNG, BMP, GIF (first
// frame), TGA, PSD, PNM, HDR, PIC). Every image comes out as 8-bit RGB, as
// PIL's Image.open(path).convert("RGB") gives it to torchvision: grayscale is
// replicated into the three channels, an alpha channel is dropped (not
// composited), a palette is looked up, 16-bit samples keep their high byte
// except 16-bit gray PNG, which PIL clips to 0..255.
// Built without libjpeg, stb decodes JPEG too (up to about 11 levels off
// PIL); built without stb (libstb-dev), decoding any other format throws an
// IoError saying so.
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
// "libjpeg" or "stb_image": what decodes JPEG files in this build.
const char* jpeg_decoder_name();

// IoError naming `path` (and the decoder's reason) when the file is missing,
// unreadable, empty, not an image strata reads, corrupt or truncated.
RgbImage decode_image_file(const std::string& path);
// The same from bytes in memory; `what` stands in for the path in errors.
RgbImage decode_image_memory(const uint8_t* bytes, size_t size, const std::string& what);

// True for the file name extensions stb decodes (case-insensitive):
// .jpg .jpeg .png .bmp .gif .tga .psd .pnm .ppm .pgm .hdr .pic
bool has_image_extension(const std::string& path);

}  // namespace strata
