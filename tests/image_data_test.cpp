// The image pipeline: decoding (stb) and the transforms against PIL and
// torchvision (tests/golden/make_image_golden.py), image sources, the
// threaded loader (determinism, shuffling, bad images) and the ImageData
// layer (labels, sharding, exact resume).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "framework/io/npy.h"
#include "layers/image_data.h"
#include "framework/data/image_decode.h"
#include "framework/data/image_loader.h"
#include "framework/data/image_transform.h"
#include "tests/test_util.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

const std::string kImages = std::string(STRATA_SOURCE_DIR) + "/tests/golden/images/";
const std::string kGolden = std::string(STRATA_SOURCE_DIR) + "/tests/golden/image/";

struct GoldenImage {
  std::string name;
  std::string file;
  bool jpeg;
};
const std::vector<GoldenImage>& golden_images() {
  static const std::vector<GoldenImage> images = {
      {"rgb", "rgb.png", false},   {"photo", "photo.jpg", true},   {"tiny", "tiny.jpg", true},
      {"small", "small.bmp", false}, {"gray", "gray.png", false}, {"alpha", "alpha.png", false}};
  return images;
}

// libjpeg decodes JPEG as PIL does (tests/image_decode_test.cpp covers
// every kind of JPEG). A build without libjpeg decodes JPEG with stb, whose
// IDCT and chroma upsampling differ: measured on these images (4:2:0,
// quality 90), at most 2 levels on any pixel, 0.06-0.07 levels on average;
// the bounds leave one level of margin.
bool jpeg_exact() { return std::string(jpeg_decoder_name()) == "libjpeg"; }
int jpeg_max_levels() { return jpeg_exact() ? 0 : 3; }
double jpeg_mean_levels() { return jpeg_exact() ? 0.0 : 0.25; }

RgbImage golden_decoded(const std::string& name, const std::string& kind = "decoded") {
  const NpyArray a = read_npy(kGolden + name + "." + kind + ".npy");
  EXPECT_EQ(a.shape.size(), 3u);
  RgbImage img;
  img.height = static_cast<int>(a.shape[0]);
  img.width = static_cast<int>(a.shape[1]);
  img.pixels.assign(a.as<uint8_t>(), a.as<uint8_t>() + a.numel());
  return img;
}

std::vector<float> golden_floats(const std::string& name, const std::string& kind, Shape* shape = nullptr) {
  const NpyArray a = read_npy(kGolden + name + "." + kind + ".npy");
  if (shape) *shape = a.shape;
  return std::vector<float>(a.as<float>(), a.as<float>() + a.numel());
}

std::vector<float> run_transform(const RgbImage& img, const ImageTransform& t) {
  int w = 0, h = 0;
  transform_output_size(t, img.width, img.height, &w, &h);
  std::vector<float> out(static_cast<size_t>(3 * w * h));
  Rng rng(5);
  apply_transform(img, t, &rng, out.data());
  return out;
}

ImageTransform small_preset(TransformPreset preset) {
  ImageTransform t = preset_transform(preset);
  t.resize = 20;
  t.crop_height = t.crop_width = 16;
  return t;
}

// ---- decoding ------------------------------------------------------------------

TEST(ImageDecode, MatchesPilExactly) {
  ASSERT_TRUE(image_decoding_available()) << "built without stb (libstb-dev)";
  for (const GoldenImage& g : golden_images()) {
    SCOPED_TRACE(g.file);
    const RgbImage got = decode_image_file(kImages + g.file);
    const RgbImage want = golden_decoded(g.name);
    ASSERT_EQ(got.width, want.width);
    ASSERT_EQ(got.height, want.height);
    ASSERT_EQ(got.pixels.size(), want.pixels.size());
    int max_diff = 0;
    double sum = 0;
    for (size_t i = 0; i < got.pixels.size(); ++i) {
      const int d = std::abs(int(got.pixels[i]) - int(want.pixels[i]));
      max_diff = std::max(max_diff, d);
      sum += d;
    }
    const double mean = sum / static_cast<double>(got.pixels.size());
    if (g.jpeg) {
      EXPECT_LE(max_diff, jpeg_max_levels());
      EXPECT_LE(mean, jpeg_mean_levels());
      std::printf("[ measure  ] %s: %s vs PIL JPEG decoding differ by max %d, mean %.3f levels\n", g.file.c_str(),
                  jpeg_decoder_name(), max_diff, mean);
    } else {
      EXPECT_EQ(max_diff, 0);
    }
  }
}

