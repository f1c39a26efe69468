// A Caffe user's folder, built here as Caffe's tools would leave it, trains
// with `strata train` run from that folder as Caffe is run from its root:
//   examples/digits/digits_train_lmdb   Datum records as convert_mnist_data
//                                        writes them (keys "%08d", 1x8x8 bytes)
//   examples/digits/mean.binaryproto    the mean image, as compute_image_mean
//   examples/digits/digits_test.h5      the test set, already scaled (HDF5Data)
//   examples/digits/test_h5_list.txt
//   examples/digits/lenet_train_test.prototxt, lenet_solver.prototxt
// Every path in the files is written from the root, in Caffe's spelling.
// Skipped with the reason when liblmdb or libhdf5 was not built.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "framework/caffe/caffe_db.h"
#include "framework/caffe/caffe_proto.h"
#include "framework/data/hdf5_file.h"
#include "framework/io/npy.h"
#include "tests/process_util.h"
#include "tests/test_util.h"

namespace strata {
namespace {

constexpr float kScale = 0.00390625f;

struct Digits {
  int64_t n = 0;
  std::vector<uint8_t> pixels;  // n x 64, 0..255
  std::vector<int32_t> labels;
};

// The bundled digits (values 0..1) as the bytes an MNIST-style image holds.
Digits load_digits(const std::string& split) {
  const std::string dir = std::string(STRATA_SOURCE_DIR) + "/data/digits/";
  const NpyArray x = read_npy(dir + split + "_images.npy");
  const NpyArray y = read_npy(dir + split + "_labels.npy");
  Digits d;
  d.n = x.shape[0];
  const float* px = x.as<float>();
  for (int64_t i = 0; i < x.numel(); ++i) d.pixels.push_back(static_cast<uint8_t>(std::lround(px[i] * 255.0f)));
  const int32_t* py = y.as<int32_t>();
  d.labels.assign(py, py + d.n);
  return d;
}

// convert_mnist_data: one Datum per image under the key "%08d", committed in batches of 1000.
void write_lmdb(const std::string& path, const Digits& d) {
  auto db = caffe::create_db(path, caffe::DbBackend::kLmdb);
  for (int64_t i = 0; i < d.n; ++i) {
    caffe::Datum datum;
    datum.channels = 1;
    datum.height = 8;
    datum.width = 8;
    datum.data.assign(reinterpret_cast<const char*>(&d.pixels[static_cast<size_t>(i * 64)]), 64);
    datum.label = d.labels[static_cast<size_t>(i)];
    char key[16];
    std::snprintf(key, sizeof key, "%08d", static_cast<int>(i));
    db->put(key, caffe::serialize_datum(datum));
    if ((i + 1) % 1000 == 0) db->commit();
  }
  db->commit();
}

const char* const kNet = R"(name: "LeNet"
layer {
  name: "mnist"
  type: "Data"
  top: "data"
  top: "label"
  include { phase: TRAIN }
  transform_param {
    scale: 0.00390625
    mean_file: "examples/digits/mean.binaryproto"
  }
  data_param {
    source: "examples/digits/digits_train_lmdb"
    batch_size: 64
    backend: LMDB
  }
}
layer {
  name: "mnist"
  type: "HDF5Data"
  top: "data"
  top: "label"
  include { phase: TEST }
  hdf5_data_param {
    source: "examples/digits/test_h5_list.txt"
    batch_size: 120
  }
}
layer {
  name: "conv1"
  type: "Convolution"
  bottom: "data"
  top: "conv1"
  param { lr_mult: 1 }
  param { lr_mult: 2 }
  convolution_param {
    num_output: 20
    kernel_size: 3
    stride: 1
    weight_filler { type: "xavier" }
    bias_filler { type: "constant" }
  }
}
layer {
  name: "pool1"
  type: "Pooling"
  bottom: "conv1"
  top: "pool1"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 }
}
layer {
  name: "ip1"
  type: "InnerProduct"
  bottom: "pool1"
  top: "ip1"
  param { lr_mult: 1 }
  param { lr_mult: 2 }
  inner_product_param {
    num_output: 100
    weight_filler { type: "xavier" }
    bias_filler { type: "constant" }
  }
}
layer {
  name: "relu1"
  type: "ReLU"
  bottom: "ip1"
  top: "ip1"
}
layer {
  name: "ip2"
  type: "InnerProduct"
  bottom: "ip1"
  top: "ip2"
  param { lr_mult: 1 }
  param { lr_mult: 2 }
  inner_product_param {
    num_output: 10
    weight_filler { type: "xavier" }
    bias_filler { type: "constant" }
  }
}
layer {
  name: "accuracy"
  type: "Accuracy"
  bottom: "ip2"
  bottom: "label"
  top: "accuracy"
  include { phase: TEST }
}
layer {
  name: "loss"
  type: "SoftmaxWithLoss"
  bottom: "ip2"
  bottom: "label"
  top: "loss"
}
)";

