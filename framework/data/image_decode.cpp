#include "framework/data/image_decode.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstring>

#include "framework/data/jpeg_decode.h"
#include "framework/error.h"
#include "framework/io/file_util.h"

// CMakeLists.txt only reports whether libstb-dev is there; the header's
// presence decides here, so the build works (without decoding) either way.
#if __has_include(<stb/stb_image.h>)
#define STRATA_HAVE_STB 1
#define STB_IMAGE_IMPLEMENTATION
#define STBI_NO_LINEAR  // we never ask for float pixels
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#endif
#include <stb/stb_image.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
#else
#define STRATA_HAVE_STB 0
#endif

namespace strata {

bool image_decoding_available() { return STRATA_HAVE_STB != 0; }

const char* jpeg_decoder_name() { return jpeg_decoding_with_libjpeg() ? "libjpeg" : "stb_image"; }

#if STRATA_HAVE_STB
namespace {

[[noreturn]] void fail_stb(const std::string& what) {
  const char* reason = stbi_failure_reason();
  fail<IoError>(what, ": cannot decode image (", reason ? reason : "unknown reason",
                "); stb_image reads JPEG, PNG, BMP, GIF, TGA, PSD, PNM, HDR and PIC");
}

bool looks_like_png(const uint8_t* bytes, size_t size) {
  static const uint8_t signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  return size >= 8 && std::memcmp(bytes, signature, 8) == 0;
}

// A 16-bit gray PNG is mode "I" in PIL, and its convert("RGB") clips each
// value to 0..255 (it does not scale): 1000 becomes 255, 200 stays 200.
// stb would keep the high byte instead. Every other 16-bit PNG (RGB, RGBA,
// gray+alpha) PIL reads by its high byte, as stb does.
bool is_16_bit_gray_png(const uint8_t* bytes, int size) {
  if (!looks_like_png(bytes, static_cast<size_t>(size)) || !stbi_is_16_bit_from_memory(bytes, size)) return false;
  int w = 0, h = 0, channels = 0;
  return stbi_info_from_memory(bytes, size, &w, &h, &channels) && channels == 1;
}

RgbImage decode_16_bit_gray_png(const uint8_t* bytes, int size, const std::string& what) {
  int w = 0, h = 0, channels = 0;
  stbi_us* data = stbi_load_16_from_memory(bytes, size, &w, &h, &channels, 1);
  if (!data) fail_stb(what);
  RgbImage img;
  img.width = w;
  img.height = h;
  img.file_channels = channels;
  const size_t n = static_cast<size_t>(w) * static_cast<size_t>(h);
  img.pixels.resize(n * 3);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t v = static_cast<uint8_t>(std::min<stbi_us>(data[i], 255));
    img.pixels[3 * i] = img.pixels[3 * i + 1] = img.pixels[3 * i + 2] = v;
  }
  stbi_image_free(data);
  return img;
}

}  // namespace
#endif

RgbImage decode_image_memory(const uint8_t* bytes, size_t size, const std::string& what) {
  if (size == 0) fail<IoError>(what, ": cannot decode image: the file is empty");
  // PIL decodes JPEG with libjpeg; stb's own decoder differs by a few levels.
  if (jpeg_decoding_with_libjpeg() && looks_like_jpeg(bytes, size)) return decode_jpeg_memory(bytes, size, what);
#if STRATA_HAVE_STB
  if (size > static_cast<size_t>(INT_MAX)) fail<IoError>(what, ": image file too large (", size, " bytes)");
  const int isize = static_cast<int>(size);
  if (is_16_bit_gray_png(bytes, isize)) return decode_16_bit_gray_png(bytes, isize, what);
  int w = 0, h = 0, channels = 0;
  // Asking for 3 channels makes stb replicate gray and drop alpha, as PIL's convert("RGB").
  stbi_uc* data = stbi_load_from_memory(bytes, isize, &w, &h, &channels, 3);
  if (!data) fail_stb(what);
  RgbImage img;
  img.width = w;
  img.height = h;
  img.file_channels = channels;
  img.pixels.assign(data, data + static_cast<size_t>(w) * static_cast<size_t>(h) * 3);
  stbi_image_free(data);
  return img;
#else
  fail<IoError>(what, ": cannot decode image: strata was built without stb (install libstb-dev, "
                      "e.g. apt-get install libstb-dev, and rebuild)");
#endif
}

RgbImage decode_image_file(const std::string& path) {
  const std::string bytes = read_file_bytes(path);  // IoError names the path and the OS reason
  return decode_image_memory(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path);
}

bool has_image_extension(const std::string& path) {
  const size_t dot = path.find_last_of('.');
  const size_t slash = path.find_last_of('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return false;
  std::string ext = path.substr(dot + 1);
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  static const char* const known[] = {"jpg", "jpeg", "png", "bmp", "gif", "tga", "psd",
                                      "pnm", "ppm", "pgm", "hdr", "pic"};
  return std::any_of(std::begin(known), std::end(known), [&](const char* k) { return ext == k; });
}

}  // namespace strata
