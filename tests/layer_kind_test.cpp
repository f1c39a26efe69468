// Layer kinds (LayerSchema::kind, framework/layer.h) are declared by each
// layer type, and the code that treats kinds differently reads them from
// the schema, never from a list of type names:
//   - a type that looks like a norm (its name, an eps key, running
//     statistics) declares LayerKind::kNormalization, so
//     no_weight_decay: BIASES_NORMS_EMBEDDINGS cannot miss it;
//   - data layers (kData) have no bottoms, and only they go without examples;
//   - embedding_params name real parameters;
//   - the fine-tuning policies follow the schema of a type they have never
//     heard of (test-only types, registered for one test).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "framework/solver/finetune_policy.h"
#include "framework/layer_registry.h"
#include "framework/net.h"
#include "tests/layer_test_util.h"
#include "tests/net_test_util.h"

namespace strata {

// For gtest's messages (found by argument-dependent lookup, so it lives in
// the namespace of LayerKind).
inline void PrintTo(LayerKind kind, std::ostream* os) { *os << layer_kind_name(kind); }

namespace {

LayerSchema schema_of(const std::string& type) { return LayerRegistry::instance().find(type).schema(); }

bool has_param(const Layer& layer, const std::string& name) {
  const auto& ps = layer.params();
  return std::any_of(ps.begin(), ps.end(), [&](const LayerParam& p) { return p.name == name; });
}

// Why a type looks like a normalisation layer; empty if it does not.
std::string norm_sign(const std::string& type, const LayerSchema& schema) {
  if (type.find("Norm") != std::string::npos) return "its type name contains 'Norm'";
  for (const ParamBlockSchema& b : schema.blocks) {
    for (const std::string& key : b.keys) {
      if (key == "eps" || key == "use_global_stats" || key == "moving_average_fraction") {
        return "its " + b.block + " has the key '" + key + "'";
      }
    }
  }
  if (!schema.examples.empty()) {
    test_util::LayerHarness h = test_util::make_harness(type, schema.examples[0]);
    h.setup();
    for (const char* stat : {"running_mean", "running_var"}) {
      if (has_param(*h.layer, stat)) return std::string("it has a parameter '") + stat + "'";
    }
  }
  return "";
}

TEST(LayerKinds, NormLikeTypesDeclareNormalization) {
  for (const std::string& type : LayerRegistry::instance().types()) {
    const LayerSchema schema = schema_of(type);
    const std::string sign = norm_sign(type, schema);
    if (!sign.empty() && schema.kind != LayerKind::kNormalization) {
      ADD_FAILURE() << "layer type " << type << " looks like a normalisation layer (" << sign << ") but its schema "
                    << "says kind " << layer_kind_name(schema.kind) << "; set s.kind = LayerKind::kNormalization "
                    << "in its schema() so that no_weight_decay: BIASES_NORMS_EMBEDDINGS covers its parameters";
    }
  }
}

// The kinds the fine-tuning policies and the test exemptions rely on today.
TEST(LayerKinds, KnownTypesDeclareTheirKind) {
  for (const char* t : {"BatchNorm", "LayerNorm", "Scale"}) EXPECT_EQ(schema_of(t).kind, LayerKind::kNormalization) << t;
  for (const char* t : {"PatchEmbed", "PositionEmbedding"}) EXPECT_EQ(schema_of(t).kind, LayerKind::kEmbedding) << t;
  for (const char* t : {"ArrayData", "Cifar10Data", "Data", "HDF5Data", "ImageData", "Input", "MnistData"}) {
    EXPECT_EQ(schema_of(t).kind, LayerKind::kData) << t;
  }
  EXPECT_EQ(schema_of("HDF5Output").kind, LayerKind::kOutput);
  for (const char* t : {"Convolution", "InnerProduct", "ReLU", "Split"}) EXPECT_EQ(schema_of(t).kind, LayerKind::kCompute) << t;
  const std::vector<std::string> pos = schema_of("PositionEmbedding").embedding_params;
  EXPECT_EQ(pos, (std::vector<std::string>{"class_token", "pos_embedding"}));
  EXPECT_TRUE(schema_of("PatchEmbed").embedding_params.empty()) << "its weight is a projection: it decays";
}

// kData means "no bottoms": the generic and golden tests skip such types.
TEST(LayerKinds, DataLayersAndOnlyThemHaveNoBottoms) {
  for (const std::string& type : LayerRegistry::instance().types()) {
    const LayerSchema schema = schema_of(type);
    std::string why;
    const std::unique_ptr<Layer> layer = test_util::build_any(type, &why);
    ASSERT_TRUE(layer) << "cannot build " << type << " to ask it: " << why;
    const bool data = schema.kind == LayerKind::kData;
    EXPECT_EQ(data, layer->max_bottoms() == 0)
        << type << ": kind " << layer_kind_name(schema.kind) << " but max_bottoms() " << layer->max_bottoms()
        << "; a layer without bottoms produces the net's input: declare LayerKind::kData (and only such a layer)";
    if (data) {
      EXPECT_TRUE(schema.examples.empty()) << type << ": a data layer has no bottoms to give an example";
    }
    if (schema.kind == LayerKind::kOutput) {
      EXPECT_EQ(layer->max_tops(), 0) << type << ": kind output means a layer without tops";
    }
  }
}

TEST(LayerKinds, EmbeddingParamsNameParametersOfTheLayer) {
  for (const std::string& type : LayerRegistry::instance().types()) {
    const LayerSchema schema = schema_of(type);
    if (schema.embedding_params.empty()) continue;
    ASSERT_FALSE(schema.examples.empty()) << type;
    for (const LayerExample& ex : schema.examples) {
      test_util::LayerHarness h = test_util::make_harness(type, ex);
      h.setup();
      for (const std::string& name : schema.embedding_params) {
        // An optional parameter (PositionEmbedding's class token) may be
        // absent in one example, but must exist in some.
        if (has_param(*h.layer, name)) continue;
        bool somewhere = false;
        for (const LayerExample& other : schema.examples) {
          test_util::LayerHarness o = test_util::make_harness(type, other);
          o.setup();
          somewhere = somewhere || has_param(*o.layer, name);
        }
        EXPECT_TRUE(somewhere) << type << " lists embedding parameter '" << name << "', which no example creates";
      }
    }
  }
}

// ---- the fine-tuning policies read kinds from the schema ----

// A [N, D] -> [N, D] identity with one parameter per name, of shape [D].
template <LayerKind kKind>
class TestOnlyLayer : public Layer {
 public:
  using Layer::Layer;
  static LayerSchema schema() {
    LayerSchema s;
    s.kind = kKind;
    if (kKind == LayerKind::kEmbedding) s.embedding_params = {"table"};
    s.summary = "test only";
    return s;
  }
  void setup(const BlobVec& bottom, const BlobVec& /*top*/) override {
    const int64_t d = bottom[0]->shape().back();
    add_param("gain", {d}).data.fill(1.0f);
    if (kKind == LayerKind::kEmbedding) add_param("table", {d}).data.fill(0.0f);
  }
  void reshape(const BlobVec& bottom, const BlobVec& top) override { top[0]->reshape_like(*bottom[0]); }
  void forward_cpu(const BlobVec& bottom, const BlobVec& top) override { top[0]->data.copy_from(bottom[0]->data); }
  void backward_cpu(const BlobVec& /*top*/, const std::vector<bool>& /*propagate_down*/,
                    const BlobVec& /*bottom*/) override {}
};

const char* kKindsNet = R"(
name: "kinds"
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 4 } } }
layer { name: "block0_fc" type: "InnerProduct" bottom: "x" top: "h" inner_product_param { num_output: 4 } }
layer { name: "norm" type: "TestOnlyNorm" bottom: "h" top: "n" }
layer { name: "emb" type: "TestOnlyEmbedding" bottom: "n" top: "e" }
layer { name: "plain" type: "TestOnlyCompute" bottom: "e" top: "p" }
)";

