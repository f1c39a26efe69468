// What the data layers (ArrayData, MnistData, Cifar10Data) report for bad
// input files, corrupt or mismatched resume state and bad configs: each error
// names the file, the field and the value. The input files are written here
// into a temp folder; the layers' normal behaviour is in data_layers_test.cpp.
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/error.h"
#include "framework/io/npy.h"
#include "tests/data_layers_test_util.h"

namespace strata {
namespace {

using data_layers_test::DataLayersTest;
using data_layers_test::error_of;
using data_layers_test::Options;
using data_layers_test::Runner;

// ---- state ---------------------------------------------------------------------

TEST_F(DataLayersTest, CorruptOrMismatchedStateIsRejected) {
  write_indexed_array(6);
  Runner r("ArrayData", array_body(2), dir_);
  r.step();
  const std::string good = r.layer().save_state();
  const std::vector<int> before = [&] {
    Runner copy("ArrayData", array_body(2), dir_);
    copy.layer().load_state(good);
    return copy.next_ids();
  }();

  EXPECT_CONTAINS(error_of<Error>([&] { r.layer().load_state("garbage"); }), "layer 'data'");
  std::string bad_order = good;
  const size_t pos = bad_order.find("order ") + 6;
  bad_order[pos] = bad_order[pos] == '0' ? '1' : '0';  // duplicates one index
  EXPECT_CONTAINS(error_of<Error>([&] { r.layer().load_state(bad_order); }), "permutation");
  std::string bad_rng = good.substr(0, good.find("rng ")) + "rng nonsense\n";
  EXPECT_CONTAINS(error_of<Error>([&] { r.layer().load_state(bad_rng); }), "random number generator");
  // A failed load leaves the reader untouched.
  EXPECT_EQ(r.next_ids(), before);

  write_indexed_array(7, "x7.npy", "y7.npy");
  Runner other("ArrayData",
               "array_data_param { source: \"x7.npy\" label_source: \"y7.npy\" batch_size: 2 }", dir_);
  EXPECT_CONTAINS(error_of<Error>([&] { other.layer().load_state(good); }), "6 samples");
  Options rank1;
  rank1.rank = 1;
  rank1.world_size = 2;
  Runner sharded("ArrayData", array_body(2), dir_, rank1);
  EXPECT_CONTAINS(error_of<Error>([&] { sharded.layer().load_state(good); }), "same number of ranks");
}
// ---- MnistData -----------------------------------------------------------------

TEST_F(DataLayersTest, MnistFileErrorsNameFileFieldAndValue) {
  const std::string body =
      "mnist_data_param { source: \"images.idx3\" label_source: \"labels.idx1\" batch_size: 2 }";
  auto load_error = [&] { return error_of<IoError>([&] { Runner("MnistData", body, dir_); }); };

  write_mnist(3, 4, 4, /*image_magic=*/2050);
  std::string msg = load_error();
  EXPECT_CONTAINS(msg, path("images.idx3"));
  EXPECT_CONTAINS(msg, "'magic' is 2050");
  EXPECT_CONTAINS(msg, "2051");
  EXPECT_CONTAINS(msg, "layer 'data' (MnistData)");

  write_mnist(3, 4, 4, 2051, /*label_magic=*/2051);  // the labels file carries the images magic
  msg = load_error();
  EXPECT_CONTAINS(msg, path("labels.idx1"));
  EXPECT_CONTAINS(msg, "'magic' is 2051");
  EXPECT_CONTAINS(msg, "swapped");

  write_mnist(3, 4, 4, 2051, 2049, /*label_count=*/4);
  msg = load_error();
  EXPECT_CONTAINS(msg, path("labels.idx1"));
  EXPECT_CONTAINS(msg, "'count' is 4");
  EXPECT_CONTAINS(msg, "3 images");

  write_mnist(3, 4, 4);
  {
    std::ofstream f(path("images.idx3"), std::ios::binary | std::ios::app);
    f << "x";  // one byte too many
  }
  msg = load_error();
  EXPECT_CONTAINS(msg, path("images.idx3"));
  EXPECT_CONTAINS(msg, "count 3, rows 4, cols 4");
  EXPECT_CONTAINS(msg, "needs 64");

  write_bytes("images.idx3", {0, 0, 8});
  EXPECT_CONTAINS(load_error(), "truncated");
  write_bytes("images.idx3", {0x1f, 0x8b, 8, 0, 0, 0, 0, 0});
  EXPECT_CONTAINS(load_error(), "gunzip");

  ::unlink(path("images.idx3").c_str());
  msg = load_error();
  EXPECT_CONTAINS(msg, path("images.idx3"));
}
// ---- Cifar10Data ---------------------------------------------------------------

TEST_F(DataLayersTest, Cifar10FileErrors) {
  const std::string body = "cifar10_data_param { source: \"a.bin\" source: \"b.bin\" batch_size: 2 }";
  auto load_error = [&] { return error_of<IoError>([&] { Runner("Cifar10Data", body, dir_); }); };
  write_cifar("a.bin", 2, 0);
  std::vector<uint8_t> bad(3073 * 2, 0);
  bad[3073] = 10;
  write_bytes("b.bin", bad);
  std::string msg = load_error();
  EXPECT_CONTAINS(msg, path("b.bin"));
  EXPECT_CONTAINS(msg, "record 1");
  EXPECT_CONTAINS(msg, "label 10");

  bad.resize(3073 + 100);
  write_bytes("b.bin", bad);
  msg = load_error();
  EXPECT_CONTAINS(msg, path("b.bin"));
  EXPECT_CONTAINS(msg, "3173 bytes");
  EXPECT_CONTAINS(msg, "3073");

  ::unlink(path("b.bin").c_str());
  EXPECT_CONTAINS(load_error(), path("b.bin"));

  EXPECT_CONTAINS(error_of<ConfigError>([&] {
                    Runner("Cifar10Data", "cifar10_data_param { batch_size: 2 }", dir_);
                  }),
                  "source");
}

// ---- ArrayData errors ----------------------------------------------------------

TEST_F(DataLayersTest, ArrayDataFileErrors) {
  auto load_error = [&](const std::string& body) {
    return error_of<IoError>([&] { Runner("ArrayData", body, dir_); });
  };
  // Missing file: the resolved path and the layer.
  std::string msg = load_error(array_body(2));
  EXPECT_CONTAINS(msg, path("x.npy"));
  EXPECT_CONTAINS(msg, "layer 'data' (ArrayData)");

  // Count mismatch names both files and both counts.
  write_indexed_array(5);
  write_indexed_array(4, "x4.npy", "y4.npy");
  msg = load_error("array_data_param { source: \"x.npy\" label_source: \"y4.npy\" batch_size: 2 }");
  EXPECT_CONTAINS(msg, path("x.npy"));
  EXPECT_CONTAINS(msg, path("y4.npy"));
  EXPECT_CONTAINS(msg, "5 samples");
  EXPECT_CONTAINS(msg, "4 labels");

  // Truncated .npy.
  std::ifstream in(path("x.npy"), std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bytes.resize(bytes.size() - 7);
  write_bytes("x.npy", bytes);
  msg = load_error(array_body(2));
  EXPECT_CONTAINS(msg, path("x.npy"));

  // Non-integral float labels.
  write_indexed_array(3);
  std::vector<float> fl = {0, 1.5f, 2};
  write_npy(path("yf.npy"), DType::kF32, {3}, fl.data());
  msg = load_error("array_data_param { source: \"x.npy\" label_source: \"yf.npy\" batch_size: 2 }");
  EXPECT_CONTAINS(msg, path("yf.npy"));
  EXPECT_CONTAINS(msg, "label 1 is 1.5");

  // Labels of the wrong shape, inputs of an unsupported dtype.
  std::vector<int32_t> y2(6, 0);
  write_npy(path("y2.npy"), DType::kI32, {3, 2}, y2.data());
  EXPECT_CONTAINS(load_error("array_data_param { source: \"x.npy\" label_source: \"y2.npy\" batch_size: 2 }"),
                  "[3, 2]");
  write_npy(path("xi.npy"), DType::kI32, {3, 2}, y2.data());
  EXPECT_CONTAINS(load_error("array_data_param { source: \"xi.npy\" label_source: \"y.npy\" batch_size: 2 }"),
                  "float32");
}

TEST_F(DataLayersTest, ConfigErrors) {
  write_indexed_array(3);
  const std::string zero = error_of<ConfigError>([&] { Runner("ArrayData", array_body(0), dir_); });
  EXPECT_CONTAINS(zero, "batch_size must be > 0, got 0");
  EXPECT_CONTAINS(zero, "layer 'data'");
  EXPECT_CONTAINS(error_of<ConfigError>([&] {
                    Runner("ArrayData", "array_data_param { source: \"x.npy\" }", dir_);
                  }),
                  "batch_size");
  EXPECT_CONTAINS(error_of<ConfigError>([&] { Runner("ArrayData", array_body(2, "shard: RANK"), dir_); }),
                  "AUTO");
}
}  // namespace
}  // namespace strata
