#include "layers/mnist_data.h"

#include <cstring>

#include "framework/error.h"
#include "framework/io/file_util.h"

namespace strata {

MnistDataLayer::MnistDataLayer(const LayerSpec& spec, const LayerContext& ctx)
    : InMemoryDataLayer(spec, ctx, "mnist_data_param") {
  source_path_ = resolve(data_param().get_string("source"));
  if (data_param().has("label_source")) label_path_ = resolve(data_param().get_string("label_source"));
}

LayerSchema MnistDataLayer::schema() {
  LayerSchema s;
  s.kind = LayerKind::kData;
  std::vector<std::string> keys = {"source", "label_source"};
  keys.insert(keys.end(), data_option_keys().begin(), data_option_keys().end());
  s.blocks = {{"mnist_data_param", keys}, {"transform_param", transform_keys()}};
  s.summary =
      "Serves MNIST idx files (idx3 images, idx1 labels) as [N,1,28,28] pixel bytes through "
      "transform_param (LeNet: scale 0.00390625); shuffled, sharded per rank.";
  return s;
}

namespace {

constexpr uint32_t kImageMagic = 2051;  // 0x00000803: unsigned bytes, 3 dimensions
constexpr uint32_t kLabelMagic = 2049;  // 0x00000801: unsigned bytes, 1 dimension

uint32_t big_endian_u32(const std::string& bytes, size_t offset) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data()) + offset;
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Reads the header of an idx file: the magic, then `dims` big-endian sizes.
std::vector<uint32_t> read_idx_header(const std::string& path, const std::string& bytes, uint32_t magic,
                                      size_t dims, const char* kind) {
  const size_t header = 4 * (1 + dims);
  if (bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
      static_cast<unsigned char>(bytes[1]) == 0x8b) {
    fail<IoError>(path, ": is gzip-compressed; unpack it first (gunzip '", path, "')");
  }
  if (bytes.size() < header) {
    fail<IoError>(path, ": truncated: ", bytes.size(), " bytes, but an ", kind, " header needs ", header);
  }
  const uint32_t found = big_endian_u32(bytes, 0);
  if (found != magic) {
    std::string hint;
    if (found == kImageMagic) hint = " (2051 marks an idx3 image file: are source and label_source swapped?)";
    if (found == kLabelMagic) hint = " (2049 marks an idx1 label file: are source and label_source swapped?)";
    fail<IoError>(path, ": field 'magic' is ", found, ", expected ", magic, " for an ", kind, " file", hint);
  }
  std::vector<uint32_t> sizes;
  for (size_t d = 0; d < dims; ++d) sizes.push_back(big_endian_u32(bytes, 4 * (1 + d)));
  return sizes;
}

}  // namespace

InMemoryData MnistDataLayer::load() {
  InMemoryData data;
  {
    const std::string bytes = read_file_bytes(source_path_);
    const std::vector<uint32_t> h = read_idx_header(source_path_, bytes, kImageMagic, 3, "idx3 image");
    const int64_t count = h[0], rows = h[1], cols = h[2];
    if (rows == 0 || cols == 0) {
      fail<IoError>(source_path_, ": field '", rows == 0 ? "rows" : "cols", "' is 0; images need pixels");
    }
    const int64_t expected = 16 + count * rows * cols;
    if (static_cast<int64_t>(bytes.size()) != expected) {
      fail<IoError>(source_path_, ": file size is ", bytes.size(), " bytes, but the header (count ", count,
                    ", rows ", rows, ", cols ", cols, ") needs ", expected,
                    bytes.size() < static_cast<size_t>(expected) ? "; the file is truncated" : "");
    }
    data.samples = Tensor({count, 1, rows, cols}, DType::kU8);
    if (count > 0) std::memcpy(data.samples.raw_data(), bytes.data() + 16, bytes.size() - 16);
  }
  if (!label_path_.empty()) {
    const std::string bytes = read_file_bytes(label_path_);
    const int64_t count = read_idx_header(label_path_, bytes, kLabelMagic, 1, "idx1 label")[0];
    if (static_cast<int64_t>(bytes.size()) != 8 + count) {
      fail<IoError>(label_path_, ": file size is ", bytes.size(), " bytes, but the header (count ", count,
                    ") needs ", 8 + count);
    }
    const int64_t images = data.samples.dim(0);
    if (count != images) {
      fail<IoError>(label_path_, ": field 'count' is ", count, ", but source '", source_path_, "' holds ",
                    images, " images; the two files must belong together");
    }
    data.labels.resize(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
      data.labels[static_cast<size_t>(i)] = static_cast<unsigned char>(bytes[static_cast<size_t>(8 + i)]);
    }
  }
  return data;
}

STRATA_REGISTER_LAYER("MnistData", MnistDataLayer);

}  // namespace strata
