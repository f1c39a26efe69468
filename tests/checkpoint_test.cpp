// Weight files (save/load by name, reports, shape mismatches and --reinit,
// 16-bit files), solver snapshots (naming, atomic writes, restore errors) and
// the property that matters most: training 2N iterations equals training N,
// snapshotting, restoring into a fresh process-like Solver and training N more,
// bit for bit (memcmp) -- with Dropout masks, shuffled data, BatchNorm
// buffers, iter_size, clipping and every optimizer's history in play.
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/io/checkpoint.h"
#include "framework/io/crc32c.h"
#include "framework/config/config.h"
#include "framework/error.h"
#include "framework/io/file_util.h"
#include "framework/net.h"
#include "framework/io/npy.h"
#include "framework/io/safetensors.h"
#include "framework/solver/solver.h"
#include "framework/solver/solver_config.h"
#include "tests/test_util.h"
#include "tests/strategy_test_util.h"

namespace strata {
namespace {

using test::error_of;
using test::write_text;

// A temp folder named strata_checkpoint_test_*.
class TempDir : public test::TempDir {
 public:
  TempDir() : test::TempDir("strata_checkpoint_test") {}
};

// A small classification data set: 50 samples of 6 features, 3 classes.
void write_dataset(const TempDir& dir) {
  std::vector<float> x(50 * 6);
  std::vector<int32_t> y(50);
  for (int i = 0; i < 50; ++i) {
    y[i] = i % 3;
    for (int j = 0; j < 6; ++j) {
      x[i * 6 + j] = std::sin(0.37f * static_cast<float>(i * 6 + j)) + (j == y[i] ? 1.0f : 0.0f);
    }
  }
  write_npy(dir.file("x.npy"), DType::kF32, {50, 6}, x.data());
  write_npy(dir.file("y.npy"), DType::kI32, {50}, y.data());
}

// Batch 8 over 50 samples: batches straddle epochs, which reshuffle.
const char* kNet = R"(
name: "resume"
layer { name: "data" type: "ArrayData" top: "data" top: "label"
        array_data_param { source: "x.npy" label_source: "y.npy" batch_size: 8 shuffle: true }
        include { phase: TRAIN } }
layer { name: "data" type: "ArrayData" top: "data" top: "label"
        array_data_param { source: "x.npy" label_source: "y.npy" batch_size: 7 }
        include { phase: TEST } }
layer { name: "fc1" type: "InnerProduct" bottom: "data" top: "h"
        inner_product_param { num_output: 16 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "bn" type: "BatchNorm" bottom: "h" top: "hb" }
layer { name: "relu" type: "ReLU" bottom: "hb" top: "hb" }
layer { name: "drop" type: "Dropout" bottom: "hb" top: "hb" dropout_param { dropout_ratio: 0.3 } }
layer { name: "fc2" type: "InnerProduct" bottom: "hb" top: "score"
        inner_product_param { num_output: NUM_OUTPUT } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "score" bottom: "label" top: "loss" }
layer { name: "acc" type: "Accuracy" bottom: "score" bottom: "label" top: "accuracy" include { phase: TEST } }
)";

std::string net_text(int num_output = 3) {
  std::string s = kNet;
  const std::string key = "NUM_OUTPUT";
  s.replace(s.find(key), key.size(), std::to_string(num_output));
  return s;
}

std::unique_ptr<Net> make_net(const TempDir& dir, const std::string& text, uint64_t seed = 1) {
  NetOptions o;
  o.base_dir = dir.file("");
  o.seed = seed;
  return std::make_unique<Net>(parse_config_text(text, dir.file("net.prototxt")), o);
}

std::vector<float> values(const Blob& b) {
  const float* d = b.data.data<float>();
  return std::vector<float>(d, d + b.numel());
}

// ---------------------------------------------------------------------------
// Weights

TEST(WeightsTest, RoundTripIncludingBuffersAndMetadata) {
  TempDir dir;
  write_dataset(dir);
  auto a = make_net(dir, net_text(), 1);
  auto b = make_net(dir, net_text(), 2);  // another seed: other initial weights
  // Give the BatchNorm buffers non-default values to see them travel.
  Blob& mean = *a->params()[a->param_index("bn.running_mean")].blob;
  for (int i = 0; i < 16; ++i) mean.data.data<float>()[i] = 0.5f * static_cast<float>(i);
  save_weights(*a, dir.file("w.safetensors"), {{"note", "hello"}});
  EXPECT_EQ(dir.list(), (std::vector<std::string>{"w.safetensors", "x.npy", "y.npy"}));  // no temp file left

  SafetensorsReader r(dir.file("w.safetensors"));
  EXPECT_EQ(r.metadata().at("note"), "hello");
  EXPECT_NE(r.find("bn.running_var"), nullptr);
  EXPECT_EQ(r.tensors().size(), a->params().size());

  ASSERT_NE(values(*a->params()[0].blob), values(*b->params()[0].blob));
  const LoadReport report = load_weights(*b, dir.file("w.safetensors"));
  EXPECT_EQ(report.loaded.size(), a->params().size());
  EXPECT_TRUE(report.missing.empty());
  EXPECT_TRUE(report.unexpected.empty());
  EXPECT_EQ(report.metadata.at("note"), "hello");
  for (size_t i = 0; i < a->params().size(); ++i) {
    EXPECT_EQ(a->params()[i].name, b->params()[i].name);
    EXPECT_EQ(values(*a->params()[i].blob), values(*b->params()[i].blob)) << a->params()[i].name;
  }
  EXPECT_CONTAINS(report.str(), "loaded " + std::to_string(a->params().size()) + " parameters");
}

// Flips one bit of the byte `from_end` bytes before the end of `path`.
void flip_bit(const std::string& path, long from_end) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << path;
  f.seekg(-from_end, std::ios::end);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(-from_end, std::ios::end);
  f.write(&c, 1);
}

// A snapshot's tensors carry CRC-32C checksums: a bit flipped after writing
// is an error naming the tensor, for weights and solver state alike; files
// without checksums (other writers, earlier snapshots) load as before.
TEST(WeightsTest, AFlippedBitIsCaughtByTheChecksum) {
  TempDir dir;
  write_dataset(dir);
  auto a = make_net(dir, net_text(), 1);
  save_weights(*a, dir.file("w.safetensors"), {});
  SafetensorsReader r(dir.file("w.safetensors"));
  const std::string last = r.tensors().back().name;
  EXPECT_EQ(r.metadata().count("crc32c." + last), 1u);
  flip_bit(dir.file("w.safetensors"), 2);  // inside the last tensor
  const std::string msg = test::error_of<IoError>([&] { load_weights(*a, dir.file("w.safetensors")); });
  EXPECT_CONTAINS(msg, "tensor '" + last + "' does not match its checksum");
  EXPECT_CONTAINS(msg, "damaged after it was written");

  SolverState s;
  s.solver_type = "SGD";
  s.config_fingerprint = "f";
  s.weights_file = "w.safetensors";
  Tensor t({4});
  for (int i = 0; i < 4; ++i) t.data<float>()[i] = 1.0f + static_cast<float>(i);
  s.history.emplace_back("fc.weight.momentum", t);
  save_solver_state(dir.file("s.solverstate.safetensors"), s);
  EXPECT_NO_THROW(load_solver_state(dir.file("s.solverstate.safetensors")));
  flip_bit(dir.file("s.solverstate.safetensors"), 5);
  EXPECT_CONTAINS(test::error_of<IoError>([&] { load_solver_state(dir.file("s.solverstate.safetensors")); }),
                  "tensor 'fc.weight.momentum' does not match its checksum");

  // Without checksums (written by another program): loads.
  auto b = make_net(dir, net_text(), 2);
  std::vector<TensorToWrite> plain;
  for (const NetParam& p : b->params()) plain.push_back({p.name, DType::kF32, p.blob->shape(), p.blob->data.raw_data()});
  write_safetensors(dir.file("plain.safetensors"), plain, {});
  EXPECT_NO_THROW(load_weights(*a, dir.file("plain.safetensors")));
}

TEST(Crc32c, KnownValueAndTheHardwarePathAgreeWithTheTable) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c_portable("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c_hex(0xE3069283u), "e3069283");
  std::vector<uint8_t> bytes(1000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 131 + 7);
  for (size_t n : {0, 1, 7, 8, 9, 63, 1000}) {
    EXPECT_EQ(crc32c(bytes.data(), n), crc32c_portable(bytes.data(), n)) << n << " bytes";
  }
  // In pieces, continued.
  EXPECT_EQ(crc32c(bytes.data() + 13, 987, crc32c(bytes.data(), 13)), crc32c(bytes.data(), 1000));
}

TEST(WeightsTest, ShapeMismatchNamesParameterAndReinit) {
  TempDir dir;
  write_dataset(dir);
  auto a = make_net(dir, net_text(3));
  save_weights(*a, dir.file("w.safetensors"));
  auto b = make_net(dir, net_text(5));
  const std::string e = error_of<ShapeError>([&] { load_weights(*b, dir.file("w.safetensors")); });
  EXPECT_CONTAINS(e, "parameter 'fc2.weight': checkpoint has [3, 16], net has [5, 16]; to train this layer from "
                     "scratch, rename the layer or pass --reinit fc2");
  EXPECT_CONTAINS(e, "parameter 'fc2.bias': checkpoint has [3], net has [5]");

  LoadOptions o;
  o.reinit = {"fc2"};
  const std::vector<float> fc2_before = values(*b->params()[b->param_index("fc2.weight")].blob);
  const LoadReport r = load_weights(*b, dir.file("w.safetensors"), o);
  EXPECT_EQ(r.reinitialized, (std::vector<std::string>{"fc2.weight", "fc2.bias"}));
  EXPECT_EQ(r.mismatched, (std::vector<std::string>{"fc2.weight", "fc2.bias"}));
  EXPECT_EQ(values(*b->params()[b->param_index("fc2.weight")].blob), fc2_before);
  EXPECT_EQ(values(*b->params()[b->param_index("fc1.weight")].blob),
            values(*a->params()[a->param_index("fc1.weight")].blob));
  EXPECT_CONTAINS(r.str(), "re-initialised");

  o.reinit = {"fc9"};
  const std::string e2 = error_of<ConfigError>([&] { load_weights(*b, dir.file("w.safetensors"), o); });
  EXPECT_CONTAINS(e2, "fc9");
}

TEST(WeightsTest, WeightsOfAnotherArchitectureAreNamedAsSuch) {
  // Most of the net is not in the file and what is has other shapes (VGG's
  // weights into a ViT): the error says so instead of advising --reinit.
  TempDir dir;
  write_dataset(dir);
  auto a = make_net(dir, net_text(3));
  save_weights(*a, dir.file("w.safetensors"));
  const std::string other = R"(
name: "other"
layer { name: "data" type: "ArrayData" top: "data" top: "label"
        array_data_param { source: "x.npy" label_source: "y.npy" batch_size: 8 } }
layer { name: "fc1" type: "InnerProduct" bottom: "data" top: "h1" inner_product_param { num_output: 32 } }
layer { name: "b1" type: "InnerProduct" bottom: "h1" top: "h2" inner_product_param { num_output: 16 } }
layer { name: "b2" type: "InnerProduct" bottom: "h2" top: "h3" inner_product_param { num_output: 16 } }
layer { name: "b3" type: "InnerProduct" bottom: "h3" top: "h4" inner_product_param { num_output: 8 } }
layer { name: "b4" type: "InnerProduct" bottom: "h4" top: "score" inner_product_param { num_output: 3 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "score" bottom: "label" top: "loss" }
)";
  auto b = make_net(dir, other);
  const std::string e = error_of<ShapeError>([&] { load_weights(*b, dir.file("w.safetensors")); });
  EXPECT_CONTAINS(e, "these weights are not for net 'other' (another architecture, or a wrong --weights-format): "
                     "of its 10 parameters 0 are in the file with their shapes, 2 with other shapes and 8 not at "
                     "all");
  EXPECT_CONTAINS(e, "Load weights made for this model.");
  EXPECT_CONTAINS(e, "parameter 'fc1.weight': checkpoint has [16, 6], net has [32, 6]");
  EXPECT_EQ(e.find("--reinit"), std::string::npos) << e;
}

TEST(WeightsTest, MissingAndUnexpectedAreReportedOrRefused) {
  TempDir dir;
  write_dataset(dir);
  auto a = make_net(dir, net_text());
  save_weights(*a, dir.file("w.safetensors"));
  // A net with another layer name for the head, and one layer more.
  std::string text = net_text();
  text.replace(text.find("name: \"fc2\""), 11, "name: \"head\"");
  text.replace(text.find("bottom: \"hb\" top: \"score\""), 25, "bottom: \"hb\" top: \"pre\"");
  text.insert(text.find("layer { name: \"loss\""), R"(layer { name: "extra" type: "InnerProduct" bottom: "pre" top: "score"
                   inner_product_param { num_output: 3 } }
)");
  auto b = make_net(dir, text);
  const LoadReport r = load_weights(*b, dir.file("w.safetensors"));
  EXPECT_EQ(r.missing, (std::vector<std::string>{"head.weight", "head.bias", "extra.weight", "extra.bias"}));
  EXPECT_EQ(r.unexpected, (std::vector<std::string>{"fc2.weight", "fc2.bias"}));
  EXPECT_CONTAINS(r.str(), "missing from the file");
  EXPECT_CONTAINS(r.str(), "head.weight");
  EXPECT_CONTAINS(r.str(), "not in the net");

