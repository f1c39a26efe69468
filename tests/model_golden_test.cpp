// Whole models against torchvision: small VGGs (with and without BatchNorm)
// and a tiny ViT with random weights, saved by tests/golden/make_model_golden.py
// under torchvision's (and timm's, and the older mlp.linear_1/2) names. Each
// net is built from its prototxt (written by the same code that writes the
// model zoo in models/), loaded through transfer::load_pretrained's name maps,
// run forward, and compared with torchvision's logits and embeddings:
//   |got - want| <= 1e-4 * max|want|   for every element
// (float32 through a dozen layers; measured errors are ~1e-6 of the scale).
// The zoo's own prototxts are checked for structure here too; building
// them with full-size weights is tools/check_full_models.py's job (not CI).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/net.h"
#include "framework/config/net_spec.h"
#include "framework/io/npy.h"
#include "framework/io/json.h"
#include "framework/solver/solver_config.h"
#include "transfer/pretrained.h"
#include "tests/test_util.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

const std::string kGolden = std::string(STRATA_SOURCE_DIR) + "/tests/golden/models/";
constexpr float kRelTolerance = 1e-4f;

struct ModelCase {
  std::string label;      // test name suffix
  std::string net;        // tests/golden/models/<net>.prototxt and <net>_*.npy
  std::string weights;    // file in tests/golden/models/
  transfer::WeightsFormat format;
  transfer::WeightsFormat expect_detected;  // what kAuto must pick for this file
  std::string logits_blob;
  std::string embedding_blob;
};

std::string case_name(const testing::TestParamInfo<ModelCase>& info) { return info.param.label; }

// Copies an .npy array into an f32 tensor-shaped vector, checking the shape.
std::vector<float> npy_values(const std::string& path, const Shape& expect_shape) {
  const NpyArray a = read_npy(path);
  EXPECT_EQ(a.shape, expect_shape) << path;
  return std::vector<float>(a.as<float>(), a.as<float>() + a.numel());
}

// Largest |got - want| over the largest |want|.
float relative_error(const Blob& got, const std::vector<float>& want) {
  EXPECT_EQ(got.numel(), static_cast<int64_t>(want.size()));
  float scale = 0.0f, worst = 0.0f;
  const float* g = got.data.data<float>();
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::fabs(want[i]));
    worst = std::max(worst, std::fabs(g[i] - want[i]));
  }
  EXPECT_GT(scale, 0.0f) << "golden values are all zero: regenerate them";
  return worst / scale;
}

class ModelGolden : public testing::TestWithParam<ModelCase> {};

TEST_P(ModelGolden, MatchesTorchvision) {
  const ModelCase& c = GetParam();
  NetOptions options;
  options.phase = Phase::kTest;
  std::unique_ptr<Net> net = Net::from_file(kGolden + c.net + ".prototxt", options);

  transfer::PretrainedOptions load;
  load.format = c.format;
  const LoadReport report = transfer::load_pretrained(*net, kGolden + c.weights, load);
  SCOPED_TRACE(report.str());
  // Every parameter and running statistic of the net comes from the file,
  // and nothing in the file is left over (num_batches_tracked is dropped).
  EXPECT_TRUE(report.missing.empty());
  EXPECT_TRUE(report.unexpected.empty());
  EXPECT_TRUE(report.mismatched.empty());
  EXPECT_EQ(report.loaded.size(), net->params().size());

  const NpyArray input = read_npy(kGolden + "input.npy");
  Blob& data = net->blob("data");
  ASSERT_EQ(data.shape(), Shape(input.shape));
  std::copy(input.as<float>(), input.as<float>() + input.numel(), data.data.data<float>());
  net->forward();

  const Blob& logits = net->blob(c.logits_blob);
  const Blob& embedding = net->blob(c.embedding_blob);
  const std::vector<float> want_logits = npy_values(kGolden + c.net + "_logits.npy", logits.shape());
  const std::vector<float> want_embedding = npy_values(kGolden + c.net + "_embedding.npy", embedding.shape());
  EXPECT_LE(relative_error(logits, want_logits), kRelTolerance) << c.logits_blob;
  EXPECT_LE(relative_error(embedding, want_embedding), kRelTolerance) << c.embedding_blob;
}

