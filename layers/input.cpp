#include "layers/input.h"

#include "framework/error.h"
#include "framework/layer_registry.h"

namespace strata {

InputLayer::InputLayer(const LayerSpec& spec, const LayerContext& ctx) : SourceLayer(spec, ctx) {
  const ConfigNode& p = block("input_param");
  for (const ConfigNode* s : p.all("shape")) {
    const std::string context = "shape in input_param of " + where();
    if (!s->is_block()) {
      fail<ConfigError>(context, " at ", s->loc().str(), ": expected a block 'shape { dim: ... }'");
    }
    s->check_keys({"dim"}, context);
    Shape shape;
    for (int64_t d : s->get_ints("dim")) {
      if (d < 0) {
        fail<ConfigError>(context, " at ", s->loc().str(), ": dim must be >= 0, got ", d);
      }
      shape.push_back(d);
    }
    shapes_.push_back(shape);
  }
  if (shapes_.empty()) {
    fail<ConfigError>(where(), " at ", spec.node.loc().str(),
                      ": needs input_param { shape { dim: ... } } (one shape per top)");
  }
}

LayerSchema InputLayer::schema() {
  LayerSchema s;
  s.kind = LayerKind::kData;
  s.blocks = {{"input_param", {"shape"}}};
  // No examples: a data layer is exempt from the generic test (it has no
  // bottoms, nothing to differentiate); tests/shape_layers_test.cpp covers it.
  s.summary = "Declares blobs (shape per top) whose values are set from outside the Net";
  return s;
}

void InputLayer::setup(const BlobVec& /*bottom*/, const BlobVec& top) {
  if (shapes_.size() != 1 && shapes_.size() != top.size()) {
    fail<ConfigError>(where_at(), ": input_param has ", shapes_.size(),
                      " shapes for ", top.size(), " tops; give one shape per top (or one for all)");
  }
  for (size_t i = 0; i < top.size(); ++i) {
    top[i]->resize(shapes_.size() == 1 ? shapes_[0] : shapes_[i]);
  }
}

// The user may resize an input blob (e.g. another batch size) between
// forwards; keep whatever shape it has now.
void InputLayer::reshape(const BlobVec& /*bottom*/, const BlobVec& /*top*/) {}

void InputLayer::forward_cpu(const BlobVec& /*bottom*/, const BlobVec& /*top*/) {}

STRATA_REGISTER_LAYER("Input", InputLayer);

}  // namespace strata
