#include "transfer/caffemodel.h"

#include <cstring>
#include <fstream>
#include <map>

#include "framework/error.h"
#include "framework/io/file_util.h"
#include "framework/caffe/protobuf_wire.h"
#include "framework/io/safetensors.h"

namespace strata::transfer {

using protobuf::Field;
using protobuf::WireReader;

namespace {

// V1LayerParameter.LayerType values (caffe.proto) of the layers that carry
// blobs or are common; others keep their number in messages.
std::string v1_type_name(int64_t v) {
  static const std::map<int64_t, std::string> names = {
      {1, "Accuracy"},      {2, "BNLL"},        {3, "Concat"},       {4, "Convolution"},  {5, "Data"},
      {6, "Dropout"},       {7, "EuclideanLoss"}, {8, "Flatten"},    {9, "HDF5Data"},     {10, "HDF5Output"},
      {12, "ImageData"},    {13, "InfogainLoss"}, {14, "InnerProduct"}, {15, "LRN"},      {17, "Pooling"},
      {18, "ReLU"},         {19, "Sigmoid"},    {20, "Softmax"},     {21, "SoftmaxWithLoss"}, {22, "Split"},
      {23, "TanH"},         {25, "Eltwise"},    {26, "Power"},       {30, "ArgMax"},      {33, "Slice"},
      {35, "AbsVal"},       {36, "Silence"},    {39, "Deconvolution"}};
  auto it = names.find(v);
  return it != names.end() ? it->second : "V1 type " + std::to_string(v);
}

std::string v0_type_name(const std::string& t) {
  if (t == "conv") return "Convolution";
  if (t == "innerproduct") return "InnerProduct";
  return t;
}

void read_layer(const WireReader& net, const Field& f, uint32_t name_field, uint32_t type_field,
                uint32_t blobs_field, bool v1, CaffeModel* model) {
  CaffeLayerBlobs layer;
  WireReader r = net.message(f, v1 ? "layers" : "layer");
  Field g;
  while (r.next(&g)) {
    if (g.number == name_field) {
      layer.name = std::string(r.as_bytes(g, "name"));
    } else if (g.number == type_field) {
      layer.type = v1 ? v1_type_name(r.as_int(g, "type")) : std::string(r.as_bytes(g, "type"));
    } else if (g.number == blobs_field) {
      layer.blobs.push_back(caffe::parse_blob_proto(r, g, "blobs"));
    } else if (v1 && g.number == 1) {
      // A V0 layer inside a V1 entry (files from before 2014).
      CaffeModel inner;
      read_layer(r, g, 1, 2, 50, false, &inner);
      if (!inner.layers.empty()) {
        if (layer.name.empty()) layer.name = inner.layers[0].name;
        layer.type = v0_type_name(inner.layers[0].type);
        for (auto& b : inner.layers[0].blobs) layer.blobs.push_back(std::move(b));
      }
    }
  }
  if (layer.blobs.empty()) return;
  if (layer.name.empty()) {
    fail<IoError>(net.what(), ": a layer at byte ", f.offset, " has ", layer.blobs.size(),
                  " blobs but no name; weights are matched by layer name");
  }
  model->layers.push_back(std::move(layer));
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Leading axes of size 1 dropped, at least `keep` axes kept.
Shape strip_ones(const Shape& s, size_t keep) {
  size_t i = 0;
  while (i + keep < s.size() && s[i] == 1) ++i;
  return Shape(s.begin() + static_cast<std::ptrdiff_t>(i), s.end());
}

}  // namespace

CaffeModel parse_caffemodel(const std::string& bytes, const std::string& what) {
  CaffeModel model;
  WireReader r(bytes, what);
  Field f;
  while (r.next(&f)) {
    if (f.number == 1) {
      model.name = std::string(r.as_bytes(f, "name"));
    } else if (f.number == 100) {
      read_layer(r, f, 1, 2, 7, false, &model);
    } else if (f.number == 2) {
      read_layer(r, f, 4, 5, 6, true, &model);
    }
  }
  return model;
}

CaffeModel read_caffemodel(const std::string& path) {
  const std::string bytes = read_file_bytes(path);
  return parse_caffemodel(bytes, "Caffe weights '" + path + "'");
}

bool looks_like_caffemodel(const std::string& path) {
  if (ends_with(path, ".caffemodel")) return true;
  std::ifstream in(path, std::ios::binary);
  char head[9] = {};
  if (!in.read(head, 9)) return false;
  // safetensors: an 8-byte header length, then '{'. A NetParameter starts
  // with its name (field 1), a V1 layer (field 2) or a layer (field 100).
  if (head[8] == '{') return false;
  const auto b0 = static_cast<unsigned char>(head[0]);
  return b0 == 0x0a || b0 == 0x12 || (b0 == 0xa2 && static_cast<unsigned char>(head[1]) == 0x06);
}

std::vector<std::string> caffe_param_names(const std::string& type, size_t blobs) {
  if (type == "BatchNorm") return {"running_mean", "running_var"};
  std::vector<std::string> names = type == "Bias" ? std::vector<std::string>{"bias"}
                                                  : std::vector<std::string>{"weight", "bias"};
  names.resize(blobs);
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].empty()) names[i] = "blob" + std::to_string(i);
  }
  return names;
}

