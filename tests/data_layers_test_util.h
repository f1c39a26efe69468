// Helpers shared by data_layers_test.cpp and data_layers_errors_test.cpp: a
// data layer run without a Net, and a fixture that writes input files into a
// fresh temp folder per test.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/config/config.h"
#include "framework/layer.h"
#include "framework/layer_registry.h"
#include "framework/io/npy.h"
#include "framework/data/data_source.h"
#include "layers/in_memory_data.h"
#include "tests/test_util.h"

namespace strata {
namespace data_layers_test {

using test::error_of;

struct Options {
  Phase phase = Phase::kTrain;
  int rank = 0;
  int world_size = 1;
  uint64_t seed = 1;
  int tops = 2;
};

// A data layer built from its config body and set up with its own top blobs.
class Runner {
 public:
  Runner(const std::string& type, const std::string& body, const std::string& base_dir,
         const Options& o = Options()) {
    const ConfigNode root = parse_config_text(
        "layer { name: \"data\" type: \"" + type + "\" top: \"data\" top: \"label\" " + body + " }",
        "test.prototxt");
    LayerSpec spec;
    spec.name = "data";
    spec.type = type;
    spec.tops = {"data", "label"};
    spec.tops.resize(static_cast<size_t>(o.tops));
    spec.node = *root.find("layer");
    LayerContext ctx;
    ctx.phase = o.phase;
    ctx.base_dir = base_dir;
    ctx.seed = o.seed;
    ctx.rank = o.rank;
    ctx.world_size = o.world_size;
    layer_ = LayerRegistry::instance().find(type).create(spec, ctx);
    for (int i = 0; i < o.tops; ++i) {
      blobs_.push_back(std::make_unique<Blob>());
      tops_.push_back(blobs_.back().get());
    }
    layer_->setup({}, tops_);
  }

  // One forward pass; returns the data top.
  const Blob& step() {
    layer_->reshape({}, tops_);
    layer_->forward_cpu({}, tops_);
    return *tops_[0];
  }
  std::vector<float> data() const { return values(*tops_[0]); }
  std::vector<float> labels() const { return values(*tops_.at(1)); }
  // Forward and return the labels, which the tests below make equal to the sample index.
  std::vector<int> next_ids() {
    step();
    const Blob& label = *tops_.at(1);
    std::vector<int> ids(static_cast<size_t>(label.numel()));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int>(label.data.data<float>()[i]);
    return ids;
  }
  Layer& layer() { return *layer_; }
  const DataSource& source() const { return dynamic_cast<const InMemoryDataLayer&>(*layer_).source(); }
  const BlobVec& tops() const { return tops_; }

 private:
  static std::vector<float> values(const Blob& b) {
    std::vector<float> v(static_cast<size_t>(b.numel()));
    if (!v.empty()) std::memcpy(v.data(), b.data.data<float>(), v.size() * sizeof(float));
    return v;
  }

  std::unique_ptr<Layer> layer_;
  std::vector<std::unique_ptr<Blob>> blobs_;
  BlobVec tops_;
};

class DataLayersTest : public ::testing::Test {
 protected:
  test::TempDir tmp_{"strata_data_layers"};
  std::string dir_ = tmp_.path();
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  void write_bytes(const std::string& name, const std::vector<uint8_t>& bytes) const {
    test::write_bytes(path(name), bytes);
  }

  // n samples of shape [2, 3]; sample i holds 100*i + k; label i (so labels name samples).
  void write_indexed_array(int64_t n, const std::string& x = "x.npy", const std::string& y = "y.npy") const {
    std::vector<float> xs;
    std::vector<int32_t> ys;
    for (int64_t i = 0; i < n; ++i) {
      for (int k = 0; k < 6; ++k) xs.push_back(static_cast<float>(100 * i + k));
      ys.push_back(static_cast<int32_t>(i));
    }
    write_npy(path(x), DType::kF32, {n, 2, 3}, xs.data());
    write_npy(path(y), DType::kI32, {n}, ys.data());
  }

  static std::string array_body(int batch, const std::string& extra = "") {
    return "array_data_param { source: \"x.npy\" label_source: \"y.npy\" batch_size: " +
           std::to_string(batch) + " " + extra + " }";
  }

  static std::vector<uint8_t> be32(uint32_t v) {
    return {static_cast<uint8_t>(v >> 24), static_cast<uint8_t>(v >> 16), static_cast<uint8_t>(v >> 8),
            static_cast<uint8_t>(v)};
  }
  // idx3 images (pixel (i, p) = (7 i + p) mod 256) and idx1 labels (i mod 10).
  void write_mnist(uint32_t n, uint32_t rows, uint32_t cols, uint32_t image_magic = 2051,
                   uint32_t label_magic = 2049, uint32_t label_count = ~0u) const {
    std::vector<uint8_t> img, lab;
    for (uint32_t v : {image_magic, n, rows, cols}) {
      for (uint8_t b : be32(v)) img.push_back(b);
    }
    for (uint32_t i = 0; i < n; ++i) {
      for (uint32_t p = 0; p < rows * cols; ++p) img.push_back(static_cast<uint8_t>((7 * i + p) % 256));
    }
    const uint32_t nl = label_count == ~0u ? n : label_count;
    for (uint32_t v : {label_magic, nl}) {
      for (uint8_t b : be32(v)) lab.push_back(b);
    }
    for (uint32_t i = 0; i < nl; ++i) lab.push_back(static_cast<uint8_t>(i % 10));
    write_bytes("images.idx3", img);
    write_bytes("labels.idx1", lab);
  }
  // CIFAR-10 records: label (first + r) % 10, pixels (first + r + p) mod 256.
  void write_cifar(const std::string& name, int records, int first) const {
    std::vector<uint8_t> bytes;
    for (int r = 0; r < records; ++r) {
      bytes.push_back(static_cast<uint8_t>((first + r) % 10));
      for (int p = 0; p < 3072; ++p) bytes.push_back(static_cast<uint8_t>((first + r + p) % 256));
    }
    write_bytes(name, bytes);
  }
};

}  // namespace data_layers_test
}  // namespace strata