float decay_of(const Net& net, const std::string& p) { return net.params()[net.param_index(p)].decay_mult; }

TEST(FinetunePolicyKinds, ANewNormLayerGetsNoWeightDecay) {
  const ScopedLayerRegistration norm(layer_registration<TestOnlyLayer<LayerKind::kNormalization>>("TestOnlyNorm"));
  const ScopedLayerRegistration emb(layer_registration<TestOnlyLayer<LayerKind::kEmbedding>>("TestOnlyEmbedding"));
  const ScopedLayerRegistration plain(layer_registration<TestOnlyLayer<LayerKind::kCompute>>("TestOnlyCompute"));
  std::unique_ptr<Net> net = test::make_net(kKindsNet);
  FinetunePolicy policy;
  policy.no_weight_decay = NoWeightDecay::kBiasesNormsEmbeddings;
  apply_finetune_policy(*net, policy);
  EXPECT_EQ(decay_of(*net, "norm.gain"), 0.0f) << "a kNormalization layer's parameters are not decayed";
  EXPECT_EQ(decay_of(*net, "emb.table"), 0.0f) << "an embedding_params entry is not decayed";
  EXPECT_EQ(decay_of(*net, "emb.gain"), 1.0f) << "an embedding layer's other parameters are";
  EXPECT_EQ(decay_of(*net, "plain.gain"), 1.0f) << "the same parameter in a kCompute layer is decayed";
  EXPECT_EQ(decay_of(*net, "block0_fc.weight"), 1.0f);
  EXPECT_EQ(decay_of(*net, "block0_fc.bias"), 0.0f);
}

TEST(FinetunePolicyKinds, EmbeddingLayersAreDepthZero) {
  const ScopedLayerRegistration norm(layer_registration<TestOnlyLayer<LayerKind::kNormalization>>("TestOnlyNorm"));
  const ScopedLayerRegistration emb(layer_registration<TestOnlyLayer<LayerKind::kEmbedding>>("TestOnlyEmbedding"));
  const ScopedLayerRegistration plain(layer_registration<TestOnlyLayer<LayerKind::kCompute>>("TestOnlyCompute"));
  std::unique_ptr<Net> net = test::make_net(kKindsNet);
  const LayerDepths d = vit_layer_depths(*net);
  ASSERT_EQ(d.blocks, 1);
  EXPECT_EQ(d.depth[net->layer_index("block0_fc")], 1);
  EXPECT_EQ(d.depth[net->layer_index("norm")], 2);  // after the last block
  EXPECT_EQ(d.depth[net->layer_index("emb")], 0);   // kEmbedding, wherever it stands
  EXPECT_EQ(d.depth[net->layer_index("plain")], 2);
}

TEST(FinetunePolicyKinds, ScopedRegistrationEndsWithItsScope) {
  {
    const ScopedLayerRegistration r(layer_registration<TestOnlyLayer<LayerKind::kCompute>>("TestOnlyCompute"));
    EXPECT_TRUE(LayerRegistry::instance().has("TestOnlyCompute"));
  }
  EXPECT_FALSE(LayerRegistry::instance().has("TestOnlyCompute"));
}

}  // namespace
}  // namespace strata