TEST(ImageDecode, UnreadableFilesNameTheirPath) {
  TempDir dir("strata_image");
  test::write_text(dir.file("broken.jpg"), "this is not a JPEG");
  test::expect_error<IoError>([&] { decode_image_file(dir.file("broken.jpg")); }, {dir.file("broken.jpg"), "decode"});
  test::expect_error<IoError>([&] { decode_image_file(dir.file("missing.png")); }, {dir.file("missing.png")});
  test::write_text(dir.file("empty.png"), "");
  test::expect_error<IoError>([&] { decode_image_file(dir.file("empty.png")); }, {dir.file("empty.png"), "empty"});
}

// ---- transforms ----------------------------------------------------------------

TEST(ImageTransform, ResizeMatchesPilBitForBit) {
  for (const GoldenImage& g : golden_images()) {
    SCOPED_TRACE(g.file);
    const RgbImage src = golden_decoded(g.name);  // PIL's pixels, so only the resampling is compared
    for (auto [kind, interp] : {std::pair{"bilinear20", Interpolation::kBilinear},
                                std::pair{"bicubic20", Interpolation::kBicubic}}) {
      SCOPED_TRACE(kind);
      const RgbImage want = golden_decoded(g.name, kind);
      int w = 0, h = 0;
      resized_size(src.width, src.height, 20, &w, &h);
      ASSERT_EQ(w, want.width);
      ASSERT_EQ(h, want.height);
      const RgbImage got = resize_image(src, w, h, interp);
      ASSERT_EQ(got.pixels.size(), want.pixels.size());
      int mismatches = 0;
      for (size_t i = 0; i < got.pixels.size(); ++i) mismatches += got.pixels[i] != want.pixels[i];
      EXPECT_EQ(mismatches, 0);
    }
  }
}

TEST(ImageTransform, PresetsMatchTorchvisionOnPilPixels) {
  for (const GoldenImage& g : golden_images()) {
    SCOPED_TRACE(g.file);
    const RgbImage src = golden_decoded(g.name);
    test::expect_near(run_transform(src, small_preset(TransformPreset::kImagenet)), golden_floats(g.name, "imagenet"),
                      1e-5f);
    test::expect_near(run_transform(src, small_preset(TransformPreset::kVitEval)), golden_floats(g.name, "vit"), 1e-5f);
    ImageTransform pad = preset_transform(TransformPreset::kNone);
    pad.crop_height = 31;
    pad.crop_width = 27;
    test::expect_near(run_transform(src, pad), golden_floats(g.name, "padcrop"), 1e-6f);
  }
}

TEST(ImageTransform, DecodedFilesMatchTorchvision) {
  for (const GoldenImage& g : golden_images()) {
    SCOPED_TRACE(g.file);
    const RgbImage src = decode_image_file(kImages + g.file);
    for (auto [kind, preset] : {std::pair{"imagenet", TransformPreset::kImagenet},
                                std::pair{"vit", TransformPreset::kVitEval}}) {
      const std::vector<float> got = run_transform(src, small_preset(preset));
      const std::vector<float> want = golden_floats(g.name, kind);
      const float std_min = preset == TransformPreset::kImagenet ? 0.224f : 0.5f;
      // Resampling spreads a decoding difference but cannot grow it (bicubic overshoots by a level at most).
      const float tol = g.jpeg && !jpeg_exact() ? (jpeg_max_levels() + 1) / 255.0f / std_min : 1e-5f;
      test::expect_near(got, want, tol);
    }
  }
}

