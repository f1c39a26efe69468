#include "layers/cifar10_data.h"

#include <cstring>

#include "framework/error.h"
#include "framework/io/file_util.h"

namespace strata {

namespace {
constexpr int64_t kPixels = 3 * 32 * 32;
constexpr int64_t kRecord = 1 + kPixels;
constexpr int kClasses = 10;
}  // namespace

Cifar10DataLayer::Cifar10DataLayer(const LayerSpec& spec, const LayerContext& ctx)
    : InMemoryDataLayer(spec, ctx, "cifar10_data_param") {
  for (const std::string& s : data_param().get_strings("source")) source_paths_.push_back(resolve(s));
  if (source_paths_.empty()) {
    fail<ConfigError>(where_at(), ": cifar10_data_param needs at least one `source: \"data_batch_1.bin\"`",
                      " (repeat the key for several files)");
  }
}

LayerSchema Cifar10DataLayer::schema() {
  LayerSchema s;
  s.kind = LayerKind::kData;
  std::vector<std::string> keys = {"source"};
  keys.insert(keys.end(), data_option_keys().begin(), data_option_keys().end());
  s.blocks = {{"cifar10_data_param", keys}, {"transform_param", transform_keys()}};
  s.summary =
      "Serves CIFAR-10 binary batches (repeated source) as [N,3,32,32] pixel bytes through "
      "transform_param, with labels 0..9; shuffled, sharded per rank.";
  return s;
}

InMemoryData Cifar10DataLayer::load() {
  std::vector<std::string> files;
  int64_t total = 0;
  for (const std::string& path : source_paths_) {
    files.push_back(read_file_bytes(path));
    const int64_t size = static_cast<int64_t>(files.back().size());
    if (size == 0 || size % kRecord != 0) {
      fail<IoError>(path, ": file size is ", size, " bytes, not a positive multiple of the ", kRecord,
                    "-byte CIFAR-10 record (1 label byte + 3072 pixel bytes); is it truncated, or the "
                    "CIFAR-100 or Python version?");
    }
    total += size / kRecord;
  }
  InMemoryData data;
  data.samples = Tensor({total, 3, 32, 32}, DType::kU8);
  data.labels.resize(static_cast<size_t>(total));
  auto* pixels = data.samples.data<uint8_t>();
  int64_t n = 0;
  for (size_t f = 0; f < files.size(); ++f) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(files[f].data());
    const int64_t records = static_cast<int64_t>(files[f].size()) / kRecord;
    for (int64_t r = 0; r < records; ++r, ++n) {
      const uint8_t* record = bytes + r * kRecord;
      if (record[0] >= kClasses) {
        fail<IoError>(source_paths_[f], ": record ", r, " (byte offset ", r * kRecord, ") has label ",
                      int{record[0]}, ", expected 0..9; is this a CIFAR-10 binary batch?");
      }
      data.labels[static_cast<size_t>(n)] = record[0];
      std::memcpy(pixels + n * kPixels, record + 1, kPixels);
    }
    files[f].clear();
    files[f].shrink_to_fit();
  }
  return data;
}

STRATA_REGISTER_LAYER("Cifar10Data", Cifar10DataLayer);

}  // namespace strata
