// Data layers (ArrayData, MnistData, Cifar10Data) and their shared DataSource:
// batches, labels, shuffling, epochs, sharding, transforms, resume state, and
// the bundled digits. File, state and config errors are in
// data_layers_errors_test.cpp. The input files are written here into a temp
// folder.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/net.h"
#include "framework/io/npy.h"
#include "layers/array_data.h"
#include "layers/cifar10_data.h"
#include "framework/data/data_source.h"
#include "layers/mnist_data.h"
#include "tests/data_layers_test_util.h"

#ifndef STRATA_SOURCE_DIR
#error "the build must define STRATA_SOURCE_DIR (the repository root)"
#endif

namespace strata {
namespace {

using data_layers_test::DataLayersTest;
using data_layers_test::error_of;
using data_layers_test::Options;
using data_layers_test::Runner;

// ---- ArrayData: batches, order, epochs ----------------------------------------

TEST_F(DataLayersTest, ArrayDataTestPhaseReadsInOrderAndWrapsAround) {
  write_indexed_array(10);
  Options o;
  o.phase = Phase::kTest;  // TEST: no shuffle by default
  Runner r("ArrayData", array_body(4), dir_, o);
  const Blob& data = r.step();
  EXPECT_EQ(data.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(r.tops()[1]->shape(), (Shape{4}));
  for (int b = 0; b < 4; ++b) {
    for (int k = 0; k < 6; ++k) EXPECT_EQ(r.data()[static_cast<size_t>(b * 6 + k)], 100.0f * b + k);
  }
  EXPECT_EQ(r.labels(), (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(r.next_ids(), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(r.source().epoch(), 0);
  // Batches stay full: the third straddles the end of the epoch.
  EXPECT_EQ(r.next_ids(), (std::vector<int>{8, 9, 0, 1}));
  EXPECT_EQ(r.source().epoch(), 1);
  EXPECT_EQ(r.source().cursor(), 2);
  EXPECT_EQ(r.data()[6 * 2], 0.0f);
  EXPECT_EQ(r.data()[6 * 3 + 5], 105.0f);
}

TEST_F(DataLayersTest, BatchLargerThanDataSetRepeatsSamples) {
  write_indexed_array(3);
  Options o;
  o.phase = Phase::kTest;
  Runner r("ArrayData", array_body(7), dir_, o);
  EXPECT_EQ(r.next_ids(), (std::vector<int>{0, 1, 2, 0, 1, 2, 0}));
  EXPECT_EQ(r.source().epoch(), 2);
}

TEST_F(DataLayersTest, DataOnlyTopWorksWithoutLabels) {
  write_indexed_array(5);
  Options o;
  o.tops = 1;
  o.phase = Phase::kTest;
  Runner r("ArrayData", "array_data_param { source: \"x.npy\" batch_size: 2 }", dir_, o);
  r.step();
  EXPECT_EQ(r.data()[6], 100.0f);
  // A label top without a label file is a config mistake.
  Options two;
  EXPECT_CONTAINS(error_of<ConfigError>([&] {
                    Runner("ArrayData", "array_data_param { source: \"x.npy\" batch_size: 2 }", dir_, two);
                  }),
                  "label_source");
}

TEST_F(DataLayersTest, OneDimensionalInputsBecomeColumns) {
  std::vector<float> xs = {1, 2, 3};
  std::vector<int32_t> ys = {0, 1, 2};
  write_npy(path("x.npy"), DType::kF32, {3}, xs.data());
  write_npy(path("y.npy"), DType::kI32, {3, 1}, ys.data());
  Options o;
  o.phase = Phase::kTest;
  Runner r("ArrayData", array_body(2), dir_, o);
  EXPECT_EQ(r.step().shape(), (Shape{2, 1}));
  EXPECT_EQ(r.data(), (std::vector<float>{1, 2}));
}

TEST_F(DataLayersTest, IntegralFloatAndInt64LabelsAreAccepted) {
  write_indexed_array(4);
  std::vector<float> fl = {3, 2, 1, 0};
  write_npy(path("yf.npy"), DType::kF32, {4}, fl.data());
  Options o;
  o.phase = Phase::kTest;
  Runner r("ArrayData", "array_data_param { source: \"x.npy\" label_source: \"yf.npy\" batch_size: 4 }",
           dir_, o);
  r.step();
  EXPECT_EQ(r.labels(), (std::vector<float>{3, 2, 1, 0}));

  // int64 as NumPy writes it by default: '<i8', read as int32.
  std::vector<uint8_t> npy = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  std::string header = "{'descr': '<i8', 'fortran_order': False, 'shape': (4,), }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');  // data starts 64-byte aligned
  header += '\n';
  npy.push_back(static_cast<uint8_t>(header.size()));
  npy.push_back(0);
  npy.insert(npy.end(), header.begin(), header.end());
  for (int64_t v : {7, 8, 9, 6}) {
    for (int k = 0; k < 8; ++k) npy.push_back(static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * k)));
  }
  write_bytes("y64.npy", npy);
  Runner r64("ArrayData", "array_data_param { source: \"x.npy\" label_source: \"y64.npy\" batch_size: 4 }",
             dir_, o);
  r64.step();
  EXPECT_EQ(r64.labels(), (std::vector<float>{7, 8, 9, 6}));
}

// ---- shuffling ---------------------------------------------------------------

std::vector<int> draw(Runner& r, int batches) {
  std::vector<int> all;
  for (int i = 0; i < batches; ++i) {
    for (int id : r.next_ids()) all.push_back(id);
  }
  return all;
}

TEST_F(DataLayersTest, ShuffleIsDeterministicUnderASeed) {
  write_indexed_array(20);
  Options a, b;
  a.seed = 11;  // the Net's per-layer seeds differ...
  b.seed = 99;
  Runner r1("ArrayData", array_body(5, "seed: 1234"), dir_, a);
  Runner r2("ArrayData", array_body(5, "seed: 1234"), dir_, b);
  const std::vector<int> s1 = draw(r1, 12), s2 = draw(r2, 12);
  EXPECT_EQ(s1, s2);  // ...but the explicit seed decides
  std::vector<int> first(s1.begin(), s1.begin() + 20);
  std::vector<int> sorted = first;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> identity(20);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(sorted, identity);
  EXPECT_NE(first, identity);  // shuffled in TRAIN by default

  Runner r3("ArrayData", array_body(5, "seed: 1235"), dir_, a);
  EXPECT_NE(draw(r3, 12), s1);

  // Without a seed the layer's own rng_ (seeded by the Net) decides.
  Runner n1("ArrayData", array_body(5), dir_, a);
  Runner n2("ArrayData", array_body(5), dir_, a);
  Runner n3("ArrayData", array_body(5), dir_, b);
  const std::vector<int> t1 = draw(n1, 8);
  EXPECT_EQ(t1, draw(n2, 8));
  EXPECT_NE(t1, draw(n3, 8));
}

TEST_F(DataLayersTest, EpochsWrapAndReshuffle) {
  write_indexed_array(8);
  Runner r("ArrayData", array_body(3, "seed: 5"), dir_);
  const std::vector<int> s = draw(r, 8);  // 24 samples: exactly three epochs
  EXPECT_EQ(r.source().epoch(), 3);
  EXPECT_EQ(r.source().cursor(), 0);
  std::vector<std::vector<int>> epochs;
  for (int e = 0; e < 3; ++e) {
    std::vector<int> ep(s.begin() + 8 * e, s.begin() + 8 * (e + 1));
    epochs.push_back(ep);
    std::sort(ep.begin(), ep.end());
    EXPECT_EQ(ep, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7})) << "epoch " << e;
  }
  EXPECT_FALSE(epochs[0] == epochs[1] && epochs[1] == epochs[2]) << "the order never changed";
}

TEST_F(DataLayersTest, TestPhaseDoesNotShuffleUnlessAsked) {
  write_indexed_array(6);
  Options o;
  o.phase = Phase::kTest;
  Runner plain("ArrayData", array_body(6, "seed: 3"), dir_, o);
  EXPECT_EQ(plain.next_ids(), (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(plain.next_ids(), (std::vector<int>{0, 1, 2, 3, 4, 5}));
  Runner shuffled("ArrayData", array_body(6, "seed: 3 shuffle: true"), dir_, o);
  EXPECT_NE(shuffled.next_ids(), (std::vector<int>{0, 1, 2, 3, 4, 5}));
  Runner train_off("ArrayData", array_body(6, "shuffle: false"), dir_);
  EXPECT_EQ(train_off.next_ids(), (std::vector<int>{0, 1, 2, 3, 4, 5}));
}

// ---- sharding -------------------------------------------------------------------

TEST_F(DataLayersTest, ShardsAreDisjointAndCoverTheDataSet) {
  write_indexed_array(10);
  std::multiset<int> seen;
  for (int rank = 0; rank < 3; ++rank) {
    Options o;
    o.rank = rank;
    o.world_size = 3;
    o.seed = 100 + static_cast<uint64_t>(rank);
    Runner r("ArrayData", array_body(1, "seed: 7"), dir_, o);
    const int64_t n = static_cast<int64_t>(r.source().shard().size());
    EXPECT_EQ(n, rank == 0 ? 4 : 3);
    std::set<int> mine;
    for (int64_t i = 0; i < n; ++i) {
      const int id = r.next_ids()[0];
      EXPECT_EQ(id % 3, rank) << "rank " << rank << " read sample " << id;
      mine.insert(id);
      seen.insert(id);
    }
    EXPECT_EQ(static_cast<int64_t>(mine.size()), n) << "a sample repeated within rank " << rank << "'s epoch";
    EXPECT_EQ(r.source().epoch(), 1);
    // The second epoch stays within the shard.
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(r.next_ids()[0] % 3, rank);
  }
  EXPECT_EQ(seen.size(), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(seen.count(i), 1u) << "sample " << i;
}

TEST_F(DataLayersTest, ShardNoneGivesEveryRankEverything) {
  write_indexed_array(5);
  Options o;
  o.phase = Phase::kTest;
  o.rank = 2;
  o.world_size = 3;
  Runner r("ArrayData", array_body(5, "shard: NONE"), dir_, o);
  EXPECT_EQ(r.next_ids(), (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST_F(DataLayersTest, TooFewSamplesForTheRanksIsAnError) {
  write_indexed_array(2);
  Options o;
  o.rank = 2;
  o.world_size = 3;
  EXPECT_CONTAINS(error_of<ConfigError>([&] { Runner("ArrayData", array_body(1), dir_, o); }), "shard: NONE");
}

// ---- transforms ----------------------------------------------------------------

TEST_F(DataLayersTest, Uint8InputsAreScaled) {
  std::vector<uint8_t> xs = {0, 1, 128, 255, 7, 9};
  std::vector<int32_t> ys = {0, 1, 2};
  write_npy(path("x.npy"), DType::kU8, {3, 1, 2}, xs.data());
  write_npy(path("y.npy"), DType::kI32, {3}, ys.data());
  Options o;
  o.phase = Phase::kTest;
  Runner r("ArrayData", array_body(3) + " transform_param { scale: 0.00390625 }", dir_, o);
  r.step();
  for (size_t i = 0; i < xs.size(); ++i) EXPECT_EQ(r.data()[i], xs[i] * 0.00390625f);
  Runner raw("ArrayData", array_body(3), dir_, o);
  raw.step();
  EXPECT_EQ(raw.data()[3], 255.0f);
}

TEST_F(DataLayersTest, MeanValueIsSubtractedBeforeScaling) {
  write_indexed_array(2);  // samples [2 channels, 3 values]
  Options o;
  o.phase = Phase::kTest;
  Runner per("ArrayData", array_body(2) + " transform_param { scale: 0.5 mean_value: 1 mean_value: 4 }",
             dir_, o);
  per.step();
  for (int b = 0; b < 2; ++b) {
    for (int c = 0; c < 2; ++c) {
      for (int k = 0; k < 3; ++k) {
        const float x = static_cast<float>(100 * b + 3 * c + k);
        EXPECT_EQ(per.data()[static_cast<size_t>(b * 6 + c * 3 + k)], (x - (c == 0 ? 1.0f : 4.0f)) * 0.5f);
      }
    }
  }
  Runner all("ArrayData", array_body(2) + " transform_param { mean_value: 2 }", dir_, o);
  all.step();
  EXPECT_EQ(all.data()[0], -2.0f);
  EXPECT_EQ(all.data()[11], 103.0f);

  const std::string msg = error_of<ConfigError>([&] {
    Runner("ArrayData", array_body(2) + " transform_param { mean_value: 1 mean_value: 2 mean_value: 3 }",
           dir_, o);
  });
  EXPECT_CONTAINS(msg, "3 mean_value");
  EXPECT_CONTAINS(msg, "2 channels");
}

// ---- state ---------------------------------------------------------------------

// Draws 7 batches, saves, draws 5; a fresh layer restored from the state must
// produce the same 5 batches bit for bit (epochs wrap and reshuffle in between).
void check_resume(const std::string& type, const std::string& body, const std::string& dir) {
  Options o;
  o.seed = 42;
  Runner first(type, body, dir, o);
  for (int i = 0; i < 7; ++i) first.step();
  const std::string state = first.layer().save_state();
  std::vector<std::vector<float>> data, labels;
  for (int i = 0; i < 5; ++i) {
    first.step();
    data.push_back(first.data());
    labels.push_back(first.labels());
  }
  Options other;
  other.seed = 777;  // a different Net seed must not matter after load_state
  Runner resumed(type, body, dir, other);
  resumed.step();  // and neither does what it read before loading
  resumed.layer().load_state(state);
  for (int i = 0; i < 5; ++i) {
    resumed.step();
    const std::vector<float> d = resumed.data(), l = resumed.labels();
    ASSERT_EQ(d.size(), data[static_cast<size_t>(i)].size());
    EXPECT_EQ(std::memcmp(d.data(), data[static_cast<size_t>(i)].data(), d.size() * sizeof(float)), 0)
        << type << " batch " << i;
    EXPECT_EQ(l, labels[static_cast<size_t>(i)]) << type << " batch " << i;
  }
  EXPECT_EQ(resumed.layer().save_state(), first.layer().save_state());
}

TEST_F(DataLayersTest, SaveAndLoadStateResumeBitExactly) {
  write_indexed_array(11);
  check_resume("ArrayData", array_body(3, "shuffle: true") + " transform_param { scale: 0.1 }", dir_);
  write_mnist(9, 4, 5);
  check_resume("MnistData",
               "mnist_data_param { source: \"images.idx3\" label_source: \"labels.idx1\" batch_size: 4 }", dir_);
  write_cifar("c.bin", 5, 0);
  check_resume("Cifar10Data", "cifar10_data_param { source: \"c.bin\" batch_size: 2 }", dir_);
}

// ---- MnistData -----------------------------------------------------------------

TEST_F(DataLayersTest, MnistReadsImagesAndLabels) {
  write_mnist(5, 28, 28);
  Options o;
  o.phase = Phase::kTest;
  Runner r("MnistData",
           "mnist_data_param { source: \"images.idx3\" label_source: \"labels.idx1\" batch_size: 3 } "
           "transform_param { scale: 0.00390625 }",
           dir_, o);
  EXPECT_EQ(r.step().shape(), (Shape{3, 1, 28, 28}));
  EXPECT_EQ(r.labels(), (std::vector<float>{0, 1, 2}));
  const std::vector<float> d = r.data();
  for (int i = 0; i < 3; ++i) {
    for (int p = 0; p < 784; p += 37) {
      EXPECT_EQ(d[static_cast<size_t>(i * 784 + p)], static_cast<float>((7 * i + p) % 256) * 0.00390625f);
    }
  }
  EXPECT_EQ(r.next_ids(), (std::vector<int>{3, 4, 0}));
}

// ---- Cifar10Data ---------------------------------------------------------------

TEST_F(DataLayersTest, Cifar10ConcatenatesBatchesInOrder) {
  write_cifar("a.bin", 3, 0);
  write_cifar("b.bin", 2, 3);
  Options o;
  o.phase = Phase::kTest;
  Runner r("Cifar10Data",
           "cifar10_data_param { source: \"a.bin\" source: \"b.bin\" batch_size: 4 } "
           "transform_param { mean_value: 1 mean_value: 2 mean_value: 3 scale: 2 }",
           dir_, o);
  EXPECT_EQ(r.step().shape(), (Shape{4, 3, 32, 32}));
  EXPECT_EQ(r.source().num_samples(), 5);
  EXPECT_EQ(r.labels(), (std::vector<float>{0, 1, 2, 3}));
  const std::vector<float> d = r.data();
  for (int i = 0; i < 4; ++i) {
    for (int p = 0; p < 3072; p += 101) {
      const float mean = static_cast<float>(1 + p / 1024);
      EXPECT_EQ(d[static_cast<size_t>(i * 3072 + p)], (static_cast<float>((i + p) % 256) - mean) * 2.0f);
    }
  }
  EXPECT_EQ(r.next_ids(), (std::vector<int>{4, 0, 1, 2}));
}

// ---- schema and the bundled digits ----------------------------------------------

TEST_F(DataLayersTest, SchemasAndTopCounts) {
  for (const char* type : {"ArrayData", "MnistData", "Cifar10Data"}) {
    const LayerSchema s = LayerRegistry::instance().find(type).schema();
    EXPECT_TRUE(s.examples.empty()) << type;
    EXPECT_GT(s.summary.size(), 20u) << type;
    ASSERT_EQ(s.blocks.size(), 2u) << type;
    EXPECT_EQ(s.blocks[1].block, "transform_param");
    for (const char* key : {"source", "batch_size", "shuffle", "seed", "shard"}) {
      EXPECT_NE(std::find(s.blocks[0].keys.begin(), s.blocks[0].keys.end(), key), s.blocks[0].keys.end())
          << type << " " << key;
    }
  }
  EXPECT_EQ(ArrayDataLayer::schema().blocks[0].block, "array_data_param");
  EXPECT_EQ(MnistDataLayer::schema().blocks[0].block, "mnist_data_param");
  EXPECT_EQ(Cifar10DataLayer::schema().blocks[0].block, "cifar10_data_param");
  write_indexed_array(2);
  Runner r("ArrayData", array_body(1), dir_);
  EXPECT_EQ(r.layer().min_bottoms(), 0);
  EXPECT_EQ(r.layer().max_bottoms(), 0);
  EXPECT_EQ(r.layer().min_tops(), 1);
  EXPECT_EQ(r.layer().max_tops(), 2);
}

TEST(DataLayersDigitsTest, ReadsTheBundledDigits) {
  Options o;
  o.phase = Phase::kTest;
  const std::string root = STRATA_SOURCE_DIR;
  Runner train("ArrayData",
               "array_data_param { source: \"data/digits/train_images.npy\" "
               "label_source: \"data/digits/train_labels.npy\" batch_size: 64 }",
               root, o);
  Runner test("ArrayData",
              "array_data_param { source: \"data/digits/test_images.npy\" "
              "label_source: \"data/digits/test_labels.npy\" batch_size: 100 }",
              root, o);
  EXPECT_EQ(train.source().num_samples(), 1437);
  EXPECT_EQ(test.source().num_samples(), 360);
  EXPECT_EQ(train.step().shape(), (Shape{64, 1, 8, 8}));
  EXPECT_EQ(test.step().shape(), (Shape{100, 1, 8, 8}));
  // The first batch is the first rows of the file, unshuffled in TEST.
  const NpyArray images = read_npy(root + "/data/digits/train_images.npy");
  const NpyArray labels = read_npy(root + "/data/digits/train_labels.npy");
  const std::vector<float> d = train.data();
  EXPECT_EQ(std::memcmp(d.data(), images.as<float>(), d.size() * sizeof(float)), 0);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(train.labels()[static_cast<size_t>(i)], labels.as<int32_t>()[i]);
  // One whole epoch: values in [0, 1], every class present.
  std::set<int> classes;
  for (int b = 0; b < 4; ++b) {
    test.step();
    for (float v : test.data()) {
      ASSERT_GE(v, 0.0f);
      ASSERT_LE(v, 1.0f);
    }
    for (float l : test.labels()) classes.insert(static_cast<int>(l));
  }
  EXPECT_EQ(classes, (std::set<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

// Through a Net: the schema admits the keys, relative paths resolve against
// base_dir, and the Net's per-layer states resume the reader.
TEST(DataLayersDigitsTest, WorksInsideANet) {
  const std::string config = R"(
    name: "digits"
    layer {
      name: "data" type: "ArrayData" top: "data" top: "label"
      array_data_param { source: "data/digits/train_images.npy" label_source: "data/digits/train_labels.npy"
                         batch_size: 50 seed: 3 shard: AUTO }
      transform_param { scale: 2 mean_value: 0.5 }
    })";
  NetOptions options;
  options.base_dir = STRATA_SOURCE_DIR;
  options.rank = 1;
  options.world_size = 2;
  Net net(parse_config_text(config, "digits.prototxt"), options);
  net.forward();
  EXPECT_EQ(net.blob("data").shape(), (Shape{50, 1, 8, 8}));
  EXPECT_EQ(net.blob("label").shape(), (Shape{50}));
  const auto states = net.save_layer_states();
  net.forward();
  const Tensor expected = net.blob("data").data.clone();
  Net resumed(parse_config_text(config, "digits.prototxt"), options);
  resumed.load_layer_states(states);
  resumed.forward();
  EXPECT_EQ(std::memcmp(resumed.blob("data").data.raw_data(), expected.raw_data(), expected.nbytes()), 0);
  for (int i = 0; i < 50; ++i) {
    const float v = expected.data<float>()[i * 64];
    EXPECT_GE(v, -1.0f);  // (x - 0.5) * 2 with x in [0, 1]
    EXPECT_LE(v, 1.0f);
  }

  const std::string typo = R"(
    layer { name: "data" type: "ArrayData" top: "data"
            array_data_param { source: "x.npy" batch_sise: 5 } })";
  try {
    Net bad(parse_config_text(typo, "typo.prototxt"), options);
    ADD_FAILURE() << "unknown key accepted";
  } catch (const ConfigError& e) {
    EXPECT_CONTAINS(e.what(), "batch_size");
  }
}

}  // namespace
}  // namespace strata