TEST(ImageTransform, CenterCropRoundsHalfToEvenLikePython) {
  EXPECT_EQ(center_crop_box(25, 25, 16, 16).top, 4);  // round(4.5) == 4
  EXPECT_EQ(center_crop_box(27, 27, 16, 16).top, 6);  // round(5.5) == 6
  EXPECT_EQ(center_crop_box(19, 19, 31, 31).top, -6);
  EXPECT_EQ(center_crop_box(20, 20, 31, 31).top, -5);  // (31 - 20) // 2
}

TEST(ImageTransform, RandomCropAndMirrorStayInsideAndDependOnlyOnTheRng) {
  const RgbImage src = golden_decoded("rgb");
  ImageTransform t = small_preset(TransformPreset::kImagenet);
  t.crop = CropMode::kRandom;
  t.mirror = MirrorMode::kRandom;
  std::set<std::vector<float>> distinct;
  for (uint64_t seed = 0; seed < 12; ++seed) {
    std::vector<float> a(3 * 16 * 16), b(3 * 16 * 16);
    Rng r1(seed), r2(seed);
    apply_transform(src, t, &r1, a.data());
    apply_transform(src, t, &r2, b.data());
    EXPECT_EQ(a, b);
    distinct.insert(a);
  }
  EXPECT_GT(distinct.size(), 4u);
}

// ---- sources -----------------------------------------------------------------------

// dir/<class>/<file> for the golden images: cat gets rgb.png and photo.jpg, dog the rest.
void make_class_folder(const std::string& root) {
  fs::create_directories(root + "/dog/nested");
  fs::create_directories(root + "/cat");
  fs::copy_file(kImages + "rgb.png", root + "/cat/b.png");
  fs::copy_file(kImages + "photo.jpg", root + "/cat/a.jpg");
  fs::copy_file(kImages + "small.bmp", root + "/dog/c.bmp");
  fs::copy_file(kImages + "gray.png", root + "/dog/nested/d.png");
  fs::copy_file(kImages + "alpha.png", root + "/dog/e.png");
  test::write_text(root + "/dog/notes.txt", "not an image, ignored by extension");
}

TEST(ImageSources, ClassFolderSortsClassesAndFiles) {
  TempDir dir("strata_image");
  make_class_folder(dir.path());
  std::vector<std::string> classes;
  const std::vector<ImageItem> items = list_image_folder(dir.path(), &classes);
  EXPECT_EQ(classes, (std::vector<std::string>{"cat", "dog"}));
  std::vector<std::string> rel;
  std::vector<int> labels;
  for (const auto& it : items) {
    rel.push_back(fs::relative(it.path, dir.path()).string());
    labels.push_back(it.label);
  }
  EXPECT_EQ(rel, (std::vector<std::string>{"cat/a.jpg", "cat/b.png", "dog/c.bmp", "dog/e.png", "dog/nested/d.png"}));
  EXPECT_EQ(labels, (std::vector<int>{0, 0, 1, 1, 1}));

  TempDir empty("strata_image");
  test::expect_error<ConfigError>([&] { list_image_folder(empty.path(), nullptr); }, {"no class subfolders"});
}

TEST(ImageSources, EachRealFolderIsReadOnceWhateverTheLinks) {
  TempDir dir("strata_image");
  make_class_folder(dir.path());
  // A loop (dog/nested/up -> dog) and a second way into cat from dog: without
  // the check, the loop is followed until the path is too long and cat's
  // images come again labelled dog.
  fs::create_directory_symlink("..", dir.file("dog/nested/up"));
  fs::create_directory_symlink("../cat", dir.file("dog/cats_too"));
  ImageWalkNotes notes;
  const std::vector<ImageItem> items = list_image_folder(dir.path(), nullptr, &notes);
  std::vector<std::string> rel;
  for (const auto& it : items) {
    rel.push_back(fs::relative(it.path, dir.path()).string() + ":" + std::to_string(it.label));
  }
  EXPECT_EQ(rel, (std::vector<std::string>{"cat/a.jpg:0", "cat/b.png:0", "dog/c.bmp:1", "dog/e.png:1",
                                           "dog/nested/d.png:1"}));
  ASSERT_EQ(notes.repeated_folders.size(), 2u);
  EXPECT_EQ(notes.repeated_folders[0], dir.file("dog/cats_too") + " -> " + fs::canonical(dir.file("cat")).string());
  EXPECT_EQ(notes.repeated_folders[1], dir.file("dog/nested/up") + " -> " + fs::canonical(dir.file("dog")).string());
  const std::vector<std::string> lines = notes.lines();
  ASSERT_EQ(lines.size(), 2u);  // the skipped notes.txt, and the links
  EXPECT_NE(lines[1].find("2 folder links lead to a folder already read"), std::string::npos) << lines[1];

  // A loop straight back to the folder walked.
  fs::create_directory_symlink(".", dir.file("cat/self"));
  EXPECT_EQ(walk_images(dir.file("cat")).size(), 2u);
}