std::vector<std::pair<std::string, Tensor>> caffe_layer_tensors(const CaffeLayerBlobs& layer,
                                                                const std::vector<std::string>& names) {
  std::vector<std::pair<std::string, Tensor>> out;
  const std::string where = "layer '" + layer.name + "' (" + layer.type + ")";
  auto tensor = [&](const caffe::BlobProto& b, size_t index, float multiplier) {
    Shape s = b.shape;
    if (b.style == caffe::BlobShapeStyle::kLegacy) {
      const bool conv = layer.type == "Convolution" || layer.type == "Deconvolution";
      if (index == 0 && conv) {
        // a 4-D weight in every spelling
      } else if (index == 0 && layer.type == "InnerProduct") {
        s = Shape(s.end() - 2, s.end());
      } else {
        s = strip_ones(s, 1);
      }
    }
    Tensor t(s);
    float* p = t.data<float>();
    for (size_t i = 0; i < b.data.size(); ++i) p[i] = b.data[i] * multiplier;
    return t;
  };
  if (layer.type == "BatchNorm" && layer.blobs.size() == 3) {
    // Caffe keeps the running sums times a factor: mean = blobs[0] / blobs[2][0].
    const caffe::BlobProto& factor = layer.blobs[2];
    if (factor.data.size() != 1) {
      fail<IoError>(where, ": BatchNorm's third blob (the scale factor) should hold 1 value, holds ",
                    factor.data.size());
    }
    const float f = factor.data[0];
    const float m = f == 0.0f ? 0.0f : 1.0f / f;
    out.emplace_back(names.size() > 0 ? names[0] : "running_mean", tensor(layer.blobs[0], 0, m));
    out.emplace_back(names.size() > 1 ? names[1] : "running_var", tensor(layer.blobs[1], 1, m));
    return out;
  }
  for (size_t i = 0; i < layer.blobs.size(); ++i) {
    const std::string name = i < names.size() ? names[i] : "blob" + std::to_string(i);
    out.emplace_back(name, tensor(layer.blobs[i], i, 1.0f));
  }
  return out;
}

size_t convert_caffemodel(const std::string& in_path, const std::string& out_path) {
  const CaffeModel model = read_caffemodel(in_path);
  std::vector<std::pair<std::string, Tensor>> all;
  for (const CaffeLayerBlobs& layer : model.layers) {
    for (auto& [name, t] : caffe_layer_tensors(layer, caffe_param_names(layer.type, layer.blobs.size()))) {
      all.emplace_back(layer.name + "." + name, std::move(t));
    }
  }
  std::vector<TensorToWrite> out;
  for (const auto& [name, t] : all) out.push_back({name, DType::kF32, t.shape(), t.raw_data()});
  std::map<std::string, std::string> metadata = {{"source", "caffemodel"}};
  if (!model.name.empty()) metadata["caffe_net"] = model.name;
  write_safetensors(out_path, out, metadata);
  return out.size();
}

}  // namespace strata::transfer
