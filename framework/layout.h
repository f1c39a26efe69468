// Memory layouts of image blobs: NCHW (Caffe's, every layer's unless it says
// more) and NHWC (channels-last, what tensor-core convolutions read without
// transposing). A blob's shape is [N, C, H, W] in either: the layout orders
// its elements in memory, [N][C][H][W] or [N][H][W][C]. A net that stores
// some blobs channels-last (NetOptions::channels_last) converts a blob at
// the border of a layer that takes NCHW alone, as it converts dtypes
// (framework/net_storage.cpp).
#pragma once

#include <cstdint>

#include "framework/tensor.h"

namespace strata {

enum class Layout : uint8_t { kNCHW, kNHWC };

const char* layout_name(Layout l);  // "NCHW", "NHWC"

// What a layer does with channels-last blobs (Layer::channels_last).
enum class ChannelsLast : uint8_t {
  kNo,     // reads and writes NCHW alone (flattens, indexes channels, ...)
  kTakes,  // takes NHWC as well as NCHW, as fast (elementwise layers, pooling)
  kFaster  // runs faster in NHWC (a convolution on tensor cores): a net grows
           // its channels-last blobs from these layers
};

// dst = src as values, each tensor of the shape [N, C, spatial...] laid out
// as its layout says (NHWC: [N][spatial...][C]; for rank 2 the two layouts
// are one), dtypes f32, bf16 or f16 (converted as cast_into does), on one
// device. With `accumulate`, dst (f32) += src. ShapeError when the element
// counts, dtypes or devices do not fit. The same layouts make it cast_into.
void convert_layout_into(Tensor& dst, Layout dst_layout, const Tensor& src, Layout src_layout,
                         bool accumulate = false);

}  // namespace strata