TEST(ImageSources, FilesInOtherFormatsAreCountedAndNamed) {
  TempDir dir("strata_image");
  fs::create_directories(dir.file("imgs/deeper"));
  fs::copy_file(kImages + "rgb.png", dir.file("imgs/a.png"));
  for (const char* name : {"imgs/b.webp", "imgs/deeper/c.webp", "imgs/d.TIFF", "imgs/deeper/README", "imgs/f.avif"}) {
    test::write_text(dir.file(name), "x");
  }
  ImageWalkNotes notes;
  EXPECT_EQ(walk_images(dir.file("imgs"), &notes).size(), 1u);
  EXPECT_EQ(notes.skipped_by_extension, (std::map<std::string, int64_t>{{".webp", 2}, {".tiff", 1}, {"", 1},
                                                                          {".avif", 1}}));
  const std::vector<std::string> lines = notes.lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("skipped 5 files in formats strata does not read: 2 .webp, 1 .avif, 1 .tiff, 1 without "
                          "extension (first: " + dir.file("imgs/b.webp") + ";"),
            std::string::npos)
      << lines[0];
  ImageWalkNotes none;
  walk_images(kImages, &none);
  EXPECT_TRUE(none.lines().empty());
}

TEST(ImageSources, ListFileWithRootFolderAndComments) {
  TempDir dir("strata_image");
  test::write_text(dir.file("list.txt"), "# path label\nrgb.png 3\n\n  small.bmp\t7  \nfolder with space/x.png 2\n");
  const std::vector<ImageItem> items = read_image_list(dir.file("list.txt"), "/data/imgs");
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0].path, "/data/imgs/rgb.png");
  EXPECT_EQ(items[0].label, 3);
  EXPECT_EQ(items[1].path, "/data/imgs/small.bmp");
  EXPECT_EQ(items[1].label, 7);
  EXPECT_EQ(items[2].path, "/data/imgs/folder with space/x.png");
  // Without root_folder, relative paths are relative to the list file.
  EXPECT_EQ(read_image_list(dir.file("list.txt"), "")[0].path, dir.file("rgb.png"));
  test::write_text(dir.file("nolabel.txt"), "a.png\n/abs/b.png\n");
  const auto bare = read_image_list(dir.file("nolabel.txt"), "");
  EXPECT_EQ(bare[0].label, -1);
  EXPECT_EQ(bare[1].path, "/abs/b.png");
  test::write_text(dir.file("neg.txt"), "a.png -1\n");
  test::expect_error<ConfigError>([&] { read_image_list(dir.file("neg.txt"), ""); }, {"neg.txt:1", "label"});
}

// ---- the loader ------------------------------------------------------------------

std::vector<ImageItem> golden_items(int copies) {
  std::vector<ImageItem> items;
  for (int c = 0; c < copies; ++c) {
    int label = 0;
    for (const GoldenImage& g : golden_images()) items.push_back({kImages + g.file, label++});
  }
  return items;
}

ImageLoaderOptions loader_options(int64_t batch, int threads) {
  ImageLoaderOptions o;
  o.batch_size = batch;
  o.threads = threads;
  o.out_height = o.out_width = 16;
  o.seed = 42;
  return o;
}

