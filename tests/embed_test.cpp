// Feature extraction (transfer/feature_extractor.h): row i of the output
// belongs to input i, pooling and normalisation, .npy output, and errors
// that leave no half-written file.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "framework/io/checkpoint.h"
#include "framework/net.h"
#include "framework/io/npy.h"
#include "tests/test_util.h"
#include "transfer/feature_extractor.h"

namespace strata::transfer {
namespace {

using test::TempDir;

// A 24-bit BMP of one colour (rows padded to 4 bytes, bottom-up, BGR).
void write_bmp(const std::string& path, int w, int h, std::array<uint8_t, 3> rgb) {
  const int row = (w * 3 + 3) / 4 * 4;
  const uint32_t size = 54 + static_cast<uint32_t>(row * h);
  std::vector<uint8_t> b(size, 0);
  auto put32 = [&](size_t at, uint32_t v) {
    for (int k = 0; k < 4; ++k) b[at + k] = static_cast<uint8_t>(v >> (8 * k));
  };
  b[0] = 'B';
  b[1] = 'M';
  put32(2, size);
  put32(10, 54);
  put32(14, 40);
  put32(18, static_cast<uint32_t>(w));
  put32(22, static_cast<uint32_t>(h));
  b[26] = 1;
  b[28] = 24;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &b[54 + static_cast<size_t>(y * row + x * 3)];
      p[0] = rgb[2];
      p[1] = rgb[1];
      p[2] = rgb[0];
    }
  }
  test::write_bytes(path, b);
}

// data [1, 3, 8, 8] -> 1x1 convolution (2 x identity, so each row is its
// own image's colour, doubled) -> global average -> "pool" [N, 3, 1, 1].
const char* kDeploy = R"(name: "colours"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 dim: 8 dim: 8 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
        convolution_param { num_output: 3 kernel_size: 1 } }
layer { name: "pool" type: "Pooling" bottom: "conv" top: "pool" pooling_param { pool: AVE global_pooling: true } }
layer { name: "head" type: "InnerProduct" bottom: "pool" top: "head" inner_product_param { num_output: 2 } }
)";

struct Fixture {
  TempDir dir{"strata_embed"};
  std::string model = dir.file("deploy.prototxt");
  std::string weights = dir.file("w.safetensors");
  Fixture() {
    test::write_text(model, kDeploy);
    NetOptions opts;
    opts.phase = Phase::kTest;
    auto net = Net::from_file(model, opts);
    for (NetParam& p : net->params()) {
      Tensor& t = p.blob->data;
      t.zero();
      if (p.name == "conv.weight") {
        for (int c = 0; c < 3; ++c) t.data<float>()[c * 3 + c] = 2.0f;
      }
    }
    save_weights(*net, weights);
  }
  EmbedOptions options(const std::string& out) const {
    EmbedOptions o;
    o.model = model;
    o.weights = weights;
    o.layer = "pool";
    o.out = out;
    o.batch = 3;
    o.pool = EmbedPool::kAvg;
    o.preset = TransformPreset::kNone;  // ToTensor, centre crop to the net's 8x8
    o.decode_threads = 2;
    return o;
  }
};

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

