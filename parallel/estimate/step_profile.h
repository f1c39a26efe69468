// What the estimates know about one training step on one device: per-layer
// forward and backward times (measured by `strata time` or read from a
// times file, times_file.h), the bytes of the gradients each layer's
// backward makes final, and the bytes of its outputs.
#pragma once

#include <string>
#include <vector>

namespace strata::estimate {

struct LayerProfile {
  std::string name;
  std::string type;
  double forward = 0.0;   // seconds per step (the whole per-worker batch)
  double backward = 0.0;  // seconds per step; 0 for a layer without backward
  // Bytes of the learnable gradients that are final once this layer's
  // backward has run (a shared parameter counts at the lowest layer using it).
  double grad_bytes = 0.0;
  double top_bytes = 0.0;     // bytes of the layer's outputs (activations) per step
  double bottom_bytes = 0.0;  // bytes of its inputs per step
  // Bytes of the parameter values the layer owns, learnable or not (BatchNorm
  // statistics too; a shared parameter counts at the layer that owns it).
  double param_bytes = 0.0;
  // Bytes of the outputs its forward creates per step: its tops that are not
  // also its bottoms (an in-place ReLU creates none). What a device keeps per
  // batch until backward (memory_cost.h).
  double activation_bytes = 0.0;
  // Floating-point operations of its forward and of its backward per step
  // (0: not counted); what profile_scale.h splits a published step time by.
  double flops = 0.0;
  double backward_flops = 0.0;
  // Its tensor-parallel `split` key: "", "COLUMN", "ROW", "HEADS" or
  // "OUTPUT_CHANNELS" (docs/config.md, Tensor parallel).
  std::string split;
};

struct StepProfile {
  std::string net;
  int batch = 1;  // samples per step on one worker
  // Training memory per byte of the outputs the layers create
  // (activation_bytes): what the net's memory plan holds for their values
  // and gradients over their sum. 2 in Caffe's layout (blob_memory SEPARATE:
  // a gradient beside every output, all alive for the whole step); under the
  // plan by lifetime (the default) the planned activations over that sum, so
  // that one worker's estimate is the number `strata time` and `strata train`
  // print at start (memory_cost.h).
  double activation_scale = 2.0;
  std::vector<LayerProfile> layers;

  double forward_seconds() const;
  double backward_seconds() const;
  double compute_seconds() const { return forward_seconds() + backward_seconds(); }
  double grad_bytes() const;
};

}  // namespace strata::estimate