ImageTransform train_transform() {
  ImageTransform t = small_preset(TransformPreset::kImagenet);
  t.crop = CropMode::kRandom;
  t.mirror = MirrorMode::kRandom;
  return t;
}

std::vector<ImageBatch> read_batches(ImageLoader& loader, int n) {
  std::vector<ImageBatch> out(static_cast<size_t>(n));
  for (auto& b : out) EXPECT_TRUE(loader.next(b));
  return out;
}

TEST(ImageLoader, SameBatchesForAnyThreadCountAndPrefetch) {
  auto opts = loader_options(4, 1);
  opts.shuffle = ShuffleMode::kOn;
  ImageLoader one(golden_items(2), train_transform(), opts, "t");
  opts.threads = 3;
  opts.prefetch = 5;
  ImageLoader three(golden_items(2), train_transform(), opts, "t");
  const auto a = read_batches(one, 7);  // 28 samples: two epochs and a bit
  const auto b = read_batches(three, 7);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].items, b[i].items) << "batch " << i;
    EXPECT_EQ(a[i].data, b[i].data) << "batch " << i;
    EXPECT_EQ(a[i].labels, b[i].labels) << "batch " << i;
  }
}

TEST(ImageLoader, ShufflesEachEpochDifferentlyAndCoversEverySample) {
  auto opts = loader_options(6, 2);
  opts.shuffle = ShuffleMode::kOn;
  ImageLoader loader(golden_items(2), small_preset(TransformPreset::kImagenet), opts, "t");
  std::vector<int64_t> e0 = loader.epoch_order(0), e1 = loader.epoch_order(1);
  EXPECT_NE(e0, e1);
  std::vector<int64_t> seq;
  for (const auto& b : read_batches(loader, 4)) seq.insert(seq.end(), b.items.begin(), b.items.end());
  EXPECT_EQ(std::vector<int64_t>(seq.begin(), seq.begin() + 12), e0);
  EXPECT_EQ(std::vector<int64_t>(seq.begin() + 12, seq.end()), e1);
  std::sort(e0.begin(), e0.end());
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(e0[static_cast<size_t>(i)], i);
  // Without shuffle the order is the item order, every epoch.
  opts.shuffle = ShuffleMode::kOff;
  ImageLoader plain(golden_items(1), small_preset(TransformPreset::kImagenet), opts, "t");
  EXPECT_EQ(plain.epoch_order(3), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
}

TEST(ImageLoader, RandomTransformDiffersBetweenEpochs) {
  auto opts = loader_options(6, 2);
  ImageLoader loader(golden_items(1), train_transform(), opts, "t");
  const auto b = read_batches(loader, 2);
  EXPECT_EQ(b[0].items, b[1].items);
  EXPECT_NE(b[0].data, b[1].data);
}

TEST(ImageLoader, OncePassEndsWithAShortBatch) {
  auto opts = loader_options(4, 2);
  opts.epochs = EpochMode::kOnce;
  ImageLoader loader(golden_items(1), small_preset(TransformPreset::kImagenet), opts, "t");
  ImageBatch b;
  ASSERT_TRUE(loader.next(b));
  EXPECT_EQ(b.rows, 4);
  ASSERT_TRUE(loader.next(b));
  EXPECT_EQ(b.rows, 2);
  EXPECT_EQ(b.items[0], 4);
  EXPECT_EQ(b.items[1], 5);
  EXPECT_FALSE(loader.next(b));
  EXPECT_FALSE(loader.next(b));
}

TEST(ImageLoader, UnreadableImageIsAnErrorNamingItsPath) {
  TempDir dir("strata_image");
  test::write_text(dir.file("bad.png"), "garbage");
  auto items = golden_items(1);
  items.insert(items.begin() + 2, {dir.file("bad.png"), 0});
  ImageLoader loader(items, small_preset(TransformPreset::kImagenet), loader_options(4, 2), "layer 'data'");
  ImageBatch b;
  test::expect_error<IoError>([&] { loader.next(b); }, {"layer 'data'", dir.file("bad.png")});
  test::expect_error<IoError>([&] { loader.next(b); }, {dir.file("bad.png")});  // stays failed
}

TEST(ImageLoader, SkipsAndCountsUnreadableImages) {
  TempDir dir("strata_image");
  test::write_text(dir.file("bad1.png"), "garbage");
  test::write_text(dir.file("bad2.jpg"), "");
  auto items = golden_items(1);
  items.insert(items.begin() + 1, {dir.file("bad1.png"), 9});
  items.push_back({dir.file("bad2.jpg"), 9});
  auto opts = loader_options(4, 2);
  std::vector<std::string> messages;
  opts.bad_images = BadImages::kSkip;
  opts.on_skip = [&](const std::string& m) { messages.push_back(m); };
  ImageLoader loader(items, small_preset(TransformPreset::kImagenet), opts, "t");
  const auto b = read_batches(loader, 4);  // 6 good images a pass: rows from two passes and more
  for (const auto& batch : b) {
    EXPECT_EQ(batch.rows, 4);
    for (float l : batch.labels) EXPECT_NE(l, 9.0f);
  }
  EXPECT_EQ(b[0].items, (std::vector<int64_t>{0, 2, 3, 4}));
  EXPECT_EQ(b[1].items, (std::vector<int64_t>{5, 6, 0, 2}));
  EXPECT_EQ(loader.skipped(), (std::set<int64_t>{1, 7}));
  ASSERT_EQ(messages.size(), 2u);  // each bad file reported once
  EXPECT_CONTAINS(messages[0], dir.file("bad1.png"));
  EXPECT_CONTAINS(messages[1], "2 skipped");

  std::vector<ImageItem> all_bad = {{dir.file("bad1.png"), 0}, {dir.file("bad2.jpg"), 0}};
  ImageLoader hopeless(all_bad, small_preset(TransformPreset::kImagenet), opts, "t");
  ImageBatch batch;
  test::expect_error<IoError>([&] { hopeless.next(batch); }, {"all 2 images are unreadable"});
}

TEST(ImageLoader, ImagesThatDoNotBecomeTheBatchSizeAreAConfigError) {
  ImageTransform t = preset_transform(TransformPreset::kNone);  // no crop: sizes vary
  ImageLoader loader(golden_items(1), t, loader_options(2, 1), "t");
  ImageBatch b;
  test::expect_error<ConfigError>([&] { loader.next(b); }, {"rgb.png", "crop"});
}

// ---- the layer -----------------------------------------------------------------------

std::string layer_body(const std::string& source, const std::string& extra_param, const std::string& transform) {
  return "top: \"data\" top: \"label\" image_data_param { source: \"" + source + "\" batch_size: 4 " + extra_param +
         " } transform_param { " + transform + " }";
}

struct LayerRun {
  std::unique_ptr<Layer> layer;
  Blob data, label;
  BlobVec tops() { return {&data, &label}; }
};

LayerRun make_run(const std::string& body, Phase phase = Phase::kTrain, int rank = 0, int world = 1) {
  const ConfigNode root = parse_config_text("layer { name: \"data\" type: \"ImageData\" " + body + " }", "t.prototxt");
  LayerSpec spec;
  spec.name = "data";
  spec.type = "ImageData";
  spec.node = root.children().at(0);
  spec.tops = {"data", "label"};
  LayerContext ctx;
  ctx.phase = phase;
  ctx.seed = 3;
  ctx.rank = rank;
  ctx.world_size = world;
  LayerRun run;
  run.layer = LayerRegistry::instance().find("ImageData").create(spec, ctx);
  run.layer->setup({}, run.tops());
  return run;
}

std::pair<std::vector<float>, std::vector<float>> step(LayerRun& r) {
  r.layer->reshape({}, r.tops());
  r.layer->forward_cpu({}, r.tops());
  return {test::values(r.data.data), test::values(r.label.data)};
}

TEST(ImageDataLayer, ServesAClassFolderWithPresetSizes) {
  TempDir dir("strata_image");
  make_class_folder(dir.path());
  LayerRun r = make_run(layer_body(dir.path(), "shuffle: false threads: 2", "preset: IMAGENET resize: 20 crop_size: 16"),
                        Phase::kTest);
  const auto [data, labels] = step(r);
  EXPECT_EQ(r.data.shape(), (Shape{4, 3, 16, 16}));
  EXPECT_EQ(labels, (std::vector<float>{0, 0, 1, 1}));
  // Row 2 is dog/c.bmp = small.bmp, bit-exact with torchvision.
  const std::vector<float> want = golden_floats("small", "imagenet");
  test::expect_near(std::vector<float>(data.begin() + 2 * 768, data.begin() + 3 * 768), want, 1e-5f);
  const auto [data2, labels2] = step(r);
  EXPECT_EQ(labels2, (std::vector<float>{1, 0, 0, 1}));  // wraps into the next epoch
}

TEST(ImageDataLayer, ConfigErrors) {
  TempDir dir("strata_image");
  make_class_folder(dir.path());
  test::expect_error<ConfigError>([&] { make_run(layer_body(dir.path(), "", "")); }, {"crop_size"});
  test::expect_error<ConfigError>([&] { make_run(layer_body(dir.path(), "", "crop_size: 8 mean: 1 mean: 2")); },
                                  {"mean"});
  test::expect_error<IoError>([&] { make_run(layer_body(dir.file("nope"), "", "crop_size: 8")); },
                              {"layer 'data'", dir.file("nope")});
  test::write_text(dir.file("list.txt"), "cat/a.jpg\n");
  test::expect_error<ConfigError>([&] { make_run(layer_body(dir.file("list.txt"), "", "crop_size: 8")); },
                                  {"label"});
}

TEST(ImageDataLayer, ShardsAcrossRanksWithoutOverlap) {
  TempDir dir("strata_image");
  make_class_folder(dir.path());
  const std::string body = layer_body(dir.path(), "shuffle: false", "crop_size: 8");
  LayerRun r0 = make_run(body, Phase::kTest, 0, 2), r1 = make_run(body, Phase::kTest, 1, 2);
  const auto& l0 = dynamic_cast<const ImageDataLayer&>(*r0.layer).loader();
  const auto& l1 = dynamic_cast<const ImageDataLayer&>(*r1.layer).loader();
  EXPECT_EQ(l0.shard(), (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(l1.shard(), (std::vector<int64_t>{1, 3}));
}

TEST(ImageDataLayer, ResumesExactlyFromSavedState) {
  TempDir dir("strata_image");
  make_class_folder(dir.path());
  test::write_text(dir.path() + "/dog/zz_bad.png", "garbage");
  const std::string body =
      layer_body(dir.path(), "skip_bad_images: true seed: 11 threads: 2 prefetch: 3",
                 "preset: VIT_EVAL resize: 20 crop_size: 16 crop: RANDOM mirror: true");
  LayerRun a = make_run(body);
  for (int i = 0; i < 3; ++i) step(a);
  const std::string state = a.layer->save_state();
  std::vector<std::pair<std::vector<float>, std::vector<float>>> want;
  for (int i = 0; i < 4; ++i) want.push_back(step(a));

  LayerRun b = make_run(body);
  b.layer->load_state(state);
  for (int i = 0; i < 4; ++i) {
    const auto got = step(b);
    EXPECT_EQ(got.first, want[static_cast<size_t>(i)].first) << "batch " << i;
    EXPECT_EQ(got.second, want[static_cast<size_t>(i)].second) << "batch " << i;
  }
  EXPECT_CONTAINS(state, "skipped 4");  // dog/zz_bad.png: files before subfolders
  test::expect_error<Error>([&] { b.layer->load_state("strata_image_data 1\nimages 99 rank 0 world_size 1 shard 99 seed 11\nposition 0\nskipped\n"); },
                            {"99 images"});
}

}  // namespace
}  // namespace strata