  LoadOptions strict;
  strict.missing = MissingParams::kError;
  EXPECT_CONTAINS(error_of<IoError>([&] { load_weights(*b, dir.file("w.safetensors"), strict); }), "head.weight");
  LoadOptions no_extra;
  no_extra.unexpected = UnexpectedParams::kError;
  EXPECT_CONTAINS(error_of<IoError>([&] { load_weights(*b, dir.file("w.safetensors"), no_extra); }), "fc2.weight");
  EXPECT_THROW(load_weights(*b, dir.file("absent.safetensors")), IoError);
}

TEST(WeightsTest, HalfPrecisionFilesAreConverted) {
  TempDir dir;
  write_dataset(dir);
  auto net = make_net(dir, net_text());
  for (DType dt : {DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dt));
    std::vector<std::vector<uint16_t>> storage;
    std::vector<TensorToWrite> tensors;
    for (const NetParam& p : net->params()) {
      std::vector<uint16_t> bits(static_cast<size_t>(p.blob->numel()));
      for (int64_t i = 0; i < p.blob->numel(); ++i) {
        const float v = 0.25f * static_cast<float>(i % 7) - 0.5f;  // exact in both formats
        bits[i] = dt == DType::kF16 ? float_to_f16(v) : float_to_bf16(v);
      }
      storage.push_back(std::move(bits));
      tensors.push_back(TensorToWrite{p.name, dt, p.blob->shape(), storage.back().data()});
    }
    write_safetensors(dir.file("h.safetensors"), tensors, {});
    const LoadReport r = load_weights(*net, dir.file("h.safetensors"));
    EXPECT_EQ(r.loaded.size(), net->params().size());
    const Blob& w = *net->params()[0].blob;
    for (int64_t i = 0; i < w.numel(); ++i) ASSERT_EQ(w.data.data<float>()[i], 0.25f * (i % 7) - 0.5f);
  }
  // Integer tensors are not weights.
  std::vector<int32_t> ints(16 * 6, 1);
  write_safetensors(dir.file("i.safetensors"), {TensorToWrite{"fc1.weight", DType::kI32, {16, 6}, ints.data()}}, {});
  EXPECT_CONTAINS(error_of<IoError>([&] { load_weights(*net, dir.file("i.safetensors")); }), "fc1.weight");
}