TEST_P(ModelGolden, FormatIsDetectedFromTheNames) {
  const ModelCase& c = GetParam();
  // The names from the header directly: torchvision files hold I64 tensors
  // (num_batches_tracked) that SafetensorsReader does not open.
  std::ifstream in(kGolden + c.weights, std::ios::binary);
  uint64_t header_bytes = 0;
  in.read(reinterpret_cast<char*>(&header_bytes), 8);  // little-endian, as this test's hosts
  std::string header(header_bytes, ' ');
  in.read(header.data(), static_cast<std::streamsize>(header_bytes));
  ASSERT_TRUE(in.good());
  std::vector<std::string> names;
  const JsonValue json = parse_json(header);
  for (const auto& member : json.as_object()) {
    if (member.first != "__metadata__") names.push_back(member.first);
  }
  EXPECT_EQ(transfer::detect_weights_format(names), c.expect_detected)
      << "detected " << transfer::weights_format_name(transfer::detect_weights_format(names)) << " from "
      << names.size() << " names, the first '" << (names.empty() ? "" : names.front()) << "'";
}

using transfer::WeightsFormat;

INSTANTIATE_TEST_SUITE_P(
    Golden, ModelGolden,
    testing::Values(
        ModelCase{"VggAuto", "vgg_narrow", "vgg_narrow.safetensors", WeightsFormat::kAuto,
                  WeightsFormat::kTorchvisionVgg, "fc8", "fc7"},
        ModelCase{"VggForced", "vgg_narrow", "vgg_narrow.safetensors", WeightsFormat::kTorchvisionVgg,
                  WeightsFormat::kTorchvisionVgg, "fc8", "fc7"},
        ModelCase{"VggBnAuto", "vgg_narrow_bn", "vgg_narrow_bn.safetensors", WeightsFormat::kAuto,
                  WeightsFormat::kTorchvisionVgg, "fc8", "fc7"},
        ModelCase{"VggBnForced", "vgg_narrow_bn", "vgg_narrow_bn.safetensors", WeightsFormat::kTorchvisionVgg,
                  WeightsFormat::kTorchvisionVgg, "fc8", "fc7"},
        ModelCase{"VitTorchvisionAuto", "vit_tiny", "vit_tiny.safetensors", WeightsFormat::kAuto,
                  WeightsFormat::kTorchvisionVit, "head", "pre_logits"},
        ModelCase{"VitTorchvisionForced", "vit_tiny", "vit_tiny.safetensors", WeightsFormat::kTorchvisionVit,
                  WeightsFormat::kTorchvisionVit, "head", "pre_logits"},
        ModelCase{"VitLinear12Auto", "vit_tiny", "vit_tiny_linear12.safetensors", WeightsFormat::kAuto,
                  WeightsFormat::kTorchvisionVit, "head", "pre_logits"},
        ModelCase{"VitLinear12Forced", "vit_tiny", "vit_tiny_linear12.safetensors",
                  WeightsFormat::kTorchvisionVit, WeightsFormat::kTorchvisionVit, "head", "pre_logits"},
        ModelCase{"VitTimmAuto", "vit_tiny", "vit_tiny_timm.safetensors", WeightsFormat::kAuto,
                  WeightsFormat::kTimmVit, "head", "pre_logits"},
        ModelCase{"VitTimmForced", "vit_tiny", "vit_tiny_timm.safetensors", WeightsFormat::kTimmVit,
                  WeightsFormat::kTimmVit, "head", "pre_logits"}),
    case_name);

