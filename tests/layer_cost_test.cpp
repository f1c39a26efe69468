// What layers declare about their work (LayerSchema::work, Layer::
// forward_cost, LayerSchema::grid_params; framework/layer.h), and the code
// that reads the declarations instead of lists of type names: the FLOP
// counter of `strata time`/`estimate`, the pipeline balancer's cost model
// and the position-embedding interpolation of pretrained weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/layer_registry.h"
#include "parallel/model_parallel/pipeline_balance.h"
#include "tests/layer_test_util.h"

namespace strata {
namespace {

ForwardCost cost_of(const std::string& type, const std::string& config, std::vector<Shape> bottoms) {
  test_util::LayerHarness h = test_util::make_harness(type, layer_example(config, std::move(bottoms)));
  h.setup();
  return h.layer->forward_cost(h.bottom, h.top);
}

TEST(LayerCost, ConvolutionIsTwoWeightsPerOutputPosition) {
  // [2, 3, 8, 8] -> 4 channels, 3x3, pad 1: 2 * (4*3*3*3) * (2*8*8).
  const ForwardCost c = cost_of("Convolution", "convolution_param { num_output: 4 kernel_size: 3 pad: 1 }", {{2, 3, 8, 8}});
  EXPECT_DOUBLE_EQ(c.flops, 2.0 * (4 * 3 * 3 * 3) * (2 * 8 * 8));
  // weights, bias, input, output, in fp32
  EXPECT_DOUBLE_EQ(c.bytes, 4.0 * (4 * 3 * 3 * 3 + 4 + 2 * 3 * 8 * 8 + 2 * 4 * 8 * 8));
}

TEST(LayerCost, InnerProductOverTokensCountsEveryToken) {
  const ForwardCost c = cost_of("InnerProduct", "inner_product_param { num_output: 5 axis: 2 }", {{2, 3, 4}});
  EXPECT_DOUBLE_EQ(c.flops, 2.0 * (5 * 4) * (2 * 3));
}

TEST(LayerCost, AttentionAddsScoresAndTheirWeightedSum) {
  // [N, T, D] = [2, 3, 4]: projections 2 * (4*4*4 weights) * 6 tokens, then 4 N T^2 D.
  const ForwardCost c = cost_of("MultiHeadAttention", "attention_param { num_heads: 2 }", {{2, 3, 4}});
  EXPECT_DOUBLE_EQ(c.flops, 2.0 * (4 * 4 * 4) * (2 * 3) + 4.0 * 2 * 3 * 3 * 4);
}

TEST(LayerCost, DeconvolutionRunsOverItsInputPositions) {
  const ForwardCost c =
      cost_of("Deconvolution", "convolution_param { num_output: 2 kernel_size: 2 stride: 2 }", {{1, 3, 4, 4}});
  EXPECT_DOUBLE_EQ(c.flops, 2.0 * (3 * 2 * 2 * 2) * (1 * 4 * 4));
}

TEST(LayerCost, ElementwiseLayersCountOnePerOutputElement) {
  EXPECT_DOUBLE_EQ(cost_of("ReLU", "", {{2, 3, 4}}).flops, 24.0);
  EXPECT_DOUBLE_EQ(cost_of("GELU", "", {{2, 5}}).flops, 10.0);
}

// Every type that declares LayerWork::kWeights has weights in each of its
// examples, so its cost is not silently zero; and costs are never negative.
TEST(LayerCost, EveryRegisteredTypeDeclaresACostItCanBack) {
  int weighted = 0;
  for (const std::string& type : LayerRegistry::instance().types()) {
    const LayerSchema schema = LayerRegistry::instance().find(type).schema();
    for (const LayerExample& ex : schema.examples) {
      test_util::LayerHarness h = test_util::make_harness(type, ex);
      h.setup();
      const ForwardCost c = h.layer->forward_cost(h.bottom, h.top);
      EXPECT_GE(c.flops, 0.0) << type;
      EXPECT_GT(c.bytes, 0.0) << type;
      if (schema.work == LayerWork::kWeights) {
        EXPECT_GT(weight_elements(*h.layer), 0.0) << type << " declares LayerWork::kWeights but has no weights";
        EXPECT_GT(c.flops, 0.0) << type;
      }
    }
    weighted += schema.work == LayerWork::kWeights;
  }
  EXPECT_GE(weighted, 5) << "Convolution, Deconvolution, InnerProduct, PatchEmbed and MultiHeadAttention";
}

TEST(LayerCost, TheBalancersModelWeighsWhatLayersDeclare) {
  // The model the balancer uses when the net is not built (--max-memory):
  // attention and patch embedding weigh as much as InnerProduct (a list of
  // type names once left them out), GELU and the rest little.
  const ConfigNode net = parse_config_text(R"(
    name: "vit_block"
    layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 dim: 8 dim: 8 } } }
    layer { name: "patch" type: "PatchEmbed" bottom: "x" top: "t" patch_embed_param { patch_size: 4 num_output: 8 } }
    layer { name: "norm" type: "LayerNorm" bottom: "t" top: "n" }
    layer { name: "attn" type: "MultiHeadAttention" bottom: "n" top: "a" attention_param { num_heads: 2 } }
    layer { name: "gelu" type: "GELU" bottom: "a" top: "g" }
    layer { name: "fc" type: "InnerProduct" bottom: "g" top: "y" inner_product_param { num_output: 8 axis: 2 } }
  )", "vit_block.prototxt");
  const std::vector<parallel::LayerCost> costs = parallel::model_layer_costs(net);
  ASSERT_EQ(costs.size(), 6u);
  const std::vector<std::string> heavy = {"patch", "norm", "attn", "fc"};
  for (const parallel::LayerCost& c : costs) {
    const bool want_heavy = std::find(heavy.begin(), heavy.end(), c.name) != heavy.end();
    EXPECT_EQ(c.seconds, want_heavy ? 1.0 : 0.05) << c.name;
  }
}

TEST(LayerCost, PositionEmbeddingDeclaresItsGridParameter) {
  const LayerSchema s = LayerRegistry::instance().find("PositionEmbedding").schema();
  EXPECT_EQ(s.grid_params, std::vector<std::string>{"pos_embedding"});
  // A declared grid parameter is a parameter the layer creates.
  for (const std::string& type : LayerRegistry::instance().types()) {
    const LayerSchema schema = LayerRegistry::instance().find(type).schema();
    for (const std::string& name : schema.grid_params) {
      ASSERT_FALSE(schema.examples.empty()) << type;
      test_util::LayerHarness h = test_util::make_harness(type, schema.examples[0]);
      h.setup();
      bool found = false;
      for (const LayerParam& p : h.layer->params()) found = found || p.name == name;
      EXPECT_TRUE(found) << type << " declares grid parameter '" << name << "', which it does not create";
    }
  }
}

}  // namespace
}  // namespace strata