// ---------------------------------------------------------------------------
// Snapshots

TEST(SnapshotTest, Naming) {
  const SnapshotPaths p = snapshot_paths("out/lenet", 500);
  EXPECT_EQ(p.weights, "out/lenet_iter_500.safetensors");
  EXPECT_EQ(p.state, "out/lenet_iter_500.solverstate.safetensors");
  EXPECT_EQ(weights_path_for_state(p.state), p.weights);
  EXPECT_CONTAINS(error_of<IoError>([] { weights_path_for_state("out/lenet_iter_500.safetensors"); }),
                  ".solverstate.safetensors");
}

TEST(SnapshotTest, SolverStateRoundTrip) {
  TempDir dir;
  SolverState s;
  s.iter = 1234;
  s.solver_type = "Adam";
  s.optimizer_steps = 1230;
  Tensor t({2, 3});
  for (int i = 0; i < 6; ++i) t.data<float>()[i] = 0.5f * i;
  s.history.emplace_back("fc.weight.exp_avg", t);
  s.layer_states = {{"drop", "mt19937_64 0 0 1 2 3"}, {"weird", std::string("\xff\x00\x01", 3)}};
  s.test_layer_states = {{"data", "cursor 3\nline two"}};
  s.loss_window = {0.1f, 2.5f, -0.0f};
  s.config_fingerprint = "0123456789abcdef";
  s.weights_file = "x_iter_1234.safetensors";
  save_solver_state(dir.file("s.solverstate.safetensors"), s);
  const SolverState r = load_solver_state(dir.file("s.solverstate.safetensors"));
  EXPECT_EQ(r.iter, 1234);
  EXPECT_EQ(r.solver_type, "Adam");
  EXPECT_EQ(r.optimizer_steps, 1230);
  ASSERT_EQ(r.history.size(), 1u);
  EXPECT_EQ(r.history[0].first, "fc.weight.exp_avg");
  EXPECT_EQ(r.history[0].second.shape(), (Shape{2, 3}));
  EXPECT_EQ(std::memcmp(r.history[0].second.raw_data(), t.raw_data(), 24), 0);
  EXPECT_EQ(r.layer_states, s.layer_states);
  EXPECT_EQ(r.test_layer_states, s.test_layer_states);
  ASSERT_EQ(r.loss_window.size(), 3u);
  EXPECT_EQ(std::memcmp(r.loss_window.data(), s.loss_window.data(), 12), 0);
  EXPECT_EQ(r.config_fingerprint, s.config_fingerprint);
  EXPECT_EQ(r.weights_file, s.weights_file);

  // Plain weights are not a solver state.
  save_weights(*std::make_unique<Net>(parse_config_text(R"(
      layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 dim: 2 } } }
      layer { name: "fc" type: "InnerProduct" bottom: "x" top: "y" inner_product_param { num_output: 2 } })",
                                                        "n"),
                                      NetOptions{}),
               dir.file("w.safetensors"));
  EXPECT_CONTAINS(error_of<IoError>([&] { load_solver_state(dir.file("w.safetensors")); }),
                  "not a strata solver state");
}

