// HDF5Data and HDF5Output (layers/hdf5_data.h, layers/hdf5_output.h) over
// files written here: rows in list order across files, datasets named by
// the tops, sharding, shuffling and resume; errors that name the file and
// dataset; the output file read back. Skipped when libhdf5 was not built.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "framework/data/hdf5_file.h"
#include "framework/error.h"
#include "tests/data_layers_test_util.h"
#include "tests/net_test_util.h"
#include "tests/test_util.h"

namespace strata {
namespace {

using data_layers_test::Options;
using data_layers_test::Runner;
using test::error_of;

#define SKIP_WITHOUT_HDF5()                                                                               \
  do {                                                                                                    \
    if (!hdf5::available()) {                                                                             \
      GTEST_SKIP() << "libhdf5 was not found when strata was built (apt-get install libhdf5-dev, rebuild)"; \
    }                                                                                                     \
  } while (0)

class Hdf5DataTest : public ::testing::Test {
 protected:
  test::TempDir tmp_{"strata_hdf5"};

  // A file of `n` rows starting at global row `first`: data row r holds
  // [r, r + 0.5] as a [1, 2] row, label row r holds r.
  void write_rows(const std::string& name, int first, int n) {
    hdf5::Dataset data{"data", {n, 1, 2}, {}}, label{"label", {n}, {}};
    for (int r = first; r < first + n; ++r) {
      data.data.push_back(static_cast<float>(r));
      data.data.push_back(static_cast<float>(r) + 0.5f);
      label.data.push_back(static_cast<float>(r));
    }
    hdf5::write_datasets(tmp_.file(name), {data, label});
  }
  // Two files of 3 and 4 rows, listed in list.txt (relative names).
  void write_two_files() {
    write_rows("a.h5", 0, 3);
    write_rows("b.h5", 3, 4);
    test::write_text(tmp_.file("list.txt"), "a.h5\n\n# the second\nb.h5\n");
  }
  static std::string body(int batch, const std::string& extra = "") {
    return "hdf5_data_param { source: \"list.txt\" batch_size: " + std::to_string(batch) + " " + extra + " }";
  }
};

TEST_F(Hdf5DataTest, TopsReadTheirDatasetsAcrossFilesInListOrder) {
  SKIP_WITHOUT_HDF5();
  write_two_files();
  Runner r("HDF5Data", body(5), tmp_.path());
  EXPECT_EQ(r.step().shape(), (Shape{5, 1, 2}));
  EXPECT_EQ(r.labels(), (std::vector<float>{0, 1, 2, 3, 4}));
  EXPECT_EQ(r.data()[9], 4.5f);
  EXPECT_EQ(r.next_ids(), (std::vector<int>{5, 6, 0, 1, 2}));  // wraps to the first file
}

TEST_F(Hdf5DataTest, RanksReadDisjointRows) {
  SKIP_WITHOUT_HDF5();
  write_two_files();
  std::set<int> seen;
  for (int rank = 0; rank < 3; ++rank) {
    Options o;
    o.rank = rank;
    o.world_size = 3;
    Runner r("HDF5Data", body(2), tmp_.path(), o);
    for (int id : r.next_ids()) {
      EXPECT_EQ(id % 3, rank);
      seen.insert(id);
    }
  }
  EXPECT_EQ(seen, (std::set<int>{0, 1, 2, 3, 4, 5}));
}

TEST_F(Hdf5DataTest, ShuffleVisitsEveryRowOncePerEpochAndResumes) {
  SKIP_WITHOUT_HDF5();
  write_two_files();
  Runner r("HDF5Data", body(7, "shuffle: true seed: 3"), tmp_.path());
  std::vector<int> epoch = r.next_ids();
  std::vector<int> sorted = epoch;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<int>{0, 1, 2, 3, 4, 5, 6}));
  const std::string state = r.layer().save_state();
  const std::vector<int> second = r.next_ids();
  EXPECT_NE(second, epoch) << "the second epoch should be in another order";
  Runner resumed("HDF5Data", body(7, "shuffle: true seed: 3"), tmp_.path());
  resumed.layer().load_state(state);
  EXPECT_EQ(resumed.next_ids(), second);
}

TEST_F(Hdf5DataTest, MissingDatasetsAndMismatchedFilesAreNamed) {
  SKIP_WITHOUT_HDF5();
  write_two_files();
  hdf5::write_datasets(tmp_.file("c.h5"), {{"data", {2, 3}, {1, 2, 3, 4, 5, 6}}, {"label", {2}, {0, 1}}});
  test::write_text(tmp_.file("bad_list.txt"), "a.h5\nc.h5\n");
  std::string msg = error_of<ShapeError>([&] {
    Runner r("HDF5Data", "hdf5_data_param { source: \"bad_list.txt\" batch_size: 1 }", tmp_.path());
  });
  EXPECT_NE(msg.find("rows of shape [3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("c.h5"), std::string::npos) << msg;

  hdf5::write_datasets(tmp_.file("d.h5"), {{"features", {2}, {1, 2}}});
  test::write_text(tmp_.file("d_list.txt"), "d.h5\n");
  msg = error_of<IoError>([&] {
    Runner r("HDF5Data", "hdf5_data_param { source: \"d_list.txt\" batch_size: 1 }", tmp_.path());
  });
  EXPECT_NE(msg.find("has no dataset 'data' (it has: features)"), std::string::npos) << msg;
  msg = error_of<IoError>([&] {
    Runner r("HDF5Data", "hdf5_data_param { source: \"no_list.txt\" batch_size: 1 }", tmp_.path());
  });
  EXPECT_NE(msg.find("no_list.txt"), std::string::npos) << msg;
}

TEST(Hdf5Output, AppendsEveryBatchToDataAndLabel) {
  SKIP_WITHOUT_HDF5();
  test::TempDir tmp("strata_hdf5");
  const std::string out = tmp.file("out.h5");
  {
    auto net = test::make_net(R"(
      layer { name: "in" type: "Input" top: "x" top: "y"
              input_param { shape { dim: 2 dim: 3 } shape { dim: 2 } } }
      layer { name: "save" type: "HDF5Output" bottom: "x" bottom: "y"
              hdf5_output_param { file_name: ")" + out + R"(" } }
    )");
    for (int step = 0; step < 2; ++step) {
      test::set_values(net->blob("x").data, {1.0f * step, 2, 3, 4, 5, 6});
      test::set_values(net->blob("y").data, {7.0f + step, 8});
      net->forward();
    }
  }
  Shape s;
  const std::vector<float> data = hdf5::read_dataset(out, "data", &s);
  EXPECT_EQ(s, (Shape{4, 3}));
  EXPECT_EQ(data, (std::vector<float>{0, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(hdf5::read_dataset(out, "label", &s), (std::vector<float>{7, 8, 8, 8}));
}

}  // namespace
}  // namespace strata
