// Name maps: which strata parameter each tensor of a torchvision / timm file
// feeds. A map only routes names; load_pretrained() converts and copies.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/net.h"

namespace strata::transfer {

struct FileTensor {
  std::string name;
  std::vector<int64_t> shape;
};

// "classifier.6.weight" -> "fc8.weight".
struct Route {
  std::string file;
  std::string net;
};

struct NameMap {
  std::vector<Route> routes;
  std::vector<std::string> dropped;   // bookkeeping the net has no use for (num_batches_tracked)
  std::vector<std::string> unmapped;  // names the map does not know: reported as unexpected
};

// Our own names: every tensor to the parameter of the same name.
NameMap map_identity(const std::vector<FileTensor>& tensors);

// torchvision VGG, structurally: the net's Convolution, BatchNorm(+Scale) and
// InnerProduct layers in order against features.<k> and classifier.<k> in
// index order. A BN group's weight/bias go to the Scale layer following the
// BatchNorm, running_mean/var to the BatchNorm. ShapeError when a
// convolution meets a BatchNorm (a vgg16 file for a vgg16_bn net, say).
NameMap map_torchvision_vgg(const Net& net, const std::vector<FileTensor>& tensors);

// ViT, by name (the layer names of models/ in docs: patch_embed, embed,
// block{i}_*, ln, head). Returns "" for names the map does not know.
std::string torchvision_vit_name(const std::string& file_name);  // mlp.0/3 and mlp.linear_1/2
std::string timm_vit_name(const std::string& file_name);
NameMap map_by_name(const std::vector<FileTensor>& tensors, std::string (*rename)(const std::string&));

}  // namespace strata::transfer
