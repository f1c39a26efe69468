// Caffe's DataTransformer (framework/caffe/caffe_transform.h) against values
// worked out by hand from data_transformer.cpp: centre crop offsets, mirror,
// mean subtraction (mean_file and mean_value) before the scale.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/caffe/caffe_transform.h"
#include "framework/error.h"
#include "tests/test_util.h"

namespace strata {
namespace {

using test::error_of;

// 2 channels x 3 rows x 4 columns, value = 100*c + 10*h + w.
caffe::Image sample_image() {
  caffe::Image img;
  img.channels = 2;
  img.height = 3;
  img.width = 4;
  for (int c = 0; c < 2; ++c)
    for (int h = 0; h < 3; ++h)
      for (int w = 0; w < 4; ++w) img.bytes.push_back(static_cast<uint8_t>(100 * c + 10 * h + w));
  return img;
}

TEST(CaffeTransform, CentreCropMeanValueThenScale) {
  caffe::Transform t;
  t.crop_size = 2;
  t.crop = CropMode::kCenter;
  t.mean_values = {1.0f, 2.0f};
  t.scale = 0.5f;
  std::vector<float> out(2 * 2 * 2);
  caffe::apply(t, sample_image(), nullptr, out.data(), "img");
  // h_off = (3 - 2) / 2 = 0, w_off = (4 - 2) / 2 = 1.
  const std::vector<float> want = {(1 - 1) * 0.5f,   (2 - 1) * 0.5f,   (11 - 1) * 0.5f,  (12 - 1) * 0.5f,
                                   (101 - 2) * 0.5f, (102 - 2) * 0.5f, (111 - 2) * 0.5f, (112 - 2) * 0.5f};
  EXPECT_EQ(out, want);
}

TEST(CaffeTransform, MeanFileIsIndexedBeforeTheCropAndOneMeanValueServesAllChannels) {
  caffe::Transform t;
  t.crop_size = 2;
  t.mean = Tensor({2, 3, 4});
  for (int64_t i = 0; i < t.mean.numel(); ++i) t.mean.data<float>()[i] = static_cast<float>(i);  // mean[c][h][w]
  t.scale = 2.0f;
  std::vector<float> out(8);
  caffe::apply(t, sample_image(), nullptr, out.data(), "img");
  // Element (c, h, w) of the output is pixel (c, h, w + 1) minus mean[(c*3 + h)*4 + w + 1].
  std::vector<float> want;
  for (int c = 0; c < 2; ++c)
    for (int h = 0; h < 2; ++h)
      for (int w = 0; w < 2; ++w) {
        want.push_back((100.0f * c + 10.0f * h + (w + 1) - static_cast<float>((c * 3 + h) * 4 + w + 1)) * 2.0f);
      }
  EXPECT_EQ(out, want);

  caffe::Transform one;
  one.mean_values = {5.0f};
  std::vector<float> full(24);
  caffe::apply(one, sample_image(), nullptr, full.data(), "img");
  EXPECT_EQ(full[0], -5.0f);
  EXPECT_EQ(full[12], 95.0f);
}

TEST(CaffeTransform, MirrorFlipsColumnsAndRandomCropCoversEveryOffset) {
  caffe::Transform t;
  t.mirror = MirrorMode::kRandom;
  Rng rng(3);
  std::set<float> first_values;
  for (int i = 0; i < 64; ++i) {
    std::vector<float> out(24);
    caffe::apply(t, sample_image(), &rng, out.data(), "img");
    first_values.insert(out[0]);
    if (out[0] == 3.0f) {  // mirrored: row 0 reads 3 2 1 0
      EXPECT_EQ(out[1], 2.0f);
      EXPECT_EQ(out[3], 0.0f);
      EXPECT_EQ(out[12], 103.0f);
    }
  }
  EXPECT_EQ(first_values, (std::set<float>{0.0f, 3.0f}));

  caffe::Transform crop;
  crop.crop_size = 2;
  crop.crop = CropMode::kRandom;
  std::set<float> corners;
  for (int i = 0; i < 200; ++i) {
    std::vector<float> out(8);
    caffe::apply(crop, sample_image(), &rng, out.data(), "img");
    corners.insert(out[0]);
  }
  // Rows 0..1, columns 0..2: every corner a 2x2 crop of 3x4 can have.
  EXPECT_EQ(corners, (std::set<float>{0, 1, 2, 10, 11, 12}));
}

TEST(CaffeTransform, FloatDataAndMismatchesAreNamed) {
  caffe::Datum d;
  d.channels = 1;
  d.height = 1;
  d.width = 2;
  d.float_data = {0.5f, 1.5f};
  const caffe::Image img = caffe::from_datum(d, caffe::ColorMode::kNative, "rec");
  caffe::Transform t;
  t.scale = 2.0f;
  std::vector<float> out(2);
  caffe::apply(t, img, nullptr, out.data(), "rec");
  EXPECT_EQ(out, (std::vector<float>{1.0f, 3.0f}));

  d.float_data.pop_back();
  EXPECT_NE(error_of<IoError>([&] { caffe::from_datum(d, caffe::ColorMode::kNative, "record '7'"); })
                .find("record '7': Datum float_data holds 1 values"),
            std::string::npos);
  t.mean_values = {1, 2, 3};
  EXPECT_NE(error_of<ShapeError>([&] { caffe::apply(t, img, nullptr, out.data(), "rec"); })
                .find("3 mean_value entries but the image has 1 channels"),
            std::string::npos);
  caffe::Transform big;
  big.crop_size = 5;
  EXPECT_NE(error_of<ShapeError>([&] { caffe::apply(big, img, nullptr, out.data(), "rec"); })
                .find("smaller than transform_param crop_size 5"),
            std::string::npos);
}

TEST(CaffeTransform, RgbBecomesBgrOrGrayAsOpenCvDecodes) {
  RgbImage rgb;
  rgb.width = 1;
  rgb.height = 1;
  rgb.pixels = {200, 100, 50};
  rgb.file_channels = 3;
  const caffe::Image bgr = caffe::from_rgb(rgb, caffe::ColorMode::kNative);
  EXPECT_EQ(bgr.bytes, (std::vector<uint8_t>{50, 100, 200}));
  const caffe::Image gray = caffe::from_rgb(rgb, caffe::ColorMode::kGray);
  // (50*1868 + 100*9617 + 200*4899 + 8192) >> 14 = 124 (0.114*50 + 0.587*100 + 0.299*200 = 124.2)
  EXPECT_EQ(gray.bytes, (std::vector<uint8_t>{124}));
  rgb.file_channels = 1;
  rgb.pixels = {9, 9, 9};
  EXPECT_EQ(caffe::from_rgb(rgb, caffe::ColorMode::kNative).channels, 1);
  EXPECT_EQ(caffe::from_rgb(rgb, caffe::ColorMode::kColor).channels, 3);
}

TEST(CaffeTransform, ReadTransformTakesCaffeKeysAndPhase) {
  const ConfigNode root = parse_config_text(
      "transform_param { scale: 0.00390625 mirror: true crop_size: 3 mean_value: 104 mean_value: 117 "
      "mean_value: 123 force_color: true }",
      "t.prototxt");
  const ConfigNode& p = root.block("transform_param");
  const caffe::Transform train = caffe::read_transform(p, Phase::kTrain, ".", "layer");
  EXPECT_EQ(train.crop, CropMode::kRandom);
  EXPECT_EQ(train.mirror, MirrorMode::kRandom);
  EXPECT_EQ(train.mean_values, (std::vector<float>{104, 117, 123}));
  EXPECT_EQ(train.color, caffe::ColorMode::kColor);
  EXPECT_FLOAT_EQ(train.scale, 0.00390625f);
  EXPECT_EQ(caffe::read_transform(p, Phase::kTest, ".", "layer").crop, CropMode::kCenter);

  const ConfigNode both = parse_config_text("transform_param { force_color: true force_gray: true }", "t");
  EXPECT_NE(error_of<ConfigError>([&] {
              caffe::read_transform(both.block("transform_param"), Phase::kTrain, ".", "layer 'd'");
            }).find("both force_color and force_gray"),
            std::string::npos);
  const ConfigNode missing = parse_config_text("transform_param { mean_file: \"nope.binaryproto\" }", "t");
  const std::string msg = error_of<IoError>(
      [&] { caffe::read_transform(missing.block("transform_param"), Phase::kTrain, "/x", "layer 'd'"); });
  EXPECT_NE(msg.find("layer 'd': transform_param mean_file"), std::string::npos) << msg;
  EXPECT_NE(msg.find("/x/nope.binaryproto"), std::string::npos) << msg;
}

}  // namespace
}  // namespace strata
