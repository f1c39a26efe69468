// The Data layer (layers/caffe_data.h) over databases written here as
// Caffe's convert_mnist_data / convert_imageset write them: keys "%08d",
// one Datum per image. Skipped with the reason when a backend was not built.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "framework/caffe/caffe_db.h"
#include "framework/caffe/caffe_proto.h"
#include "framework/data/image_decode.h"
#include "framework/error.h"
#include "layers/caffe_data.h"
#include "tests/data_layers_test_util.h"
#include "tests/test_util.h"

#if __has_include(<stb/stb_image_write.h>)
#define STRATA_TEST_HAVE_STB_WRITE 1
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-function"
#endif
#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#include <stb/stb_image_write.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
#else
#define STRATA_TEST_HAVE_STB_WRITE 0
#endif

namespace strata {
namespace {

using caffe::DbBackend;
using data_layers_test::Options;
using data_layers_test::Runner;
using test::error_of;

#define SKIP_WITHOUT_BACKEND(b)                                                                       \
  do {                                                                                                \
    if (!caffe::db_backend_available(b)) {                                                            \
      GTEST_SKIP() << caffe::db_backend_name(b) << " was not found when strata was built "            \
                   << "(apt-get install liblmdb-dev libleveldb-dev, then rebuild)";                  \
    }                                                                                                 \
  } while (0)

std::string key_of(int i) {
  char key[16];
  std::snprintf(key, sizeof key, "%08d", i);
  return key;
}

// n records of 1 x 2 x 3 bytes: record i holds 10*i + p at pixel p, label i.
void write_indexed_db(const std::string& path, DbBackend backend, int n) {
  auto db = caffe::create_db(path, backend);
  for (int i = 0; i < n; ++i) {
    caffe::Datum d;
    d.channels = 1;
    d.height = 2;
    d.width = 3;
    for (int p = 0; p < 6; ++p) d.data.push_back(static_cast<char>(10 * i + p));
    d.label = i;
    db->put(key_of(i), caffe::serialize_datum(d));
  }
  db->commit();
}

std::string body(const std::string& source, DbBackend backend, int batch, const std::string& extra = "",
                 const std::string& transform = "") {
  return "data_param { source: \"" + source + "\" backend: " + caffe::db_backend_name(backend) +
         " batch_size: " + std::to_string(batch) + " " + extra + " } transform_param { " + transform + " }";
}

class CaffeDataTest : public ::testing::TestWithParam<DbBackend> {
 protected:
  test::TempDir tmp_{"strata_caffe_data"};
};

TEST_P(CaffeDataTest, ReadsRecordsInKeyOrderAndWrapsAtTheEnd) {
  SKIP_WITHOUT_BACKEND(GetParam());
  write_indexed_db(tmp_.file("db"), GetParam(), 5);
  Runner r("Data", body("db", GetParam(), 2, "", "scale: 0.5"), tmp_.path());
  const Blob& top = r.step();
  EXPECT_EQ(top.shape(), (Shape{2, 1, 2, 3}));
  EXPECT_EQ(r.labels(), (std::vector<float>{0, 1}));
  EXPECT_EQ(r.data()[7], 5.5f);  // record 1, pixel 1: (10 + 1) * 0.5
  EXPECT_EQ(r.next_ids(), (std::vector<int>{2, 3}));
  EXPECT_EQ(r.next_ids(), (std::vector<int>{4, 0}));  // a batch straddles the wrap
  EXPECT_EQ(r.next_ids(), (std::vector<int>{1, 2}));
}

TEST_P(CaffeDataTest, RanksReadDisjointShards) {
  SKIP_WITHOUT_BACKEND(GetParam());
  write_indexed_db(tmp_.file("db"), GetParam(), 5);
  for (int rank = 0; rank < 2; ++rank) {
    Options o;
    o.rank = rank;
    o.world_size = 2;
    Runner r("Data", body("db", GetParam(), 3), tmp_.path(), o);
    const std::vector<int> ids = r.next_ids();
    const std::vector<int> want = rank == 0 ? std::vector<int>{0, 2, 4} : std::vector<int>{1, 3, 1};
    EXPECT_EQ(ids, want) << "rank " << rank;
  }
  Options o;
  o.rank = 1;
  o.world_size = 2;
  Runner all("Data", body("db", GetParam(), 3, "shard: NONE"), tmp_.path(), o);
  EXPECT_EQ(all.next_ids(), (std::vector<int>{0, 1, 2}));
}

TEST_P(CaffeDataTest, RandSkipStartsAtAPlaceSetByTheSeed) {
  SKIP_WITHOUT_BACKEND(GetParam());
  write_indexed_db(tmp_.file("db"), GetParam(), 20);
  std::vector<int> firsts;
  for (int seed = 1; seed <= 6; ++seed) {
    Runner r("Data", body("db", GetParam(), 1, "rand_skip: 10 seed: " + std::to_string(seed)), tmp_.path());
    const int first = r.next_ids()[0];
    EXPECT_LT(first, 10);
    EXPECT_EQ(r.next_ids()[0], first + 1);
    Runner again("Data", body("db", GetParam(), 1, "rand_skip: 10 seed: " + std::to_string(seed)), tmp_.path());
    EXPECT_EQ(again.next_ids()[0], first);
    firsts.push_back(first);
  }
  EXPECT_NE(std::count(firsts.begin(), firsts.end(), firsts[0]), 6) << "rand_skip never moved the start";
}

TEST_P(CaffeDataTest, ResumeFromSavedStateRepeatsTheSameRandomBatches) {
  SKIP_WITHOUT_BACKEND(GetParam());
  write_indexed_db(tmp_.file("db"), GetParam(), 7);
  const std::string b = body("db", GetParam(), 3, "seed: 5 prefetch: 2", "crop_size: 2 mirror: true");
  Runner a("Data", b, tmp_.path());
  a.step();
  a.step();
  const std::string state = a.layer().save_state();
  std::vector<std::vector<float>> want;
  for (int i = 0; i < 3; ++i) want.push_back((a.step(), a.data()));
  Runner resumed("Data", b, tmp_.path());
  resumed.layer().load_state(state);
  for (int i = 0; i < 3; ++i) EXPECT_EQ((resumed.step(), resumed.data()), want[static_cast<size_t>(i)]) << i;

  Options other;
  other.rank = 1;
  other.world_size = 2;
  Runner wrong("Data", b, tmp_.path(), other);
  EXPECT_NE(error_of<Error>([&] { wrong.layer().load_state(state); }).find("same number of ranks"),
            std::string::npos);
}

TEST_P(CaffeDataTest, MissingDatabaseNamesThePathAndTheBackend) {
  SKIP_WITHOUT_BACKEND(GetParam());
  const std::string msg =
      error_of<IoError>([&] { Runner r("Data", body("nowhere_db", GetParam(), 2), tmp_.path()); });
  EXPECT_NE(msg.find(tmp_.file("nowhere_db")), std::string::npos) << msg;
  EXPECT_NE(msg.find(caffe::db_backend_name(GetParam())), std::string::npos) << msg;
  EXPECT_NE(msg.find("layer 'data' (Data)"), std::string::npos) << msg;
}

INSTANTIATE_TEST_SUITE_P(Backends, CaffeDataTest, ::testing::Values(DbBackend::kLmdb, DbBackend::kLeveldb),
                         [](const auto& info) { return std::string(caffe::db_backend_name(info.param)); });

TEST(CaffeDataErrors, TheOtherBackendsFolderGetsAHint) {
  SKIP_WITHOUT_BACKEND(DbBackend::kLmdb);
  SKIP_WITHOUT_BACKEND(DbBackend::kLeveldb);
  test::TempDir tmp("strata_caffe_data");
  write_indexed_db(tmp.file("train_lmdb"), DbBackend::kLmdb, 2);
  // Caffe's default backend is LEVELDB: a file that leaves it out and names an LMDB.
  const std::string msg = error_of<IoError>([&] {
    Runner r("Data", "data_param { source: \"train_lmdb\" batch_size: 2 }", tmp.path());
  });
  EXPECT_NE(msg.find("backend: LMDB"), std::string::npos) << msg;
}

TEST(CaffeDataErrors, RecordsOfAnotherSizeAndDamagedRecordsAreNamed) {
  SKIP_WITHOUT_BACKEND(DbBackend::kLmdb);
  test::TempDir tmp("strata_caffe_data");
  {
    auto db = caffe::create_db(tmp.file("db"), DbBackend::kLmdb);
    caffe::Datum d;
    d.channels = 1;
    d.height = 2;
    d.width = 2;
    d.data = std::string(4, '\1');
    db->put(key_of(0), caffe::serialize_datum(d));
    d.width = 3;
    d.data = std::string(6, '\1');
    db->put(key_of(1), caffe::serialize_datum(d));
    db->put(key_of(2), std::string("\x22\x10", 2));  // data field cut short
    db->commit();
  }
  Runner r("Data", body("db", DbBackend::kLmdb, 1), tmp.path());
  r.step();
  std::string msg = error_of<ShapeError>([&] { r.step(); });
  EXPECT_NE(msg.find("record '00000001'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the first record made [1, 2, 2]"), std::string::npos) << msg;

  Runner crop("Data", body("db", DbBackend::kLmdb, 1, "", "crop_size: 2"), tmp.path());
  crop.step();
  crop.step();
  msg = error_of<IoError>([&] { crop.step(); });
  EXPECT_NE(msg.find("record '00000002'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("malformed protobuf"), std::string::npos) << msg;
}

TEST(CaffeDataEncoded, PngRecordsAreDecodedToBgr) {
  SKIP_WITHOUT_BACKEND(DbBackend::kLmdb);
  if (!image_decoding_available() || !STRATA_TEST_HAVE_STB_WRITE) {
    GTEST_SKIP() << "strata was built without stb (apt-get install libstb-dev): no PNG decoding";
  }
#if STRATA_TEST_HAVE_STB_WRITE
  test::TempDir tmp("strata_caffe_data");
  // 2x1 RGB: red then blue, written as convert_imageset --encoded does (PNG bytes in data).
  const unsigned char rgb[] = {255, 0, 0, 0, 0, 255};
  std::string png;
  stbi_write_png_to_func(
      [](void* ctx, void* data, int size) { static_cast<std::string*>(ctx)->append(static_cast<char*>(data), size); },
      &png, 2, 1, 3, rgb, 6);
  {
    auto db = caffe::create_db(tmp.file("db"), DbBackend::kLmdb);
    caffe::Datum d;
    d.encoded = true;
    d.data = png;
    d.label = 3;
    db->put(key_of(0), caffe::serialize_datum(d));
    db->commit();
  }
  Runner r("Data", body("db", DbBackend::kLmdb, 1, "", "mean_value: 1 mean_value: 2 mean_value: 3"), tmp.path());
  EXPECT_EQ(r.step().shape(), (Shape{1, 3, 1, 2}));
  // BGR planes: B = [0, 255] - 1, G = [0, 0] - 2, R = [255, 0] - 3.
  EXPECT_EQ(r.data(), (std::vector<float>{-1, 254, -2, -2, 252, -3}));
  EXPECT_EQ(r.labels(), (std::vector<float>{3}));
  Runner gray("Data", body("db", DbBackend::kLmdb, 1, "", "force_gray: true"), tmp.path());
  EXPECT_EQ(gray.step().shape(), (Shape{1, 1, 1, 2}));
#endif
}

}  // namespace
}  // namespace strata