TEST(Embed, RowIBelongsToPathI) {
  Fixture f;
  // Seven constant-colour images (not a multiple of the batch), named so that
  // the reading order (sorted names, class subfolders) differs from creation order.
  std::map<std::string, std::array<uint8_t, 3>> colour;
  const std::vector<std::string> names = {"b/z.bmp", "a/q.bmp", "a/c.bmp", "b/a.bmp", "top.bmp", "a/m.bmp", "b/k.bmp"};
  std::filesystem::create_directories(f.dir.file("imgs/a"));
  std::filesystem::create_directories(f.dir.file("imgs/b"));
  for (size_t i = 0; i < names.size(); ++i) {
    const std::array<uint8_t, 3> c = {static_cast<uint8_t>(20 * i + 5), static_cast<uint8_t>(200 - 25 * i),
                                      static_cast<uint8_t>((i * 97) % 256)};
    const std::string path = f.dir.file("imgs/" + names[i]);
    write_bmp(path, 9 + static_cast<int>(i), 11, c);  // odd sizes: the centre crop keeps the colour
    colour[path] = c;
  }
  EmbedOptions o = f.options(f.dir.file("feat.npy"));
  o.images = f.dir.file("imgs");
  std::vector<std::pair<int64_t, int64_t>> progress;
  o.progress = [&](int64_t done, int64_t total) { progress.push_back({done, total}); };
  const EmbedResult r = run_embed(o);
  EXPECT_EQ(r.rows, 7);
  EXPECT_EQ(r.dim, 3);
  EXPECT_EQ(r.paths_file, f.dir.file("feat.paths.txt"));
  const NpyArray a = read_npy(o.out);
  ASSERT_EQ(a.shape, (std::vector<int64_t>{7, 3}));
  const std::vector<std::string> paths = read_lines(r.paths_file);
  ASSERT_EQ(paths.size(), 7u);
  EXPECT_EQ(paths[0], f.dir.file("imgs/top.bmp"));  // a folder's own files first, then its subfolders
  EXPECT_EQ(paths[1], f.dir.file("imgs/a/c.bmp"));
  for (size_t i = 0; i < 7; ++i) {
    ASSERT_TRUE(colour.count(paths[i])) << paths[i];
    for (int c = 0; c < 3; ++c) {
      EXPECT_NEAR(a.as<float>()[i * 3 + c], 2.0f * colour[paths[i]][c] / 255.0f, 1e-5f) << "row " << i;
    }
  }
  EXPECT_EQ(progress.front(), (std::pair<int64_t, int64_t>{0, 7}));
  EXPECT_EQ(progress.back(), (std::pair<int64_t, int64_t>{7, 7}));
  EXPECT_EQ(progress.size(), 4u);  // 0, 3, 6, 7

  // L2 normalisation and flattening.
  o.l2 = L2Norm::kOn;
  o.out = f.dir.file("norm.npy");
  run_embed(o);
  const NpyArray n = read_npy(o.out);
  for (int64_t i = 0; i < 7; ++i) {
    double sq = 0;
    for (int c = 0; c < 3; ++c) sq += n.as<float>()[i * 3 + c] * n.as<float>()[i * 3 + c];
    EXPECT_NEAR(sq, 1.0, 1e-5);
  }
  o.l2 = L2Norm::kOff;
  o.pool = EmbedPool::kNone;
  o.layer = "conv";
  o.out = f.dir.file("flat.npy");
  EXPECT_EQ(run_embed(o).dim, 3 * 8 * 8);
}

// The inverse of escape_path_line, as a reader of the paths file applies it.
std::string unescape_path_line(const std::string& line) {
  std::string out;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] != '\\' || i + 1 == line.size()) {
      out += line[i];
      continue;
    }
    const char e = line[++i];
    if (e == 'n') {
      out += '\n';
    } else if (e == 'r') {
      out += '\r';
    } else if (e == 't') {
      out += '\t';
    } else if (e == 'x' && i + 2 < line.size()) {
      out += static_cast<char>(std::stoi(line.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += e;
    }
  }
  return out;
}

TEST(Embed, PathLinesEscapeControlBytesAndBackslashOnly) {
  EXPECT_EQ(escape_path_line("/data/plain name.jpg"), "/data/plain name.jpg");
  EXPECT_EQ(escape_path_line("a\nb\rc\td\\e"), "a\\nb\\rc\\td\\\\e");
  EXPECT_EQ(escape_path_line(std::string("bell\x07.png") + '\0' + "\x7f\x1b"), "bell\\x07.png\\x00\\x7f\\x1b");
  EXPECT_EQ(escape_path_line("\xc3\xbc\xff.png"), "\xc3\xbc\xff.png");  // UTF-8 and other high bytes as they are
}

TEST(Embed, FileNamesWithAnyByteKeepOneLinePerRow) {
  Fixture f;
  // A newline in a name would start a line of its own and shift every row after it.
  const std::vector<std::string> names = {"a\nnewline.bmp", "b\\back\\slash.bmp", "c\rreturn\ttab.bmp",
                                          "d\x01\x1b.bmp", "e\xc3\xbc.bmp", "f.bmp"};
  std::filesystem::create_directories(f.dir.file("imgs"));
  std::map<std::string, uint8_t> red;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string path = f.dir.file("imgs/" + names[i]);
    red[path] = static_cast<uint8_t>(30 * i + 10);
    write_bmp(path, 8, 8, {red[path], 0, 0});
  }
  EmbedOptions o = f.options(f.dir.file("feat.npy"));
  o.images = f.dir.file("imgs");
  const EmbedResult r = run_embed(o);
  ASSERT_EQ(r.rows, 6);
  const NpyArray a = read_npy(o.out);
  const std::vector<std::string> lines = read_lines(r.paths_file);
  ASSERT_EQ(lines.size(), 6u) << "one line per row";
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string path = unescape_path_line(lines[i]);
    ASSERT_TRUE(red.count(path)) << "line " << i << ": " << lines[i];
    EXPECT_NEAR(a.as<float>()[i * 3], 2.0f * red[path] / 255.0f, 1e-5f) << "row " << i << " is not " << lines[i];
  }
}

