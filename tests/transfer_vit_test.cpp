// transfer::load_pretrained for ViT: torchvision (mlp.0/3 and the older
// mlp.linear_1/2 spellings) and timm names on a tiny ViT in the layer names
// of models/, format detection, and a position embedding of another grid
// interpolated on load.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/error.h"
#include "framework/net.h"
#include "framework/io/safetensors.h"
#include "tests/net_test_util.h"
#include "tests/test_util.h"
#include "transfer/name_maps.h"
#include "transfer/position_embedding.h"
#include "transfer/pretrained.h"

namespace strata {
namespace {

using test::error_of;
using test::make_net;
using transfer::detect_weights_format;
using transfer::load_pretrained;
using transfer::WeightsFormat;

constexpr int kD = 4, kHeads = 2, kMlp = 8, kClasses = 3, kPatch = 4, kBlocks = 2;

// A ViT of kBlocks blocks on [2, 3, image, image] images, named as models/ name them.
std::string tiny_vit(int image = 8) {
  auto layer = [](const std::string& name, const std::string& type, const std::vector<std::string>& bottoms,
                  const std::string& body = "") {
    std::string s = "layer { name: \"" + name + "\" type: \"" + type + "\"";
    for (const auto& b : bottoms) s += " bottom: \"" + b + "\"";
    return s + " top: \"" + name + "\" " + body + " }\n";
  };
  const std::string d = std::to_string(kD);
  std::string s = "name: \"tiny_vit\"\nlayer { name: \"data\" type: \"Input\" top: \"data\" input_param { shape { dim: 2 "
                  "dim: 3 dim: " + std::to_string(image) + " dim: " + std::to_string(image) + " } } }\n";
  s += layer("patch_embed", "PatchEmbed", {"data"},
             "patch_embed_param { patch_size: " + std::to_string(kPatch) + " num_output: " + d + " }");
  s += layer("embed", "PositionEmbedding", {"patch_embed"});
  std::string x = "embed";
  for (int i = 0; i < kBlocks; ++i) {
    const std::string b = "block" + std::to_string(i) + "_";
    s += layer(b + "ln1", "LayerNorm", {x}, "layer_norm_param { eps: 1e-6 }");
    s += layer(b + "attn", "MultiHeadAttention", {b + "ln1"}, "attention_param { num_heads: " + std::to_string(kHeads) + " }");
    s += layer(b + "add1", "Eltwise", {x, b + "attn"});
    s += layer(b + "ln2", "LayerNorm", {b + "add1"}, "layer_norm_param { eps: 1e-6 }");
    s += layer(b + "fc1", "InnerProduct", {b + "ln2"}, "inner_product_param { num_output: " + std::to_string(kMlp) + " axis: 2 }");
    s += layer(b + "gelu", "GELU", {b + "fc1"});
    s += layer(b + "fc2", "InnerProduct", {b + "gelu"}, "inner_product_param { num_output: " + d + " axis: 2 }");
    s += layer(b + "add2", "Eltwise", {b + "add1", b + "fc2"});
    x = b + "add2";
  }
  s += layer("ln", "LayerNorm", {x}, "layer_norm_param { eps: 1e-6 }");
  s += layer("pre_logits", "TokenPool", {"ln"});
  s += layer("head", "InnerProduct", {"pre_logits"}, "inner_product_param { num_output: " + std::to_string(kClasses) + " }");
  return s;
}

struct FileTensor {
  std::string name;
  Shape shape;
  std::vector<float> values;
};

enum class Spelling { kTorchvision, kTorchvisionOld, kTimm };

// The state dict of tiny_vit in a spelling, with every tensor's values distinct.
std::vector<FileTensor> vit_tensors(Spelling spelling, int grid = 2) {
  const int64_t d = kD;
  std::vector<std::pair<std::string, Shape>> named;
  const bool timm = spelling == Spelling::kTimm;
  named.push_back({timm ? "patch_embed.proj.weight" : "conv_proj.weight", {d, 3, kPatch, kPatch}});
  named.push_back({timm ? "patch_embed.proj.bias" : "conv_proj.bias", {d}});
  named.push_back({timm ? "cls_token" : "class_token", {1, 1, d}});
  named.push_back({timm ? "pos_embed" : "encoder.pos_embedding", {1, 1 + grid * grid, d}});
  for (int i = 0; i < kBlocks; ++i) {
    const std::string p = timm ? "blocks." + std::to_string(i) + "." : "encoder.layers.encoder_layer_" + std::to_string(i) + ".";
    const std::string fc1 = timm ? "mlp.fc1" : spelling == Spelling::kTorchvision ? "mlp.0" : "mlp.linear_1";
    const std::string fc2 = timm ? "mlp.fc2" : spelling == Spelling::kTorchvision ? "mlp.3" : "mlp.linear_2";
    named.push_back({p + (timm ? "norm1" : "ln_1") + ".weight", {d}});
    named.push_back({p + (timm ? "norm1" : "ln_1") + ".bias", {d}});
    named.push_back({p + (timm ? "attn.qkv.weight" : "self_attention.in_proj_weight"), {3 * d, d}});
    named.push_back({p + (timm ? "attn.qkv.bias" : "self_attention.in_proj_bias"), {3 * d}});
    named.push_back({p + (timm ? "attn.proj.weight" : "self_attention.out_proj.weight"), {d, d}});
    named.push_back({p + (timm ? "attn.proj.bias" : "self_attention.out_proj.bias"), {d}});
    named.push_back({p + (timm ? "norm2" : "ln_2") + ".weight", {d}});
    named.push_back({p + (timm ? "norm2" : "ln_2") + ".bias", {d}});
    named.push_back({p + fc1 + ".weight", {kMlp, d}});
    named.push_back({p + fc1 + ".bias", {kMlp}});
    named.push_back({p + fc2 + ".weight", {d, kMlp}});
    named.push_back({p + fc2 + ".bias", {d}});
  }
  named.push_back({timm ? "norm.weight" : "encoder.ln.weight", {d}});
  named.push_back({timm ? "norm.bias" : "encoder.ln.bias", {d}});
  named.push_back({timm ? "head.weight" : "heads.head.weight", {kClasses, d}});
  named.push_back({timm ? "head.bias" : "heads.head.bias", {kClasses}});
  std::vector<FileTensor> out;
  float seed = 1.0f;
  for (auto& [name, shape] : named) {
    FileTensor t{name, shape, std::vector<float>(static_cast<size_t>(shape_numel(shape)))};
    for (size_t i = 0; i < t.values.size(); ++i) t.values[i] = seed + 0.001f * static_cast<float>(i);
    seed += 1.0f;
    out.push_back(std::move(t));
  }
  return out;
}

void write_file(const std::string& path, const std::vector<FileTensor>& tensors) {
  std::vector<TensorToWrite> out;
  for (const FileTensor& t : tensors) out.push_back({t.name, DType::kF32, t.shape, t.values.data()});
  write_safetensors(path, out, {});
}

std::vector<std::string> names_of(const std::vector<FileTensor>& tensors) {
  std::vector<std::string> out;
  for (const auto& t : tensors) out.push_back(t.name);
  return out;
}

// strata name -> file name, the map under test spelled out by hand.
std::map<std::string, std::string> expected_routes(Spelling spelling) {
  const bool timm = spelling == Spelling::kTimm;
  std::map<std::string, std::string> m = {
      {"patch_embed.weight", timm ? "patch_embed.proj.weight" : "conv_proj.weight"},
      {"patch_embed.bias", timm ? "patch_embed.proj.bias" : "conv_proj.bias"},
      {"embed.class_token", timm ? "cls_token" : "class_token"},
      {"embed.pos_embedding", timm ? "pos_embed" : "encoder.pos_embedding"},
      {"ln.weight", timm ? "norm.weight" : "encoder.ln.weight"},
      {"ln.bias", timm ? "norm.bias" : "encoder.ln.bias"},
      {"head.weight", timm ? "head.weight" : "heads.head.weight"},
      {"head.bias", timm ? "head.bias" : "heads.head.bias"}};
  for (int i = 0; i < kBlocks; ++i) {
    const std::string b = "block" + std::to_string(i) + "_";
    const std::string p = timm ? "blocks." + std::to_string(i) + "." : "encoder.layers.encoder_layer_" + std::to_string(i) + ".";
    const std::string fc1 = timm ? "mlp.fc1" : spelling == Spelling::kTorchvision ? "mlp.0" : "mlp.linear_1";
    const std::string fc2 = timm ? "mlp.fc2" : spelling == Spelling::kTorchvision ? "mlp.3" : "mlp.linear_2";
    for (const std::string wb : {"weight", "bias"}) {
      m[b + "ln1." + wb] = p + (timm ? "norm1." : "ln_1.") + wb;
      m[b + "ln2." + wb] = p + (timm ? "norm2." : "ln_2.") + wb;
      m[b + "attn.in_proj_" + wb] = p + (timm ? "attn.qkv." + wb : "self_attention.in_proj_" + wb);
      m[b + "attn.out_proj_" + wb] = p + (timm ? "attn.proj." : "self_attention.out_proj.") + wb;
      m[b + "fc1." + wb] = p + fc1 + "." + wb;
      m[b + "fc2." + wb] = p + fc2 + "." + wb;
    }
  }
  return m;
}

class TransferVit : public ::testing::TestWithParam<Spelling> {
 protected:
  test::TempDir dir_{"strata_transfer_vit_test"};
};

TEST_P(TransferVit, EveryParameterLoadsFromItsFileName) {
  const auto tensors = vit_tensors(GetParam());
  write_file(dir_.file("vit.safetensors"), tensors);
  EXPECT_EQ(detect_weights_format(names_of(tensors)),
            GetParam() == Spelling::kTimm ? WeightsFormat::kTimmVit : WeightsFormat::kTorchvisionVit);
  auto net = make_net(tiny_vit());
  const LoadReport r = load_pretrained(*net, dir_.file("vit.safetensors"), {});
  EXPECT_EQ(r.loaded.size(), net->params().size()) << r.str();
  EXPECT_TRUE(r.missing.empty()) << r.str();
  EXPECT_TRUE(r.unexpected.empty()) << r.str();
  std::map<std::string, const FileTensor*> by_name;
  for (const auto& t : tensors) by_name[t.name] = &t;
  const auto routes = expected_routes(GetParam());
  ASSERT_EQ(routes.size(), net->params().size());
  for (const auto& [strata_name, file_name] : routes) {
    ASSERT_TRUE(by_name.count(file_name)) << file_name;
    EXPECT_EQ(test::values(test::param_blob(*net, strata_name).data), by_name[file_name]->values) << strata_name;
  }
}

INSTANTIATE_TEST_SUITE_P(Spellings, TransferVit,
                         ::testing::Values(Spelling::kTorchvision, Spelling::kTorchvisionOld, Spelling::kTimm),
                         [](const ::testing::TestParamInfo<Spelling>& info) {
                           switch (info.param) {
                             case Spelling::kTorchvision: return std::string("Torchvision");
                             case Spelling::kTorchvisionOld: return std::string("TorchvisionLinear1");
                             case Spelling::kTimm: return std::string("Timm");
                           }
                           return std::string("?");
                         });

TEST(TransferVitNames, MapsSpellTheDocumentedNames) {
  using transfer::timm_vit_name;
  using transfer::torchvision_vit_name;
  EXPECT_EQ(torchvision_vit_name("encoder.layers.encoder_layer_11.mlp.3.bias"), "block11_fc2.bias");
  EXPECT_EQ(torchvision_vit_name("encoder.layers.encoder_layer_0.mlp.linear_1.weight"), "block0_fc1.weight");
  EXPECT_EQ(torchvision_vit_name("encoder.layers.encoder_layer_3.self_attention.out_proj.weight"),
            "block3_attn.out_proj_weight");
  EXPECT_EQ(torchvision_vit_name("heads.head.weight"), "head.weight");
  EXPECT_EQ(torchvision_vit_name("encoder.layers.encoder_layer_0.mlp.1.weight"), "");  // GELU has no weights
  EXPECT_EQ(timm_vit_name("blocks.7.attn.qkv.bias"), "block7_attn.in_proj_bias");
  EXPECT_EQ(timm_vit_name("cls_token"), "embed.class_token");
  EXPECT_EQ(timm_vit_name("fc_norm.weight"), "");
}

TEST(TransferDetect, TellsEachFormatFromItsNames) {
  EXPECT_EQ(detect_weights_format({"features.0.weight", "features.0.bias", "classifier.0.weight"}),
            WeightsFormat::kTorchvisionVgg);
  EXPECT_EQ(detect_weights_format({"conv_proj.weight", "class_token"}), WeightsFormat::kTorchvisionVit);
  EXPECT_EQ(detect_weights_format({"patch_embed.proj.weight", "cls_token", "pos_embed"}), WeightsFormat::kTimmVit);
  EXPECT_EQ(detect_weights_format({"conv1.weight", "fc8.bias"}), WeightsFormat::kStrata);
  EXPECT_CONTAINS(error_of<IoError>([] { detect_weights_format({"module.features.0.weight"}); }),
                  "convert_pth_to_safetensors.py");
  EXPECT_CONTAINS(error_of<IoError>([] { detect_weights_format({}); }), "no tensors");
  EXPECT_EQ(transfer::parse_weights_format("timm-vit", "--weights-format"), WeightsFormat::kTimmVit);
  const std::string msg = error_of<ConfigError>([] { transfer::parse_weights_format("timm", "--weights-format"); });
  EXPECT_CONTAINS(msg, "--weights-format");
  EXPECT_CONTAINS(msg, "torchvision-vit");
  EXPECT_STREQ(transfer::weights_format_name(WeightsFormat::kTorchvisionVgg), "torchvision-vgg");
}

TEST(TransferVitLoad, PositionEmbeddingOfAnotherGridIsInterpolatedAndReported) {
  test::TempDir dir("strata_transfer_vit_test");
  const auto tensors = vit_tensors(Spelling::kTimm, 3);  // trained on 12x12 images: a 3x3 grid
  write_file(dir.file("vit.safetensors"), tensors);
  auto net = make_net(tiny_vit(8));  // 8x8 images: a 2x2 grid
  const LoadReport r = load_pretrained(*net, dir.file("vit.safetensors"), {});
  EXPECT_TRUE(r.missing.empty()) << r.str();
  bool reported = false;
  for (const auto& l : r.loaded) {
    if (l.find("embed.pos_embedding (from pos_embed; interpolated bicubically from a 3x3 to a 2x2 patch grid, "
               "class token kept)") == 0) {
      reported = true;
    }
  }
  EXPECT_TRUE(reported) << r.str();
  Tensor file_pos({1, 10, kD});
  test::set_values(file_pos, tensors[3].values);
  const Tensor want = transfer::interpolate_position_embedding(file_pos, 1, {3, 3}, {2, 2});
  EXPECT_EQ(test::values(test::param_blob(*net, "embed.pos_embedding").data), test::values(want));
  // The class token's row is the file's, untouched.
  const auto got = test::values(test::param_blob(*net, "embed.pos_embedding").data);
  for (int c = 0; c < kD; ++c) EXPECT_EQ(got[c], tensors[3].values[c]);
}

TEST(TransferVitLoad, NewHeadNeedsReinit) {
  test::TempDir dir("strata_transfer_vit_test");
  auto tensors = vit_tensors(Spelling::kTorchvision);
  tensors[tensors.size() - 2] = {"heads.head.weight", {1000, kD}, std::vector<float>(1000 * kD, 0.5f)};
  tensors[tensors.size() - 1] = {"heads.head.bias", {1000}, std::vector<float>(1000, 0.5f)};
  write_file(dir.file("vit.safetensors"), tensors);
  auto net = make_net(tiny_vit());
  const std::string msg = error_of<ShapeError>([&] { load_pretrained(*net, dir.file("vit.safetensors"), {}); });
  EXPECT_CONTAINS(msg, "head.weight' (from heads.head.weight)");
  EXPECT_CONTAINS(msg, "--reinit head");
  transfer::PretrainedOptions o;
  o.reinit = {"head"};
  const LoadReport r = load_pretrained(*net, dir.file("vit.safetensors"), o);
  EXPECT_EQ(r.reinitialized.size(), 2u);
  EXPECT_EQ(r.loaded.size(), net->params().size() - 2);
}

}  // namespace
}  // namespace strata
