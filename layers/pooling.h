// Pooling (Caffe "Pooling") over the spatial dims of NCHW input, with Caffe's
// semantics:
// - output size: ceil((in + 2 * pad - kernel) / stride) + 1 (round_mode CEIL,
//   the default) or floor(...) + 1 (FLOOR; also `ceil_mode: false`, the
//   spelling of a widely used fork); an output whose window would
//   start at or beyond in + pad is dropped. (Caffe checks that only when there
//   is padding; without it the check matters only where Caffe would pool an
//   empty window, so we always apply it, as PyTorch does.)
// - MAX keeps the argmax of each window for backward; the first maximum wins
//   on ties and NaN propagates.
// - AVE divides by the window size clipped to the padded image (not to the
//   image), as Caffe and PyTorch's count_include_pad=True do.
// - global_pooling: the window is the whole image.
#pragma once

#include "framework/layer.h"
#include "layers/host_device.h"

namespace strata {

class PoolingLayer : public Layer {
 public:
  enum class Method { kMax, kAve };
  enum class RoundMode { kCeil, kFloor };

  PoolingLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();
  // What backward reads: MAX keeps its own argmax mask and AVE needs only the geometry.
  BackwardReads backward_reads() const override { return {false, false}; }
  // Blobs stored in bf16 or f16 are taken as they are: each window summed
  // or compared in f32 and each output rounded once.
  bool takes_storage(DType dtype) const override { return is_float_dtype(dtype); }

  void setup(const BlobVec& bottom, const BlobVec& top) override;
  STRATA_CPU_METHODS;
  STRATA_CUDA_METHODS;  // in pooling.cu
  bool replays_in_a_graph() const override { return true; }
  // NHWC blobs too (Layer::call_layout), with the same windows and sums: on
  // the CPU each plane is gathered into f32 first; on a GPU the kernels
  // address either layout. MAX's mask is [N, C, out_h, out_w] in both.
  ChannelsLast channels_last() const override { return ChannelsLast::kTakes; }
  // MAX: the argmax mask, from forward to backward (take_mask()); AVE: none.
  size_t kept_bytes() const override;

 private:
  enum class Global { kNo, kYes };

  void check_bottom(const Shape& s) const;
  int64_t pooled_size(int64_t in, int64_t kernel, int64_t pad, int64_t stride) const;
  // One plane of one image, in f32 (the 16-bit paths widen each plane first).
  void max_plane(const float* xp, float* yp, int32_t* mp) const;
  void ave_plane(const float* xp, float* yp) const;
  // dx of one plane; mp is MAX's mask of the plane, nullptr for AVE.
  void backward_plane(const float* dyp, const int32_t* mp, float* dxp) const;
  // MAX's mask, the layer's kept() block: index h * W + w of each output's
  // input, [N, C, out_h, out_w] i32. Placed by the net's plan from forward to
  // backward, so it is not held for the whole run.
  Tensor take_mask();
  // Where plane p = n * C + c of `plane` elements starts in a blob of the
  // call's layout, and the distance between its consecutive elements.
  struct Planes {
    int64_t plane, channels;
    bool nhwc;
    int64_t step;
    int64_t first(int64_t p) const { return nhwc ? (p / channels) * plane * channels + p % channels : p * plane; }
  };
  Planes planes(int64_t plane) const {
    const bool nhwc = call_layout() == Layout::kNHWC;
    return {plane, channels_, nhwc, nhwc ? channels_ : 1};
  }

  Method method_;
  RoundMode round_;
  Global global_;
  int64_t kernel_h_ = 0, kernel_w_ = 0;  // for global pooling: set by reshape()
  int64_t stride_h_ = 1, stride_w_ = 1;
  int64_t pad_h_ = 0, pad_w_ = 0;

  int64_t num_ = 0, channels_ = 0, height_ = 0, width_ = 0, out_h_ = 0, out_w_ = 0;
};

// One axis of a window: the inputs [begin, end) under output position `o`
// of a window `kernel` wide, `stride` apart, starting at -pad, over `size`
// inputs, and `extent`, the window clipped to the padded image only (AVE's
// divisor; MAX reads [begin, end)). The one rule for pooling.cpp and
// pooling.cu.
struct PoolSpan {
  int64_t begin, end, extent;
};
STRATA_HOST_DEVICE PoolSpan pool_span(int64_t o, int64_t kernel, int64_t stride, int64_t pad, int64_t size) {
  const int64_t start = o * stride - pad;
  const int64_t stop = start + kernel < size + pad ? start + kernel : size + pad;
  return {start < 0 ? 0 : start, stop < size ? stop : size, stop - start};
}

}  // namespace strata