TEST(Embed, AFolderLoopIsReadOnceAndSkippedFormatsAreNamed) {
  Fixture f;
  std::filesystem::create_directories(f.dir.file("imgs/sub"));
  write_bmp(f.dir.file("imgs/a.bmp"), 8, 8, {10, 0, 0});
  write_bmp(f.dir.file("imgs/sub/b.bmp"), 8, 8, {20, 0, 0});
  std::filesystem::create_directory_symlink("..", f.dir.file("imgs/sub/loop"));
  for (const char* other : {"imgs/c.webp", "imgs/sub/d.webp", "imgs/e.TIFF"}) test::write_text(f.dir.file(other), "x");
  EmbedOptions o = f.options(f.dir.file("feat.npy"));
  o.images = f.dir.file("imgs");
  std::vector<std::string> notes;
  o.on_note = [&](const std::string& line) { notes.push_back(line); };
  EXPECT_EQ(run_embed(o).rows, 2);
  std::string all;
  for (const std::string& n : notes) all += n + "\n";
  EXPECT_NE(all.find("skipped 3 files in formats strata does not read: 2 .webp, 1 .tiff (first: " +
                     f.dir.file("imgs/c.webp")),
            std::string::npos)
      << all;
  EXPECT_NE(all.find(f.dir.file("imgs/sub/loop") + " -> "), std::string::npos) << all;
}

TEST(Embed, PreprocessedArraysFromNpy) {
  Fixture f;
  const int64_t n = 5;
  std::vector<float> x(static_cast<size_t>(n * 3 * 64));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < 3; ++c) {
      for (int k = 0; k < 64; ++k) x[static_cast<size_t>((i * 3 + c) * 64 + k)] = static_cast<float>(i * 10 + c);
    }
  }
  write_npy(f.dir.file("x.npy"), DType::kF32, {n, 3, 8, 8}, x.data());
  EmbedOptions o = f.options(f.dir.file("out.npy"));
  o.input = f.dir.file("x.npy");
  run_embed(o);
  const NpyArray a = read_npy(o.out);
  ASSERT_EQ(a.shape, (std::vector<int64_t>{n, 3}));
  for (int64_t i = 0; i < n; ++i) {
    for (int c = 0; c < 3; ++c) EXPECT_FLOAT_EQ(a.as<float>()[i * 3 + c], 2.0f * (i * 10 + c));
  }
  const std::vector<std::string> paths = read_lines(f.dir.file("out.paths.txt"));
  ASSERT_EQ(paths.size(), 5u);
  EXPECT_EQ(paths[4], f.dir.file("x.npy") + "[4]");

  write_npy(f.dir.file("wrong.npy"), DType::kF32, {2, 3, 4, 4}, x.data());
  o.input = f.dir.file("wrong.npy");
  test::expect_error<ShapeError>([&] { run_embed(o); }, {"[2, 3, 4, 4]", "[N, 3, 8, 8]"});
}

TEST(Embed, ErrorsLeaveNoOutputBehind) {
  Fixture f;
  std::filesystem::create_directories(f.dir.file("imgs"));
  write_bmp(f.dir.file("imgs/a.bmp"), 8, 8, {1, 2, 3});
  test::write_text(f.dir.file("imgs/b.bmp"), "not a bitmap");
  EmbedOptions o = f.options(f.dir.file("out.npy"));
  o.images = f.dir.file("imgs");
  test::expect_error<IoError>([&] { run_embed(o); }, {f.dir.file("imgs/b.bmp")});
  EXPECT_FALSE(std::filesystem::exists(o.out));
  EXPECT_FALSE(std::filesystem::exists(f.dir.file("out.paths.txt")));
  for (const std::string& name : f.dir.list()) EXPECT_EQ(name.find(".tmp"), std::string::npos) << name;

  std::filesystem::remove(f.dir.file("imgs/b.bmp"));
  o.layer = "fc7";
  test::expect_error<ConfigError>([&] { run_embed(o); }, {"no blob 'fc7'", "data, conv, pool, head"});
  o.layer = "pool";
  o.pool = EmbedPool::kToken;
  test::expect_error<ShapeError>([&] { run_embed(o); }, {"--pool token", "[N, T, D]"});
  o.pool = EmbedPool::kAvg;
  o.crop = 6;
  test::expect_error<ConfigError>([&] { run_embed(o); }, {"--crop 8"});
}