// Our own names round-trip: load torchvision's file, save with strata's
// names, load that into a fresh net (format auto-detected as strata): same logits.
TEST(ModelGoldenStrataNames, SavedWeightsReloadAsStrataFormat) {
  NetOptions options;
  options.phase = Phase::kTest;
  std::unique_ptr<Net> a = Net::from_file(kGolden + "vgg_narrow_bn.prototxt", options);
  transfer::load_pretrained(*a, kGolden + "vgg_narrow_bn.safetensors", {});
  const test::TempDir tmp("strata_model_golden");
  const std::string path = tmp.file("vgg.safetensors");
  save_weights(*a, path);
  std::unique_ptr<Net> b = Net::from_file(kGolden + "vgg_narrow_bn.prototxt", options);
  const LoadReport report = transfer::load_pretrained(*b, path, {});
  EXPECT_TRUE(report.missing.empty()) << report.str();

  const NpyArray input = read_npy(kGolden + "input.npy");
  for (Net* net : {a.get(), b.get()}) {
    std::copy(input.as<float>(), input.as<float>() + input.numel(), net->blob("data").data.data<float>());
    net->forward();
  }
  const Blob& la = a->blob("fc8");
  const Blob& lb = b->blob("fc8");
  ASSERT_EQ(la.shape(), lb.shape());
  for (int64_t i = 0; i < la.numel(); ++i) EXPECT_EQ(la.data.data<float>()[i], lb.data.data<float>()[i]);
}

// ---- the model zoo's files (models/<name>/): cheap structural checks ----

const std::vector<std::string>& zoo() {
  static const std::vector<std::string> names = {"vgg11", "vgg16", "vgg19", "vgg16_bn",
                                                 "vit_b16", "vit_s16", "vit_ti16"};
  return names;
}

std::string zoo_dir(const std::string& name) { return std::string(STRATA_SOURCE_DIR) + "/models/" + name + "/"; }

bool has_layer(const std::vector<LayerSpec>& specs, const std::string& name, const std::string& type) {
  return std::any_of(specs.begin(), specs.end(),
                     [&](const LayerSpec& s) { return s.name == name && s.type == type; });
}

TEST(ModelZoo, DeployNetsParseWithTheNamesTheMapsExpect) {
  for (const std::string& name : zoo()) {
    SCOPED_TRACE(name);
    const ConfigNode root = parse_config_file(zoo_dir(name) + "deploy.prototxt");
    const std::vector<LayerSpec> specs = net_layer_specs(root, Phase::kTest);
    ASSERT_FALSE(specs.empty());
    EXPECT_EQ(specs.front().type, "Input");
    EXPECT_EQ(specs.front().tops, std::vector<std::string>{"data"});
    const bool vit = name.rfind("vit", 0) == 0;
    if (vit) {
      EXPECT_TRUE(has_layer(specs, "patch_embed", "PatchEmbed"));
      EXPECT_TRUE(has_layer(specs, "block11_attn", "MultiHeadAttention"));
      EXPECT_TRUE(has_layer(specs, "pre_logits", "TokenPool"));
      EXPECT_EQ(specs.back().name, "head");
    } else {
      EXPECT_TRUE(has_layer(specs, "conv1_1", "Convolution"));
      EXPECT_TRUE(has_layer(specs, "avgpool", "AdaptivePooling"));
      EXPECT_EQ(has_layer(specs, "bn1_1", "BatchNorm"), name == "vgg16_bn");
      EXPECT_EQ(specs.back().name, "fc8");
    }
  }
}

TEST(ModelZoo, FinetuneNetsAndSolversParse) {
  for (const std::string& name : zoo()) {
    SCOPED_TRACE(name);
    const ConfigNode root = parse_config_file(zoo_dir(name) + "finetune.prototxt");
    for (Phase phase : {Phase::kTrain, Phase::kTest}) {
      const std::vector<LayerSpec> specs = net_layer_specs(root, phase);
      ASSERT_FALSE(specs.empty());
      EXPECT_EQ(specs.front().type, "ImageData");
    }
    const SolverConfig solver = load_solver_config(zoo_dir(name) + "finetune_solver.prototxt");
    EXPECT_TRUE(fs::equivalent(solver.net, zoo_dir(name) + "finetune.prototxt")) << solver.net;
    EXPECT_TRUE(fs::exists(zoo_dir(name) + "README.md"));
  }
}

}  // namespace
}  // namespace strata