std::string solver_text(const std::string& type, const std::string& extra) {
  // Caffe's AdaGrad and RMSProp take no momentum; RMSProp has its rms_decay instead.
  const std::string momentum = type == "AdaGrad" ? "" : type == "RMSProp" ? "rms_decay: 0.9\n" : "momentum: 0.9\n";
  return "net: \"net.prototxt\"\nbase_lr: 0.05\ntype: \"" + type + "\"\n" + momentum +
         "weight_decay: 0.001\nlr_policy: \"step\" gamma: 0.7 stepsize: 5\n"
         "iter_size: 2\nclip_gradients: 5\naverage_loss: 3\ntest_interval: 4\ntest_iter: 3\n"
         "display: 0\nsnapshot_prefix: \"snap/run\"\n" +
         extra;
}

std::vector<std::vector<uint8_t>> param_bytes(Net& net) {
  std::vector<std::vector<uint8_t>> out;
  for (const NetParam& p : net.params()) {
    const uint8_t* d = static_cast<const uint8_t*>(p.blob->data.raw_data());
    out.emplace_back(d, d + p.blob->data.nbytes());
  }
  return out;
}

std::vector<std::vector<uint8_t>> history_bytes(Solver& s) {
  std::vector<std::vector<uint8_t>> out;
  for (const auto& kv : s.optimizer().state_tensors()) {
    const uint8_t* d = static_cast<const uint8_t*>(kv.second.raw_data());
    out.emplace_back(d, d + kv.second.nbytes());
  }
  return out;
}