// --precision BF16: the net stores the convolution's output in bf16, the
// extracted blob stays f32. Each input plane is one value, so the row is the
// bf16 rounding of the f32 row exactly.
TEST(Embed, StoredInBf16TheRowsAreTheF32RowsRoundedToBf16) {
  Fixture f;
  const int64_t n = 3;
  std::vector<float> x(static_cast<size_t>(n * 3 * 64));
  auto value = [](int64_t i, int64_t c) { return static_cast<float>(i * 10 + c) + 0.1234f; };
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < 3; ++c) {
      for (int k = 0; k < 64; ++k) x[static_cast<size_t>((i * 3 + c) * 64 + k)] = value(i, c);
    }
  }
  write_npy(f.dir.file("x.npy"), DType::kF32, {n, 3, 8, 8}, x.data());
  EmbedOptions o = f.options(f.dir.file("out.npy"));
  o.input = f.dir.file("x.npy");
  o.storage_dtype = DType::kBF16;
  run_embed(o);
  const NpyArray a = read_npy(o.out);
  ASSERT_EQ(a.shape, (std::vector<int64_t>{n, 3}));
  for (int64_t i = 0; i < n; ++i) {
    for (int c = 0; c < 3; ++c) {
      const float f32_row = 2.0f * value(i, c);
      const float rounded = bf16_to_float(float_to_bf16(f32_row));
      EXPECT_EQ(a.as<float>()[i * 3 + c], rounded) << i << " " << c;
      EXPECT_NE(rounded, f32_row) << "a value bf16 keeps exactly tests nothing";
    }
  }
}

TEST(Embed, PoolingModes) {
  Tensor t({2, 3, 2});  // [N, T, D]
  for (int i = 0; i < 12; ++i) t.data<float>()[i] = static_cast<float>(i);
  std::vector<float> out(4);
  pool_rows(t, 2, EmbedPool::kToken, L2Norm::kOff, out.data());
  EXPECT_EQ(out, (std::vector<float>{0, 1, 6, 7}));
  pool_rows(t, 2, EmbedPool::kAvg, L2Norm::kOff, out.data());
  EXPECT_EQ(out, (std::vector<float>{2, 3, 8, 9}));
  EXPECT_EQ(embed_dim({5, 7}, EmbedPool::kAvg, "x"), 7);
  EXPECT_EQ(embed_dim({5, 4, 3, 3}, EmbedPool::kNone, "x"), 36);
  EXPECT_EQ(npy_f32_header({7, 3}).size() % 64, 0u);
}

// A fine-tuned snapshot (the deploy net's layers, a 5-class head) loads into
// the 2-class deploy net only with --reinit head; the rows come from the file.
TEST(Embed, ReinitLeavesAFineTunedHeadAsInitialised) {
  Fixture f;
  std::string tuned_text = kDeploy;
  tuned_text.replace(tuned_text.find("num_output: 2"), 13, "num_output: 5");
  test::write_text(f.dir.file("tuned.prototxt"), tuned_text);
  NetOptions opts;
  opts.phase = Phase::kTest;
  auto tuned = Net::from_file(f.dir.file("tuned.prototxt"), opts);
  for (NetParam& p : tuned->params()) {
    p.blob->data.zero();
    if (p.name == "conv.weight") {
      for (int c = 0; c < 3; ++c) p.blob->data.data<float>()[c * 3 + c] = 3.0f;  // 3 x identity
    }
  }
  const std::string snapshot = f.dir.file("tuned_iter_100.safetensors");
  save_weights(*tuned, snapshot);

  std::filesystem::create_directories(f.dir.file("imgs"));
  write_bmp(f.dir.file("imgs/a.bmp"), 8, 8, {51, 102, 153});
  EmbedOptions o = f.options(f.dir.file("out.npy"));
  o.images = f.dir.file("imgs");
  o.weights = snapshot;
  test::expect_error<ShapeError>([&] { run_embed(o); }, {"head.weight", "[5, 3]", "--reinit head"});
  EXPECT_FALSE(std::filesystem::exists(o.out));

  o.reinit = {"head"};
  LoadReport report;
  o.on_loaded = [&](const LoadReport& r) { report = r; };
  const EmbedResult r = run_embed(o);
  EXPECT_EQ(r.rows, 1);
  EXPECT_EQ(report.reinitialized, (std::vector<std::string>{"head.weight", "head.bias"}));
  const NpyArray a = read_npy(o.out);
  for (int c = 0; c < 3; ++c) EXPECT_NEAR(a.as<float>()[c], 3.0f * (51 * (c + 1)) / 255.0f, 1e-5f);

  o.reinit = {"nosuchlayer"};
  test::expect_error<ConfigError>([&] { run_embed(o); }, {"nosuchlayer"});
}

