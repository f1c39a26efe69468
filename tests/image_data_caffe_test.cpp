// ImageData in Caffe's spelling (layers/image_data.h): new_height /
// new_width (OpenCV's bilinear resize), is_color, BGR order and Caffe's
// transform, worked out by hand; the first image setting the size; keys
// of the two conventions mixed. Skipped without stb (no PNG codec).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "framework/caffe/caffe_transform.h"
#include "framework/data/image_decode.h"
#include "framework/error.h"
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

using data_layers_test::Runner;
using test::error_of;

class ImageDataCaffeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!image_decoding_available() || !STRATA_TEST_HAVE_STB_WRITE) {
      GTEST_SKIP() << "strata was built without stb (apt-get install libstb-dev): no PNG codec";
    }
  }
  // An RGB PNG of width x height from interleaved pixels.
  void write_png(const std::string& name, int width, int height, const std::vector<unsigned char>& rgb) {
#if STRATA_TEST_HAVE_STB_WRITE
    ASSERT_TRUE(stbi_write_png(tmp_.file(name).c_str(), width, height, 3, rgb.data(), width * 3)) << name;
#else
    (void)name, (void)width, (void)height, (void)rgb;
#endif
  }
  test::TempDir tmp_{"strata_image_caffe"};
};

TEST_F(ImageDataCaffeTest, NewSizeResizesBilinearlyThenCaffesTransformInBgr) {
  // 2x1: a black pixel, then (R 200, G 100, B 40).
  write_png("a.png", 2, 1, {0, 0, 0, 200, 100, 40});
  test::write_text(tmp_.file("list.txt"), "a.png 7\n");
  Runner r("ImageData",
           "image_data_param { source: \"list.txt\" batch_size: 1 new_height: 1 new_width: 4 } "
           "transform_param { mean_value: 10 mean_value: 20 mean_value: 30 scale: 0.5 }",
           tmp_.path());
  EXPECT_EQ(r.step().shape(), (Shape{1, 3, 1, 4}));
  // OpenCV INTER_LINEAR 2 -> 4 columns: [a, 0.75a + 0.25b, 0.25a + 0.75b, b] (weights 1536 and 512 of
  // 2048, exact here): B 40 -> [0, 10, 30, 40], G 100 -> [0, 25, 75, 100], R 200 -> [0, 50, 150, 200].
  const std::vector<float> want = {(0 - 10) * 0.5f,   (10 - 10) * 0.5f,  (30 - 10) * 0.5f,  (40 - 10) * 0.5f,
                                   (0 - 20) * 0.5f,   (25 - 20) * 0.5f,  (75 - 20) * 0.5f,  (100 - 20) * 0.5f,
                                   (0 - 30) * 0.5f,   (50 - 30) * 0.5f,  (150 - 30) * 0.5f, (200 - 30) * 0.5f};
  EXPECT_EQ(r.data(), want);
  EXPECT_EQ(r.labels(), (std::vector<float>{7}));
}

TEST_F(ImageDataCaffeTest, IsColorFalseGivesOneGrayChannelAndTheFirstImageSetsTheSize) {
  write_png("a.png", 3, 2, std::vector<unsigned char>(18, 90));
  write_png("b.png", 2, 2, std::vector<unsigned char>(12, 90));
  test::write_text(tmp_.file("list.txt"), "a.png 0\nb.png 1\n");
  Runner r("ImageData", "image_data_param { source: \"list.txt\" batch_size: 1 is_color: false }", tmp_.path());
  EXPECT_EQ(r.step().shape(), (Shape{1, 1, 2, 3}));
  EXPECT_EQ(r.data(), std::vector<float>(6, 90.0f));  // 0-255, unscaled, as Caffe serves bytes
  const std::string msg = error_of<ConfigError>([&] { r.step(); });
  EXPECT_NE(msg.find("b.png"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the first image made 3x2"), std::string::npos) << msg;
}

TEST_F(ImageDataCaffeTest, CropIsCentredInTestAndTheConventionsDoNotMix) {
  std::vector<unsigned char> px;
  for (int i = 0; i < 16; ++i) px.insert(px.end(), {static_cast<unsigned char>(i), 0, 0});  // R = index
  write_png("a.png", 4, 4, px);
  test::write_text(tmp_.file("list.txt"), "a.png 0\n");
  data_layers_test::Options test_phase;
  test_phase.phase = Phase::kTest;
  Runner r("ImageData",
           "image_data_param { source: \"list.txt\" batch_size: 1 } transform_param { crop_size: 2 mean_value: 0 }",
           tmp_.path(), test_phase);
  // Centre (4 - 2) / 2 = 1: rows 1..2, columns 1..2 of R (the third plane in BGR).
  r.step();
  const std::vector<float> d = r.data();
  EXPECT_EQ(std::vector<float>(d.begin() + 8, d.end()), (std::vector<float>{5, 6, 9, 10}));

  const std::string msg = error_of<ConfigError>([&] {
    Runner bad("ImageData",
               "image_data_param { source: \"list.txt\" batch_size: 1 new_height: 4 new_width: 4 } "
               "transform_param { preset: IMAGENET }",
               tmp_.path());
  });
  EXPECT_NE(msg.find("use one convention"), std::string::npos) << msg;
}

}  // namespace
}  // namespace strata