class ResumeTest : public ::testing::TestWithParam<const char*> {};

// 2N iterations straight == N iterations, interrupt (as SIGINT would),
// snapshot, a fresh Solver restoring it, N more iterations.
TEST_P(ResumeTest, BitForBit) {
  const std::string type = GetParam();
  constexpr int kN = 9;
  TempDir dir;
  write_dataset(dir);
  write_text(dir.file("net.prototxt"), net_text());
  ASSERT_EQ(std::system(("mkdir -p '" + dir.file("snap") + "'").c_str()), 0);
  write_text(dir.file("solver.prototxt"),
             solver_text(type, "max_iter: " + std::to_string(2 * kN) + "\nsnapshot_after_train: false\n"));
  const SolverConfig config = load_solver_config(dir.file("solver.prototxt"));

  Solver straight(config);
  ASSERT_NE(straight.test_net(), nullptr);
  EXPECT_EQ(straight.solve().status, SolveStatus::kCompleted);
  ASSERT_EQ(straight.iter(), 2 * kN);

  std::string state;
  {
    Solver first(config);
    std::atomic<bool> stop{false};
    first.set_stop_flag(&stop);
    test::BeforeUpdate before_update_hook(first, [&](Net&) {
      if (first.iter() == kN - 1) stop = true;
    });
    const SolveResult r = first.solve();
    EXPECT_EQ(r.status, SolveStatus::kInterrupted);
    EXPECT_EQ(r.iter, kN);
    state = r.last_snapshot;
    EXPECT_EQ(state, dir.file("snap/run_iter_9.solverstate.safetensors"));
  }
  // Only the two finished files: no temp files.
  EXPECT_EQ(std::system(("test $(ls '" + dir.file("snap") + "' | wc -l) -eq 2").c_str()), 0);

  Solver second(config);
  const ResumeInfo info = second.restore(state);
  EXPECT_EQ(info.iter, kN);
  EXPECT_EQ(info.weights_path, dir.file("snap/run_iter_9.safetensors"));
  EXPECT_FALSE(info.config_changed);
  EXPECT_EQ(second.iter(), kN);
  EXPECT_EQ(second.solve().status, SolveStatus::kCompleted);
  ASSERT_EQ(second.iter(), 2 * kN);

  const auto a = param_bytes(straight.net()), b = param_bytes(second.net());
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(a[i] == b[i]) << "parameter " << straight.net().params()[i].name << " differs";
  }
  EXPECT_TRUE(history_bytes(straight) == history_bytes(second));
  EXPECT_EQ(straight.optimizer().steps(), second.optimizer().steps());
  EXPECT_EQ(straight.smoothed_loss(), second.smoothed_loss());
  EXPECT_EQ(straight.net().save_layer_states(), second.net().save_layer_states());
  EXPECT_EQ(straight.test_net()->save_layer_states(), second.test_net()->save_layer_states());
}

