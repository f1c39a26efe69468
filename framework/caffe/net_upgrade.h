// Caffe's V1 net format, read as Caffe's own upgrade (upgrade_proto.cpp's
// UpgradeV1Net) rewrites it, so the widely copied V1 files (the original
// VGG_ILSVRC_16_layers_deploy.prototxt, for one) run as written:
//
//   layers {                              layer {
//     name: "conv1_1"                       name: "conv1_1"
//     type: CONVOLUTION                     type: "Convolution"
//     bottom: "data"  top: "conv1_1"   ->   bottom: "data"  top: "conv1_1"
//     blobs_lr: 1  blobs_lr: 2              param { lr_mult: 1 decay_mult: 1 }
//     weight_decay: 1  weight_decay: 0      param { lr_mult: 2 decay_mult: 0 }
//     convolution_param { ... }             convolution_param { ... }
//   }                                     }
//
// blobs_lr, weight_decay, param (share names) and blob_share_mode become the
// fields of one `param { }` per blob; include/exclude, loss_weight,
// propagate_down and every *_param block are kept; the data layers' old
// scale/mean_file/crop_size/mirror move into transform_param (Caffe's
// UpgradeNetDataTransformation). The first upgrade of a file prints one
// notice. Caffe's V0 format (layers { layer { type: "conv" } }) is refused
// with a message saying how to convert it with Caffe's own tool.
#pragma once

#include <string>
#include <vector>

#include "framework/config/config.h"

namespace strata {

// True when the net uses V1 `layers { }` blocks.
bool is_v1_net(const ConfigNode& root);

// The net in the current format. ConfigError for a V1 type with no current
// name, a V0 layer, a key V1 did not have, or a file that mixes `layer` and
// `layers`. Prints "note: <file>: upgraded from Caffe's V1 format ..." to
// standard error the first time a file is upgraded in this process.
ConfigNode upgrade_v1_net(const ConfigNode& root);

// V1's enum names (CONVOLUTION, SOFTMAX_LOSS, ...) with their current type names.
const std::vector<std::pair<std::string, std::string>>& v1_layer_types();

}  // namespace strata
