// Decoding against PIL: every file in tests/golden/decode/ (written by
// tests/golden/make_decode_golden.py) must decode to exactly the pixels of
// PIL's Image.open(path).convert("RGB"): JPEG (4:2:0, 4:2:2, 4:4:4, gray,
// progressive, CMYK) through libjpeg, and the PNGs where PIL's conversion
// is its own (16-bit gray clipped, 16-bit colour by its high byte, palettes
// with transparency, gray+alpha, 1- and 2-bit gray). Corrupt and truncated
// JPEGs are errors naming the file.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "framework/data/image_decode.h"
#include "framework/io/file_util.h"
#include "framework/io/npy.h"
#include "tests/test_util.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

const std::string kDecode = std::string(STRATA_SOURCE_DIR) + "/tests/golden/decode/";

std::vector<std::string> golden_files() {
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(kDecode)) {
    const std::string name = e.path().filename().string();
    if (name.size() < 8 || name.compare(name.size() - 8, 8, ".rgb.npy") != 0) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool is_jpeg(const std::string& name) { return name.size() > 4 && name.compare(name.size() - 4, 4, ".jpg") == 0; }

TEST(ImageDecode, EveryGoldenFileDecodesToPilsPixelsExactly) {
  ASSERT_TRUE(image_decoding_available()) << "built without stb (libstb-dev)";
  const std::vector<std::string> files = golden_files();
  ASSERT_GE(files.size(), 17u) << "tests/golden/decode/ is incomplete; run tests/golden/make_decode_golden.py";
  const bool jpeg_exact = std::string(jpeg_decoder_name()) == "libjpeg";
  // stb's IDCT and chroma upsampling are its own: 1-2 levels off PIL's at
  // 4:2:0 and 4:4:4, up to 11 at 4:2:2 (measured on these files).
  const int stb_levels = 12;
  if (!jpeg_exact) {
    std::printf("[ note     ] built without libjpeg: JPEG is decoded by stb, compared within %d levels\n", stb_levels);
  }
  for (const std::string& file : files) {
    SCOPED_TRACE(file);
    const std::string stem = file.substr(0, file.find_last_of('.'));
    const NpyArray want = read_npy(kDecode + stem + ".rgb.npy");
    ASSERT_EQ(want.shape.size(), 3u);
    const RgbImage got = decode_image_file(kDecode + file);
    ASSERT_EQ(got.height, want.shape[0]);
    ASSERT_EQ(got.width, want.shape[1]);
    ASSERT_EQ(got.pixels.size(), static_cast<size_t>(want.numel()));
    const uint8_t* w = want.as<uint8_t>();
    int64_t differ = 0, worst = 0, first = -1;
    for (size_t i = 0; i < got.pixels.size(); ++i) {
      const int d = std::abs(int(got.pixels[i]) - int(w[i]));
      if (d && first < 0) first = static_cast<int64_t>(i);
      differ += d != 0;
      worst = std::max<int64_t>(worst, d);
    }
    if (is_jpeg(file) && !jpeg_exact) {
      EXPECT_LE(worst, stb_levels);
      continue;
    }
    EXPECT_EQ(differ, 0) << differ << " of " << got.pixels.size() << " values differ from PIL's, by up to " << worst
                         << " levels; the first at value " << first << " (y " << first / 3 / got.width << ", x "
                         << first / 3 % got.width << ", channel " << first % 3 << "): "
                         << (first >= 0 ? int(got.pixels[first]) : 0) << " against PIL's "
                         << (first >= 0 ? int(w[first]) : 0);
  }
}

TEST(ImageDecode, CorruptAndTruncatedJpegsAreErrorsNamingTheFile) {
  test::TempDir dir("strata_jpeg");
  const std::string good = read_file_bytes(kDecode + "jpeg_420.jpg");
  // A JPEG cut inside its image data: libjpeg alone would fill the rest with
  // grey and go on; PIL refuses it.
  test::write_text(dir.file("cut.jpg"), good.substr(0, good.size() * 4 / 5));
  if (std::string(jpeg_decoder_name()) == "libjpeg") {
    test::expect_error<IoError>([&] { decode_image_file(dir.file("cut.jpg")); },
                                {dir.file("cut.jpg"), "ends before the image does (truncated)"});
  }
  // Cut inside its header.
  test::write_text(dir.file("header.jpg"), good.substr(0, 300));
  test::expect_error<IoError>([&] { decode_image_file(dir.file("header.jpg")); },
                              {dir.file("header.jpg"), "cannot decode"});
  // A JPEG signature and garbage.
  test::write_text(dir.file("garbage.jpg"), std::string("\xFF\xD8\xFF\xE0") + std::string(200, '\x37'));
  test::expect_error<IoError>([&] { decode_image_file(dir.file("garbage.jpg")); },
                              {dir.file("garbage.jpg"), "cannot decode"});
  // A file named .png holding a JPEG is read as the JPEG it is (as PIL reads by content).
  test::write_text(dir.file("really_a_jpeg.png"), good);
  const RgbImage by_content = decode_image_file(dir.file("really_a_jpeg.png"));
  EXPECT_EQ(by_content.pixels, decode_image_file(kDecode + "jpeg_420.jpg").pixels);
}

}  // namespace
}  // namespace strata