// Unreadable images: without kSkip the first one stops the run, names its
// path and the flag; with it they are left out, listed, and the .npy holds
// exactly the readable ones, row i on line i of the paths file.
TEST(Embed, SkipBadImagesCountsAndListsThem) {
  Fixture f;
  std::filesystem::create_directories(f.dir.file("imgs"));
  const std::vector<std::string> names = {"a.bmp", "b.bmp", "c.bmp", "d.bmp", "e.bmp", "f.bmp"};
  const std::set<std::string> bad = {"b.bmp", "e.bmp", "f.bmp"};  // the last two: a bad tail
  std::map<std::string, int> value;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string path = f.dir.file("imgs/" + names[i]);
    if (bad.count(names[i])) {
      test::write_text(path, "not a bitmap");
    } else {
      value[path] = static_cast<int>(30 * i + 10);
      const uint8_t v = static_cast<uint8_t>(value[path]);
      write_bmp(path, 8, 8, {v, v, v});
    }
  }
  EmbedOptions o = f.options(f.dir.file("out.npy"));
  o.images = f.dir.file("imgs");
  o.batch = 2;
  test::expect_error<IoError>([&] { run_embed(o); }, {f.dir.file("imgs/b.bmp"), "--skip-bad-images"});
  EXPECT_FALSE(std::filesystem::exists(o.out));

  o.bad_images = BadImages::kSkip;
  std::vector<std::string> notes;
  std::mutex notes_mu;
  o.on_note = [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(notes_mu);
    notes.push_back(line);
  };
  std::vector<std::pair<int64_t, int64_t>> progress;
  o.progress = [&](int64_t done, int64_t total) { progress.push_back({done, total}); };
  const EmbedResult r = run_embed(o);
  EXPECT_EQ(r.rows, 3);
  EXPECT_EQ(r.skipped, (std::vector<std::string>{f.dir.file("imgs/b.bmp"), f.dir.file("imgs/e.bmp"),
                                                 f.dir.file("imgs/f.bmp")}));
  EXPECT_EQ(r.skipped_file, f.dir.file("out.skipped.txt"));
  EXPECT_EQ(read_lines(r.skipped_file), r.skipped);
  const NpyArray a = read_npy(o.out);
  ASSERT_EQ(a.shape, (std::vector<int64_t>{3, 3}));
  const std::vector<std::string> paths = read_lines(r.paths_file);
  ASSERT_EQ(paths, (std::vector<std::string>{f.dir.file("imgs/a.bmp"), f.dir.file("imgs/c.bmp"),
                                             f.dir.file("imgs/d.bmp")}));
  for (size_t i = 0; i < paths.size(); ++i) {
    for (int c = 0; c < 3; ++c) EXPECT_NEAR(a.as<float>()[i * 3 + c], 2.0f * value[paths[i]] / 255.0f, 1e-5f);
  }
  int skip_notes = 0;
  for (const std::string& n : notes) skip_notes += n.find("unreadable image") != std::string::npos;
  EXPECT_EQ(skip_notes, 3);
  EXPECT_EQ(progress.back(), (std::pair<int64_t, int64_t>{6, 6}));

  // Nothing skipped: an empty list (not the last run's); without the flag the
  // old list, which described the replaced .npy, goes.
  for (const std::string& b : bad) {
    const uint8_t v = 7;
    write_bmp(f.dir.file("imgs/" + b), 8, 8, {v, v, v});
  }
  EXPECT_EQ(run_embed(o).rows, 6);
  EXPECT_TRUE(read_lines(f.dir.file("out.skipped.txt")).empty());
  o.bad_images = BadImages::kError;
  EXPECT_TRUE(run_embed(o).skipped_file.empty());
  EXPECT_FALSE(std::filesystem::exists(f.dir.file("out.skipped.txt")));

  // All unreadable: an error, not an empty file.
  for (const std::string& n : names) test::write_text(f.dir.file("imgs/" + n), "garbage");
  o.bad_images = BadImages::kSkip;
  test::expect_error<IoError>([&] { run_embed(o); }, {"all 6 images are unreadable"});
}