INSTANTIATE_TEST_SUITE_P(Types, ResumeTest,
                         ::testing::Values("SGD", "Nesterov", "Adam", "AdamW", "AdaGrad", "AdaDelta", "RMSProp"));

// A run that finished at N, resumed with a larger max_iter (fixed-shape
// schedule), equals a run of 2N.
TEST(ResumeExtendTest, LongerMaxIterContinuesExactly) {
  TempDir dir;
  write_dataset(dir);
  write_text(dir.file("net.prototxt"), net_text());
  ASSERT_EQ(std::system(("mkdir -p '" + dir.file("snap") + "'").c_str()), 0);
  write_text(dir.file("short.prototxt"), solver_text("Adam", "max_iter: 6\n"));
  write_text(dir.file("long.prototxt"), solver_text("Adam", "max_iter: 12\nsnapshot_after_train: false\n"));
  Solver straight(load_solver_config(dir.file("long.prototxt")));
  straight.solve();
  Solver first(load_solver_config(dir.file("short.prototxt")));
  const std::string state = first.solve().last_snapshot;
  Solver second(load_solver_config(dir.file("long.prototxt")));
  EXPECT_FALSE(second.restore(state).config_changed);
  second.solve();
  EXPECT_TRUE(param_bytes(straight.net()) == param_bytes(second.net()));
}

