#include "framework/caffe/caffe_layer_types.h"

#include <algorithm>

namespace strata {

const std::vector<std::string>& caffe_layer_types() {
  static const std::vector<std::string> types = {
      "AbsVal",       "Accuracy",       "ArgMax",
      "BatchNorm",    "BatchReindex",   "Bias",
      "BNLL",         "Clip",           "Concat",
      "ContrastiveLoss", "Convolution", "Crop",
      "Data",         "Deconvolution",  "Dropout",
      "DummyData",    "Eltwise",        "ELU",
      "Embed",        "EuclideanLoss",  "Exp",
      "Filter",       "Flatten",        "HDF5Data",
      "HDF5Output",   "HingeLoss",      "Im2col",
      "ImageData",    "InfogainLoss",   "InnerProduct",
      "Input",        "Log",            "LRN",
      "LSTM",         "MemoryData",     "MultinomialLogisticLoss",
      "MVN",          "Parameter",      "Pooling",
      "Power",        "PReLU",          "Python",
      "Recurrent",    "Reduction",      "ReLU",
      "Reshape",      "RNN",            "Scale",
      "Sigmoid",      "SigmoidCrossEntropyLoss", "Silence",
      "Slice",        "Softmax",        "SoftmaxWithLoss",
      "Split",        "SPP",            "Swish",
      "TanH",         "Threshold",      "Tile",
      "WindowData",
  };
  return types;
}

bool is_caffe_layer_type(const std::string& type) {
  const std::vector<std::string>& t = caffe_layer_types();
  return std::find(t.begin(), t.end(), type) != t.end();
}

}  // namespace strata
