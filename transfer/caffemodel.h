// Caffe's binary weights (.caffemodel: a NetParameter whose layers carry
// their parameter blobs), read with framework/caffe/protobuf_wire.h:
//
//   NetParameter     { name=1  layers=2 (V1LayerParameter)  layer=100 (LayerParameter) }
//   LayerParameter   { name=1  type=2 (string)  blobs=7 }
//   V1LayerParameter { layer=1 (V0)  name=4  type=5 (enum)  blobs=6 }
//   V0LayerParameter { name=1  type=2 (string)  blobs=50 }
//
// Blobs are matched to strata parameters by layer name and blob index:
// blob i of layer L is the i-th parameter of strata's layer L (weight, bias;
// Scale's weight, bias), except BatchNorm, whose three Caffe blobs (the
// running mean and variance, each multiplied by the scale factor in blob 2)
// become running_mean and running_var divided by that factor, as Caffe
// computes them.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "framework/caffe/caffe_proto.h"
#include "framework/tensor.h"

namespace strata::transfer {

struct CaffeLayerBlobs {
  std::string name;
  std::string type;  // V2 spelling ("Convolution"); V1 enums and V0 strings translated
  std::vector<caffe::BlobProto> blobs;
};

struct CaffeModel {
  std::string name;
  std::vector<CaffeLayerBlobs> layers;  // only the layers that have blobs
};

// IoError naming the path (and the field and offset) when the file cannot be
// read or is not a NetParameter.
CaffeModel read_caffemodel(const std::string& path);
// The same from bytes; `what` names them in errors.
CaffeModel parse_caffemodel(const std::string& bytes, const std::string& what);

// True when the file is named *.caffemodel, or its first bytes are not a
// safetensors header but look like a NetParameter.
bool looks_like_caffemodel(const std::string& path);

// The parameter names of a Caffe layer's blobs without a net to ask
// ("weight", "bias"; BatchNorm's "running_mean", "running_var").
std::vector<std::string> caffe_param_names(const std::string& type, size_t blobs);

// The tensors of one layer under short parameter names, converted as
// described above; legacy 4-D shapes are reduced to the layer's natural
// rank (InnerProduct weight [out, in], biases [C]). `where` names the
// layer in errors.
std::vector<std::pair<std::string, Tensor>> caffe_layer_tensors(const CaffeLayerBlobs& layer,
                                                                const std::vector<std::string>& names);

// `strata convert model.caffemodel out.safetensors`: every blob under
// "<layer>.<param>" names, with the model's name in the metadata.
// Returns the number of tensors written.
size_t convert_caffemodel(const std::string& in_path, const std::string& out_path);

}  // namespace strata::transfer
