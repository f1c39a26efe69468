#include "layers/leaky_relu.h"

#include "framework/layer_registry.h"

namespace strata {

LeakyReLULayer::LeakyReLULayer(const LayerSpec& spec, const LayerContext& ctx)
    : ReLULayer(spec, ctx,
                static_cast<float>(spec.node.block("leaky_relu_param").get_double("negative_slope", 0.01))) {}

LayerSchema LeakyReLULayer::schema() {
  LayerSchema s;
  s.summary = "Leaky ReLU: x for x > 0, negative_slope * x otherwise (default slope 0.01); may run in place";
  s.blocks = {{"leaky_relu_param", {"negative_slope"}}};
  LayerExample plain;  // kink at 0: see ReLULayer::schema
  plain.bottom_shapes = {{2, 3, 4}};
  LayerExample steep = plain;
  steep.config = "leaky_relu_param { negative_slope: 0.3 }";
  s.examples = {plain, steep};
  return s;
}

STRATA_REGISTER_LAYER("LeakyReLU", LeakyReLULayer);

}  // namespace strata
