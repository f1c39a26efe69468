#include "layers/array_data.h"

#include <cmath>
#include <cstring>

#include "framework/error.h"
#include "framework/io/npy.h"

namespace strata {

ArrayDataLayer::ArrayDataLayer(const LayerSpec& spec, const LayerContext& ctx)
    : InMemoryDataLayer(spec, ctx, "array_data_param") {
  source_path_ = resolve(data_param().get_string("source"));
  if (data_param().has("label_source")) label_path_ = resolve(data_param().get_string("label_source"));
}

LayerSchema ArrayDataLayer::schema() {
  LayerSchema s;
  s.kind = LayerKind::kData;
  std::vector<std::string> keys = {"source", "label_source"};
  keys.insert(keys.end(), data_option_keys().begin(), data_option_keys().end());
  s.blocks = {{"array_data_param", keys}, {"transform_param", transform_keys()}};
  s.summary =
      "Serves inputs and integer labels from two .npy files (float32 or uint8, N x ...), loaded "
      "whole; shuffled, sharded per rank, batches wrap around epochs.";
  return s;
}

namespace {

std::vector<int32_t> read_labels(const std::string& path) {
  const NpyArray a = read_npy(path);
  const bool column = a.shape.size() == 2 && a.shape[1] == 1;
  if (a.shape.size() != 1 && !column) {
    fail<IoError>(path, ": labels must have shape (N,) or (N, 1), got ", shape_str(a.shape));
  }
  const int64_t n = a.shape[0];
  std::vector<int32_t> labels(static_cast<size_t>(n));
  switch (a.dtype) {
    case DType::kI32:
      std::memcpy(labels.data(), a.as<int32_t>(), labels.size() * sizeof(int32_t));
      break;
    case DType::kU8:
      for (int64_t i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = a.as<uint8_t>()[i];
      break;
    case DType::kF32:
      for (int64_t i = 0; i < n; ++i) {
        const float v = a.as<float>()[i];
        if (!(std::floor(v) == v && std::fabs(v) < 2147483648.0f)) {
          fail<IoError>(path, ": label ", i, " is ", v,
                        ", not an integer class; labels must be whole numbers (save them as int32 or int64)");
        }
        labels[static_cast<size_t>(i)] = static_cast<int32_t>(v);
      }
      break;
    default:
      fail<IoError>(path, ": labels of dtype ", dtype_name(a.dtype),
                    " are not supported; save them as int32 or int64");
  }
  return labels;
}

}  // namespace

InMemoryData ArrayDataLayer::load() {
  NpyArray a = read_npy(source_path_);
  if (a.dtype != DType::kF32 && a.dtype != DType::kU8) {
    fail<IoError>(source_path_, ": inputs of dtype ", dtype_name(a.dtype),
                  " are not supported; save them as float32 (or uint8 with transform_param { scale })");
  }
  if (a.shape.empty()) fail<IoError>(source_path_, ": holds a scalar; inputs need shape (N, ...)");
  Shape shape = a.shape;
  if (shape.size() == 1) shape.push_back(1);  // N scalars: one feature each
  InMemoryData data;
  data.samples = Tensor(shape, a.dtype);
  if (!a.data.empty()) std::memcpy(data.samples.raw_data(), a.data.data(), a.data.size());

  if (!label_path_.empty()) {
    data.labels = read_labels(label_path_);
    if (static_cast<int64_t>(data.labels.size()) != shape[0]) {
      fail<IoError>("source '", source_path_, "' has ", shape[0], " samples but label_source '", label_path_,
                    "' has ", data.labels.size(), " labels; row i of the labels must belong to sample i");
    }
  }
  return data;
}

STRATA_REGISTER_LAYER("ArrayData", ArrayDataLayer);

}  // namespace strata
