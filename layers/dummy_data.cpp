#include "layers/dummy_data.h"

#include <string>

#include "framework/error.h"
#include "framework/layer_registry.h"

namespace strata {

DummyDataLayer::DummyDataLayer(const LayerSpec& spec, const LayerContext& ctx) : SourceLayer(spec, ctx) {
  const ConfigNode& p = block("dummy_data_param");
  const std::string context = "dummy_data_param of " + where() + " at " + p.loc().str();
  const size_t tops = spec.tops.size();
  // One entry for every top, or one per top.
  auto check_count = [&](const std::string& key, size_t n) {
    if (n != 1 && n != tops) {
      fail<ConfigError>(context, ": ", n, " ", key, " entries for ", tops, " top(s); give one for every top, or one per top");
    }
  };

  const std::vector<const ConfigNode*> fillers = p.all("data_filler");
  if (!fillers.empty()) check_count("data_filler", fillers.size());
  for (size_t i = 0; i < tops; ++i) {
    fillers_.push_back(fillers.empty() ? FillerSpec{}
                                       : parse_filler(*fillers[fillers.size() == 1 ? 0 : i], FillerSpec{},
                                                      "data_filler of " + where()));
  }

  const std::vector<std::string> legacy = {"num", "channels", "height", "width"};
  bool has_legacy = false;
  for (const std::string& k : legacy) has_legacy = has_legacy || p.has(k);
  const std::vector<const ConfigNode*> shapes = p.all("shape");
  if (has_legacy && !shapes.empty()) {
    fail<ConfigError>(context, ": give either shape { dim: ... } or the legacy num/channels/height/width, not both");
  }
  if (has_legacy) {
    std::vector<std::vector<int64_t>> dims;
    for (const std::string& k : legacy) {
      dims.push_back(p.get_ints(k));
      if (dims.back().empty()) {
        fail<ConfigError>(context, ": the legacy shape needs all of num, channels, height and width; missing ", k);
      }
      check_count(k, dims.back().size());
    }
    for (size_t i = 0; i < tops; ++i) {
      Shape s;
      for (const auto& d : dims) s.push_back(d[d.size() == 1 ? 0 : i]);
      shapes_.push_back(s);
    }
  } else {
    if (shapes.empty()) {
      fail<ConfigError>(context, ": needs shape { dim: ... } (one for every top, or one per top), or the legacy "
                                 "num/channels/height/width");
    }
    check_count("shape", shapes.size());
    for (size_t i = 0; i < tops; ++i) {
      const ConfigNode& s = *shapes[shapes.size() == 1 ? 0 : i];
      if (!s.is_block()) fail<ConfigError>(context, ": expected a block 'shape { dim: ... }' at ", s.loc().str());
      s.check_keys({"dim"}, "shape in " + context);
      shapes_.push_back(Shape(s.get_ints("dim")));
    }
  }
  for (const Shape& s : shapes_) {
    for (int64_t d : s) {
      if (d < 0) fail<ConfigError>(context, ": dimensions must be >= 0, got shape ", shape_str(s));
    }
  }
  staging_.resize(tops);
}

LayerSchema DummyDataLayer::schema() {
  LayerSchema s;
  s.kind = LayerKind::kData;
  s.summary = "Tops of fixed shapes filled by fillers on every forward (Caffe DummyData)";
  s.blocks = {{"dummy_data_param", {"data_filler", "shape", "num", "channels", "height", "width"}}};
  // No examples: a data layer has no bottoms; tests/caffe_layers_test.cpp covers it.
  return s;
}

void DummyDataLayer::setup(const BlobVec& /*bottom*/, const BlobVec& top) {
  for (size_t i = 0; i < top.size(); ++i) top[i]->resize(shapes_[i]);
}

void DummyDataLayer::reshape(const BlobVec& /*bottom*/, const BlobVec& top) {
  for (size_t i = 0; i < top.size(); ++i) top[i]->resize(shapes_[i]);
}

void DummyDataLayer::refill(const BlobVec& top) {
  for (size_t i = 0; i < top.size(); ++i) {
    Tensor& t = top[i]->data;
    if (t.device().is_cpu()) {
      fill(fillers_[i], t, rng_);
    } else if (fillers_[i].type == "constant") {
      t.fill(fillers_[i].value);
    } else {
      staging_[i].resize(t.shape());
      fill(fillers_[i], staging_[i], rng_);
      t.copy_from(staging_[i]);
    }
  }
}

// Refilled on every forward (Caffe keeps a constant fill from setup): a
// layer working in place on a top cannot leave its changes for the next batch.
void DummyDataLayer::forward_cpu(const BlobVec& /*bottom*/, const BlobVec& top) { refill(top); }

STRATA_REGISTER_LAYER("DummyData", DummyDataLayer);

}  // namespace strata