// The transform comes from --preset, else from the net's `preset:` key, else
// IMAGENET; each case is said, and a --preset that differs is a warning.
TEST(Embed, PresetDeclaredByTheModel) {
  Fixture f;
  std::string text = kDeploy;
  text.insert(text.find('\n') + 1, "preset: VIT_EVAL\n");
  const std::string declared = f.dir.file("vit.prototxt");
  test::write_text(declared, text);
  std::filesystem::create_directories(f.dir.file("imgs"));
  write_bmp(f.dir.file("imgs/a.bmp"), 8, 8, {51, 102, 153});

  std::vector<std::string> notes;
  auto run = [&](const std::string& model, std::optional<TransformPreset> preset) {
    EmbedOptions o = f.options(f.dir.file("out.npy"));
    o.images = f.dir.file("imgs");
    o.model = model;
    o.preset = preset;
    o.resize = 0;  // the 8x8 image as it is, under every preset
    o.crop = 8;
    notes.clear();
    o.on_note = [&](const std::string& line) { notes.push_back(line); };
    const EmbedResult r = run_embed(o);
    const NpyArray a = read_npy(o.out);
    return std::make_pair(r.preset, std::vector<float>(a.as<float>(), a.as<float>() + 3));
  };
  auto noted = [&](const std::string& part) {
    for (const std::string& n : notes) {
      if (n.find(part) != std::string::npos) return true;
    }
    return false;
  };

  // Declared, no --preset: VIT_EVAL, (x - 0.5) / 0.5.
  auto [name, row] = run(declared, std::nullopt);
  EXPECT_EQ(name, "VIT_EVAL");
  for (int c = 0; c < 3; ++c) EXPECT_NEAR(row[c], 2.0f * ((51 * (c + 1)) / 255.0f - 0.5f) / 0.5f, 1e-5f);
  EXPECT_TRUE(noted("declared by the model (" + declared + ":2:")) << (notes.empty() ? "" : notes[0]);

  // --preset differing from the model's: used, with a warning naming both.
  std::tie(name, row) = run(declared, TransformPreset::kNone);
  EXPECT_EQ(name, "NONE");
  EXPECT_NEAR(row[0], 2.0f * 51 / 255.0f, 1e-5f);
  EXPECT_TRUE(noted("--preset none differs from the model's preset: VIT_EVAL")) << (notes.empty() ? "" : notes[0]);
  std::tie(name, row) = run(declared, TransformPreset::kVitEval);
  EXPECT_FALSE(noted("differs"));

  // Nothing declared, no --preset: IMAGENET, and a note that says so.
  std::tie(name, row) = run(f.model, std::nullopt);
  EXPECT_EQ(name, "IMAGENET");
  EXPECT_NEAR(row[0], 2.0f * (51 / 255.0f - 0.485f) / 0.229f, 1e-4f);
  EXPECT_TRUE(noted("declares none"));

  // The key's values are checked wherever the net is read; other keys stay unknown.
  text = kDeploy;
  test::write_text(declared, "preset: VIT\n" + text);
  NetOptions opts;
  opts.phase = Phase::kTest;
  test::expect_error<ConfigError>([&] { Net::from_file(declared, opts); }, {"NONE, IMAGENET, VIT_EVAL", ":1:"});
  test::write_text(declared, "presets: IMAGENET\n" + text);
  test::expect_error<ConfigError>([&] { Net::from_file(declared, opts); }, {"unknown key 'presets'", "preset"});
}

}  // namespace
}  // namespace strata::transfer
