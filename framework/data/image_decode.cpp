#include "framework/data/image_decode.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstring>

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

RgbImage decode_image_memory(const uint8_t* bytes, size_t size, const std::string& what) {
#if STRATA_HAVE_STB
  if (size > static_cast<size_t>(INT_MAX)) fail<IoError>(what, ": image file too large (", size, " bytes)");
  if (size == 0) fail<IoError>(what, ": cannot decode image: the file is empty");
  int w = 0, h = 0, channels = 0;
  // Asking for 3 channels makes stb replicate gray and drop alpha, as PIL's convert("RGB").
  stbi_uc* data = stbi_load_from_memory(bytes, static_cast<int>(size), &w, &h, &channels, 3);
  if (!data) {
    const char* reason = stbi_failure_reason();
    fail<IoError>(what, ": cannot decode image (", reason ? reason : "unknown reason",
                  "); stb_image reads JPEG, PNG, BMP, GIF, TGA, PSD, PNM, HDR and PIC");
  }
  RgbImage img;
  img.width = w;
  img.height = h;
  img.file_channels = channels;
  img.pixels.assign(data, data + static_cast<size_t>(w) * static_cast<size_t>(h) * 3);
  stbi_image_free(data);
  return img;
#else
  (void)bytes;
  (void)size;
  fail<IoError>(what, ": cannot decode image: strata was built without stb (install libstb-dev, "
                      "e.g. apt-get install libstb-dev, and rebuild)");
#endif
}

RgbImage decode_image_file(const std::string& path) {
  if (!image_decoding_available()) return decode_image_memory(nullptr, 0, path);
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
