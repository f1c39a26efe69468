#include "framework/data/jpeg_decode.h"

#include <algorithm>
#include <csetjmp>
#include <cstdio>  // jpeglib.h needs FILE declared first
#include <vector>

#include "framework/error.h"

#if defined(STRATA_HAVE_LIBJPEG)
#include <jerror.h>
#include <jpeglib.h>
#endif

namespace strata {

bool looks_like_jpeg(const uint8_t* bytes, size_t size) {
  return size >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF;
}

#if defined(STRATA_HAVE_LIBJPEG)

bool jpeg_decoding_with_libjpeg() { return true; }

namespace {

// libjpeg reports a fatal error through error_exit, which must not return.
// An exception must not cross libjpeg's C frames, so error_exit jumps back
// (longjmp) to decompress(), which destroys the decompressor and returns the
// message; the caller turns it into an IoError.
struct ErrorManager {
  jpeg_error_mgr pub;  // first, so a j_common_ptr's err is this struct
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void on_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings about corrupt but decodable data are silent, as in PIL. Data that
// ends before the image does is not: libjpeg would fill the rest with grey,
// where PIL refuses the file ("image file is truncated").
void on_message(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
    auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
    std::snprintf(err->message, sizeof(err->message), "the file ends before the image does (truncated)");
    std::longjmp(err->jump, 1);
  }
}

// PIL's MULDIV255: a * b / 255 rounded, in integers.
inline int muldiv255(int a, int b) {
  const int t = a * b + 128;
  return ((t >> 8) + t) >> 8;
}

// One decoded row of `components` channels to RGB, as PIL's convert("RGB")
// makes its mode "L", "RGB" or "CMYK" (the last unpacked as "CMYK;I": PIL
// assumes Adobe's inverted polarity for every 4-component JPEG).
void row_to_rgb(const uint8_t* in, int width, int components, uint8_t* out) {
  for (int x = 0; x < width; ++x, out += 3) {
    if (components == 1) {
      out[0] = out[1] = out[2] = in[x];
    } else if (components == 3) {
      out[0] = in[3 * x];
      out[1] = in[3 * x + 1];
      out[2] = in[3 * x + 2];
    } else {
      const uint8_t* p = in + 4 * x;
      const int nk = p[3];  // 255 - k, with k = 255 - p[3]
      for (int c = 0; c < 3; ++c) out[c] = static_cast<uint8_t>(std::clamp(nk - muldiv255(255 - p[c], nk), 0, 255));
    }
  }
}

// Decodes into `img` (and `row`, scratch); false with err->message set when
// libjpeg failed. Only plain data lives in this frame, so the longjmp back
// to setjmp skips no destructor.
bool decompress(const uint8_t* bytes, size_t size, ErrorManager* err, RgbImage* img, std::vector<uint8_t>* row) {
  jpeg_decompress_struct cinfo;
  cinfo.err = jpeg_std_error(&err->pub);
  err->pub.error_exit = on_error_exit;
  err->pub.emit_message = on_message;
  err->message[0] = '\0';
  if (setjmp(err->jump)) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, bytes, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  const int components = cinfo.num_components;
  if (components != 1 && components != 3 && components != 4) {
    std::snprintf(err->message, sizeof(err->message),
                  "a JPEG with %d components (only gray, colour and CMYK JPEGs are read)", components);
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  // What PIL asks for: its rawmode L, RGB or CMYK;I; every other setting is libjpeg's default.
  cinfo.out_color_space = components == 1 ? JCS_GRAYSCALE : components == 3 ? JCS_RGB : JCS_CMYK;
  jpeg_start_decompress(&cinfo);
  const int width = static_cast<int>(cinfo.output_width);
  img->width = width;
  img->height = static_cast<int>(cinfo.output_height);
  img->file_channels = components;
  img->pixels.resize(static_cast<size_t>(width) * static_cast<size_t>(img->height) * 3);
  row->resize(static_cast<size_t>(width) * static_cast<size_t>(cinfo.output_components));
  JSAMPROW rows[1] = {row->data()};
  while (cinfo.output_scanline < cinfo.output_height) {
    const size_t y = cinfo.output_scanline;
    jpeg_read_scanlines(&cinfo, rows, 1);
    row_to_rgb(row->data(), width, components, img->pixels.data() + y * static_cast<size_t>(width) * 3);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return true;
}

}  // namespace

RgbImage decode_jpeg_memory(const uint8_t* bytes, size_t size, const std::string& what) {
  ErrorManager err;
  RgbImage img;
  std::vector<uint8_t> row;
  if (!decompress(bytes, size, &err, &img, &row)) {
    fail<IoError>(what, ": cannot decode JPEG (", err.message, ")");
  }
  return img;
}

#else  // !STRATA_HAVE_LIBJPEG

bool jpeg_decoding_with_libjpeg() { return false; }

RgbImage decode_jpeg_memory(const uint8_t* /*bytes*/, size_t /*size*/, const std::string& what) {
  fail<IoError>(what, ": cannot decode JPEG with libjpeg: strata was built without it (install libjpeg62-turbo-dev, "
                      "e.g. apt-get install libjpeg62-turbo-dev, and rebuild)");
}

#endif

}  // namespace strata