TEST(RestoreErrorsTest, ClearMessages) {
  TempDir dir;
  write_dataset(dir);
  write_text(dir.file("net.prototxt"), net_text());
  ASSERT_EQ(std::system(("mkdir -p '" + dir.file("snap") + "'").c_str()), 0);
  write_text(dir.file("sgd.prototxt"), solver_text("SGD", "max_iter: 2\n"));
  Solver sgd(load_solver_config(dir.file("sgd.prototxt")));
  const std::string state = sgd.solve().last_snapshot;
  ASSERT_TRUE(file_exists(state));

  // Another solver type.
  write_text(dir.file("adam.prototxt"), solver_text("Adam", "max_iter: 2\n"));
  Solver adam(load_solver_config(dir.file("adam.prototxt")));
  std::string e = error_of<ConfigError>([&] { adam.restore(state); });
  EXPECT_CONTAINS(e, "written by the SGD solver");
  EXPECT_CONTAINS(e, "Adam");
  EXPECT_EQ(adam.iter(), 0);

  // Changed settings are reported, not refused.
  std::string changed = solver_text("SGD", "max_iter: 2\n");
  changed.replace(changed.find("base_lr: 0.05"), 13, "base_lr: 0.5");
  write_text(dir.file("sgd2.prototxt"), changed);
  Solver sgd2(load_solver_config(dir.file("sgd2.prototxt")));
  EXPECT_TRUE(sgd2.restore(state).config_changed);

  // A frozen layer has no history: the snapshot's history does not fit.
  std::string frozen = net_text();
  const std::string from = "bottom: \"data\" top: \"h\"";
  frozen.replace(frozen.find(from), from.size(), from + " param { lr_mult: 0 } param { lr_mult: 0 }");
  write_text(dir.file("net.prototxt"), frozen);
  Solver sgd_frozen(load_solver_config(dir.file("sgd.prototxt")));
  e = error_of<ConfigError>([&] { sgd_frozen.restore(state); });
  EXPECT_CONTAINS(e, "fc1.weight.momentum");
  EXPECT_CONTAINS(e, "not learnable");

  // Another head size: shapes differ.
  write_text(dir.file("net.prototxt"), net_text(4));
  Solver wide(load_solver_config(dir.file("sgd.prototxt")));
  e = error_of<ShapeError>([&] { wide.restore(state); });
  EXPECT_CONTAINS(e, "fc2.weight.momentum");

  // The weights file must lie beside the state file.
  write_text(dir.file("net.prototxt"), net_text());
  Solver again(load_solver_config(dir.file("sgd.prototxt")));
  std::remove(weights_path_for_state(state).c_str());
  e = error_of<IoError>([&] { again.restore(state); });
  EXPECT_CONTAINS(e, "does not exist");
  EXPECT_THROW(again.restore(dir.file("snap/none.solverstate.safetensors")), IoError);
}

}  // namespace
}  // namespace strata
