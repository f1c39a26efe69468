// Resizing a ViT position embedding to another patch grid, as timm and
// torchvision do when fine-tuning at a new image size: the grid part is
// treated as a [1, D, gh, gw] image and resized with torch's
// F.interpolate(mode='bicubic', align_corners=False); a class token's
// embedding (the first row) is kept as it is.
#pragma once

#include <cstdint>

#include "framework/tensor.h"

namespace strata::transfer {

struct Grid {
  int64_t h = 0;
  int64_t w = 0;
};

// `pos`: [1, prefix + from.h * from.w, D] f32 (prefix = 1 with a class token,
// else 0). Returns [1, prefix + to.h * to.w, D]. ShapeError when `pos` does
// not have that shape.
Tensor interpolate_position_embedding(const Tensor& pos, int64_t prefix, Grid from, Grid to);

// The square grid of `tokens` tokens (14 for 196), or 0 when it is not a square.
int64_t square_grid_side(int64_t tokens);

}  // namespace strata::transfer
