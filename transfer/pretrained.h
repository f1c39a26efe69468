// Loading pretrained weights written by other frameworks into a strata Net.
// A name map turns each tensor name of the file (torchvision's or timm's
// spelling) into a strata parameter name ("conv1_1.weight") and, where the
// layouts differ, converts the tensor (e.g. a [1, 1, D] class token into
// [1, 1, D], a position embedding of another grid size interpolated).
// The format is detected from the names present, or named by the user.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "framework/io/checkpoint.h"
#include "framework/net.h"

namespace strata::transfer {

enum class WeightsFormat {
  kAuto,             // detect from the tensor names
  kStrata,           // our own names: load_weights() as is
  kTorchvisionVgg,   // features.N.* / classifier.N.* (vgg11/16/19, with or without BN)
  kTorchvisionVit,   // conv_proj, encoder.layers.encoder_layer_i.* (mlp.0/3 or mlp.linear_1/2)
  kTimmVit,          // patch_embed.proj, blocks.i.*, cls_token, pos_embed
  kCaffe,            // a .caffemodel (binary NetParameter): blobs by layer name (transfer/caffemodel.h)
};

// "auto", "strata", "torchvision-vgg", "torchvision-vit", "timm-vit", "caffe";
// ConfigError listing them otherwise. `flag` names the option in messages.
WeightsFormat parse_weights_format(const std::string& text, const std::string& flag);
const char* weights_format_name(WeightsFormat format);
// The format whose names these are; IoError saying what was seen when none fits.
// (A .caffemodel is recognised from the file itself, before any names are read.)
WeightsFormat detect_weights_format(const std::vector<std::string>& tensor_names);

struct PretrainedOptions {
  WeightsFormat format = WeightsFormat::kAuto;
  // Layers left as initialised (a new head), by strata layer name; also every
  // layer whose config says `reinit: true`.
  std::set<std::string> reinit;
};

// Maps, converts and copies the file's tensors into the net. The report
// speaks the net's names (and says which file name each came from where
// they differ); a shape mismatch outside `reinit` is a ShapeError whose
// message says how to re-initialise that layer (--reinit fc8 or
// `reinit: true` on the layer).
LoadReport load_pretrained(Net& net, const std::string& path, const PretrainedOptions& options);

}  // namespace strata::transfer