const char* const kSolver = R"(# The solver in Caffe's examples/mnist/lenet_solver.prototxt form.
net: "examples/digits/lenet_train_test.prototxt"
test_iter: 3
test_interval: 400
base_lr: 0.01
momentum: 0.9
weight_decay: 0.0005
lr_policy: "inv"
gamma: 0.0001
power: 0.75
display: 100
max_iter: 400
snapshot: 0
snapshot_prefix: "examples/digits/lenet"
solver_mode: CPU
)";

TEST(CaffeLayout, ACaffeFolderTrainsAsWrittenFromItsRoot) {
  if (!caffe::db_backend_available(caffe::DbBackend::kLmdb) || !hdf5::available()) {
    GTEST_SKIP() << "needs liblmdb and libhdf5 at build time (apt-get install liblmdb-dev libhdf5-dev, rebuild)";
  }
  test::TempDir root("strata_caffe_root");
  const std::string ex = root.file("examples/digits");
  std::filesystem::create_directories(ex);

  const Digits train = load_digits("train"), test = load_digits("test");
  write_lmdb(ex + "/digits_train_lmdb", train);

  // compute_image_mean: the per-pixel mean of the training images, [1, 1, 8, 8].
  Tensor mean({1, 1, 8, 8});
  for (int p = 0; p < 64; ++p) {
    double s = 0;
    for (int64_t i = 0; i < train.n; ++i) s += train.pixels[static_cast<size_t>(i * 64 + p)];
    mean.data<float>()[p] = static_cast<float>(s / static_cast<double>(train.n));
  }
  caffe::write_binaryproto(ex + "/mean.binaryproto", mean);

  // The test set in HDF5, transformed as the Data layer transforms the training set.
  hdf5::Dataset data{"data", {test.n, 1, 8, 8}, {}}, label{"label", {test.n}, {}};
  for (int64_t i = 0; i < test.n; ++i) {
    for (int p = 0; p < 64; ++p) {
      data.data.push_back((static_cast<float>(test.pixels[static_cast<size_t>(i * 64 + p)]) - mean.data<float>()[p]) *
                          kScale);
    }
    label.data.push_back(static_cast<float>(test.labels[static_cast<size_t>(i)]));
  }
  hdf5::write_datasets(ex + "/digits_test.h5", {data, label});
  test::write_text(ex + "/test_h5_list.txt", "examples/digits/digits_test.h5\n");
  test::write_text(ex + "/lenet_train_test.prototxt", kNet);
  test::write_text(root.file("lenet_solver.prototxt"), kSolver);

  const std::string log = root.file("train.log");
  const std::string cmd = "cd '" + root.path() + "' && exec '" + STRATA_BINARY +
                          "' train --solver lenet_solver.prototxt --threads 2";
  const pid_t pid = test::spawn_process({"/bin/bash", "-c", cmd}, {}, log);
  const int rc = test::wait_for_process(pid, std::chrono::steady_clock::now() + std::chrono::minutes(5));
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string out = ss.str();
  ASSERT_EQ(rc, 0) << out;
  const std::regex accuracy("accuracy = ([0-9.]+)");
  std::string last;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), accuracy);
       it != std::sregex_iterator(); ++it) {
    last = (*it)[1];
  }
  ASSERT_FALSE(last.empty()) << "no test accuracy printed:\n" << out;
  EXPECT_GE(std::stod(last), 0.9) << out;
  if (std::getenv("STRATA_TEST_VERBOSE")) std::printf("%s", out.c_str());
}

}  // namespace
}  // namespace strata
