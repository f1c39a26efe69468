// JPEG decoding with libjpeg(-turbo) exactly as PIL does it for
// Image.open(path).convert("RGB"), which is what torchvision's loaders see:
// libjpeg's default settings (JDCT_ISLOW, fancy upsampling), colour to RGB,
// gray replicated into the three channels, and CMYK/YCCK read with Adobe's
// inverted polarity and made RGB with PIL's cmyk2rgb formula.
// Built without libjpeg (STRATA_HAVE_LIBJPEG undefined), image_decode.cpp
// falls back to stb_image, whose decoder differs by up to about 11 levels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "framework/data/image_decode.h"

namespace strata {

// True when this build decodes JPEG with libjpeg.
bool jpeg_decoding_with_libjpeg();

// True when `bytes` start as a JPEG file does (FF D8 FF), as PIL recognises one.
bool looks_like_jpeg(const uint8_t* bytes, size_t size);

// IoError naming `what` and libjpeg's reason for a corrupt or truncated file,
// or one with other than 1, 3 or 4 components (PIL reads no other).
// Requires jpeg_decoding_with_libjpeg().
RgbImage decode_jpeg_memory(const uint8_t* bytes, size_t size, const std::string& what);

}  // namespace strata
