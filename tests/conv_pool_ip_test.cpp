// Forward values, gradients and error messages of Convolution, Pooling and
// InnerProduct, checked by hand for small cases and against naive direct
// implementations (written here, loop by loop) for the stride / pad /
// dilation / group / chunking / threading combinations. Pooling values were
// also checked against PyTorch 1.13 (max_pool2d / avg_pool2d with
// ceil_mode=True, count_include_pad=True), whose windows match Caffe's.

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "layers/convolution/convolution_winograd.h"
#include "framework/error.h"
#include "framework/layer.h"
#include "framework/rng.h"
#include "framework/cpu/cpu_isa.h"
#include "framework/cpu/threads.h"
#include "layers/convolution/convolution.h"
#include "tests/layer_test_util.h"

namespace strata {
namespace {

using test_util::LayerHarness;
using test_util::make_harness;

void expect_values(const std::vector<float>& got, const std::vector<float>& want, float tol = 1e-5f) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], tol * std::max(1.0f, std::fabs(want[i]))) << "at index " << i;
  }
}

// Runs setup + forward on a harness whose bottom 0 holds `x`.
void run_forward(LayerHarness& h, const std::vector<float>& x) {
  test_util::copy_into(h.bottom[0]->data, x);
  h.setup();
  h.forward();
}

// Expects `fn` to throw E whose message contains every one of `parts`.
template <typename E, typename Fn>
void expect_error(Fn fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an exception";
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

// ---------------------------------------------------------------- Convolution

struct ConvGeometry {
  int64_t n, c, h, w;     // input
  int64_t out, kh, kw;    // num_output, kernel
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1, group = 1;
  bool bias = true;

  int64_t out_h() const { return (h + 2 * ph - (dh * (kh - 1) + 1)) / sh + 1; }
  int64_t out_w() const { return (w + 2 * pw - (dw * (kw - 1) + 1)) / sw + 1; }
  std::string config() const {
    return "convolution_param { num_output: " + std::to_string(out) + " kernel_h: " + std::to_string(kh) +
           " kernel_w: " + std::to_string(kw) + " stride_h: " + std::to_string(sh) +
           " stride_w: " + std::to_string(sw) + " pad_h: " + std::to_string(ph) + " pad_w: " + std::to_string(pw) +
           " dilation: " + std::to_string(dh) + " dilation: " + std::to_string(dw) +
           " group: " + std::to_string(group) + " bias_term: " + (bias ? "true" : "false") +
           " weight_filler { type: 'gaussian' } bias_filler { type: 'gaussian' } }";
  }
};

// Direct convolution: y, and given dy the gradients dx, dw, db.
struct NaiveConv {
  const ConvGeometry& g;

  template <typename Visit>
  void for_each_tap(const Visit& visit) const {
    const int64_t cg = g.c / g.group, og = g.out / g.group;
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t o = 0; o < g.out; ++o)
        for (int64_t oh = 0; oh < g.out_h(); ++oh)
          for (int64_t ow = 0; ow < g.out_w(); ++ow)
            for (int64_t ci = 0; ci < cg; ++ci)
              for (int64_t ki = 0; ki < g.kh; ++ki)
                for (int64_t kj = 0; kj < g.kw; ++kj) {
                  const int64_t ih = oh * g.sh - g.ph + ki * g.dh;
                  const int64_t iw = ow * g.sw - g.pw + kj * g.dw;
                  if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
                  const int64_t c = o / og * cg + ci;
                  const int64_t xi = ((n * g.c + c) * g.h + ih) * g.w + iw;
                  const int64_t wi = ((o * cg + ci) * g.kh + ki) * g.kw + kj;
                  const int64_t yi = ((n * g.out + o) * g.out_h() + oh) * g.out_w() + ow;
                  visit(xi, wi, yi);
                }
  }

  std::vector<float> forward(const std::vector<float>& x, const std::vector<float>& w,
                             const std::vector<float>& b) const {
    std::vector<double> y(static_cast<size_t>(g.n * g.out * g.out_h() * g.out_w()), 0.0);
    for_each_tap([&](int64_t xi, int64_t wi, int64_t yi) { y[yi] += static_cast<double>(x[xi]) * w[wi]; });
    std::vector<float> out(y.size());
    const int64_t hw = g.out_h() * g.out_w();
    for (size_t i = 0; i < y.size(); ++i) {
      const int64_t o = static_cast<int64_t>(i) / hw % g.out;
      out[i] = static_cast<float>(y[i] + (g.bias ? b[o] : 0.0f));
    }
    return out;
  }

  void backward(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& dy,
                std::vector<float>* dx, std::vector<float>* dw, std::vector<float>* db) const {
    std::vector<double> gx(x.size(), 0.0), gw(w.size(), 0.0), gb(static_cast<size_t>(g.out), 0.0);
    for_each_tap([&](int64_t xi, int64_t wi, int64_t yi) {
      gx[xi] += static_cast<double>(w[wi]) * dy[yi];
      gw[wi] += static_cast<double>(x[xi]) * dy[yi];
    });
    const int64_t hw = g.out_h() * g.out_w();
    for (size_t i = 0; i < dy.size(); ++i) gb[static_cast<int64_t>(i) / hw % g.out] += dy[i];
    dx->assign(gx.begin(), gx.end());
    dw->assign(gw.begin(), gw.end());
    db->assign(gb.begin(), gb.end());
  }
};

TEST(ConvolutionTest, HandCheckedKernel) {
  // x = 1..9 as 3x3, kernel [[1, 2], [3, 4]], bias 0.5.
  LayerHarness h = make_harness("Convolution",
                                "convolution_param { num_output: 1 kernel_size: 2 bias_filler { type: 'constant' "
                                "value: 0.5 } }",
                                {{1, 1, 3, 3}});
  test_util::copy_into(h.bottom[0]->data, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  h.setup();
  test_util::copy_into(h.layer->params()[0].blob->data, {1, 2, 3, 4});
  h.forward();
  EXPECT_EQ(h.top[0]->shape(), (Shape{1, 1, 2, 2}));
  // 1*1 + 2*2 + 4*3 + 5*4 = 37, etc.
  expect_values(test_util::to_vector(h.top[0]->data), {37.5f, 47.5f, 67.5f, 77.5f});
}

TEST(ConvolutionTest, HandCheckedPadStride) {
  // x = 1..9 as 3x3, 3x3 kernel of ones, pad 1, stride 2: the sums of the
  // 2x2 corner neighbourhoods.
  LayerHarness h = make_harness("Convolution",
                                "convolution_param { num_output: 1 kernel_size: 3 pad: 1 stride: 2 "
                                "weight_filler { type: 'constant' value: 1 } bias_term: false }",
                                {{1, 1, 3, 3}});
  run_forward(h, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  EXPECT_EQ(h.top[0]->shape(), (Shape{1, 1, 2, 2}));
  expect_values(test_util::to_vector(h.top[0]->data), {12, 16, 24, 28});
}

// Forward and backward against the naive implementation. Parameter diffs
// start non-zero to check that gradients accumulate.
void check_against_naive(const ConvGeometry& g) {
  SCOPED_TRACE(g.config() + " input [" + std::to_string(g.n) + ", " + std::to_string(g.c) + ", " +
               std::to_string(g.h) + ", " + std::to_string(g.w) + "]");
  LayerHarness h = make_harness("Convolution", g.config(), {{g.n, g.c, g.h, g.w}}, Phase::kTrain, 7);
  Rng rng(11);
  test_util::fill_gaussian(h.bottom[0]->data, rng);
  h.setup();
  h.forward();
  ASSERT_EQ(h.top[0]->shape(), (Shape{g.n, g.out, g.out_h(), g.out_w()}));
  const std::vector<float> x = test_util::to_vector(h.bottom[0]->data);
  const std::vector<float> w = test_util::to_vector(h.layer->params()[0].blob->data);
  const std::vector<float> b =
      g.bias ? test_util::to_vector(h.layer->params()[1].blob->data) : std::vector<float>(g.out, 0.0f);
  const NaiveConv naive{g};
  expect_values(test_util::to_vector(h.top[0]->data), naive.forward(x, w, b), 1e-4f);

  test_util::fill_gaussian(h.top[0]->diff, rng);
  const std::vector<float> dy = test_util::to_vector(h.top[0]->diff);
  for (LayerParam& p : h.layer->params()) p.blob->diff.fill(1.0f);
  h.bottom[0]->diff.fill(std::nanf(""));
  h.backward();
  std::vector<float> dx, dw, db;
  naive.backward(x, w, dy, &dx, &dw, &db);
  for (float& v : dw) v += 1.0f;
  for (float& v : db) v += 1.0f;
  expect_values(test_util::to_vector(h.bottom[0]->diff), dx, 1e-4f);
  expect_values(test_util::to_vector(h.layer->params()[0].blob->diff), dw, 1e-4f);
  if (g.bias) expect_values(test_util::to_vector(h.layer->params()[1].blob->diff), db, 1e-4f);
}

TEST(ConvolutionTest, MatchesNaiveConvolution) {
  std::vector<ConvGeometry> cases;
  cases.push_back({2, 3, 7, 6, 4, 3, 3});                                   // plain
  cases.push_back({2, 3, 7, 6, 4, 3, 3, 2, 2, 1, 1});                       // stride 2, pad 1
  cases.push_back({2, 2, 9, 8, 3, 3, 2, 1, 3, 2, 0, 2, 3});                 // mixed stride/pad, dilation 2x3
  cases.push_back({2, 4, 6, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1, 2});              // group 2
  cases.push_back({3, 6, 5, 7, 6, 1, 3, 2, 1, 0, 1, 1, 2, 3, false});       // group 3, no bias
  cases.push_back({2, 4, 5, 5, 4, 1, 1, 1, 1, 0, 0, 1, 1, 1});              // 1x1, chunked copy path
  cases.push_back({2, 3, 4, 4, 2, 4, 4});                                   // kernel = image
  cases.push_back({1, 1, 3, 3, 1, 5, 5, 1, 1, 1, 1});                       // kernel larger than image
  for (const ConvGeometry& g : cases) check_against_naive(g);
}

TEST(ConvolutionTest, MatchesNaiveWithChunksAndThreads) {
  // Shapes that make the layer split the batch into several chunks (some of
  // several images, a short last one), run them on several threads and sum
  // per-thread weight gradients; and 1x1 convolutions that read the images
  // directly. Each runs with 1 and with 2 threads.
  std::vector<ConvGeometry> cases;
  cases.push_back({7, 2, 22, 22, 3, 3, 3});                     // 400 px per image: 2 images per chunk
  cases.push_back({6, 3, 30, 30, 4, 3, 3, 1, 1, 1, 1});         // one image per chunk
  cases.push_back({9, 4, 8, 8, 8, 3, 3, 1, 1, 1, 1, 1, 1, 2});  // 64 px, groups, several images per chunk
  cases.push_back({5, 8, 24, 24, 4, 1, 1});                     // 1x1 direct
  cases.push_back({11, 8, 5, 5, 4, 1, 1});                      // 1x1 chunked
  struct RestoreThreads {
    int saved = num_threads();
    ~RestoreThreads() { set_num_threads(saved); }
  } restore;
  for (const int threads : {1, 2, 3}) {
    set_num_threads(threads);
    SCOPED_TRACE("threads " + std::to_string(threads));
    for (const ConvGeometry& g : cases) check_against_naive(g);
  }
}

TEST(ConvolutionTest, Im2colPathMatchesNaive) {
  // On AVX-512 CPUs the layer packs patches straight from the images; force
  // the portable im2col/col2im path that other CPUs take and check it too.
  struct ForceIm2col {
    ForceIm2col() { ConvolutionLayer::force_algorithm_for_testing(ConvolutionLayer::Algorithm::kIm2col); }
    ~ForceIm2col() { ConvolutionLayer::force_algorithm_for_testing(ConvolutionLayer::Algorithm::kAuto); }
  } force;
  std::vector<ConvGeometry> cases;
  cases.push_back({2, 3, 7, 6, 4, 3, 3, 2, 2, 1, 1});
  cases.push_back({2, 2, 9, 8, 3, 3, 2, 1, 3, 2, 0, 2, 3});
  cases.push_back({3, 6, 5, 7, 6, 1, 3, 2, 1, 0, 1, 1, 2, 3, false});
  cases.push_back({7, 2, 22, 22, 3, 3, 3});
  cases.push_back({9, 4, 8, 8, 8, 3, 3, 1, 1, 1, 1, 1, 1, 2});
  cases.push_back({5, 8, 24, 24, 4, 1, 1});
  cases.push_back({11, 8, 5, 5, 4, 1, 1});
  for (const ConvGeometry& g : cases) check_against_naive(g);
}

// Forces the Winograd F(2x2, 3x3) path for every 3x3 stride-1 undilated
// convolution (other shapes keep their usual path) while alive.
struct ForceWinograd {
  ForceWinograd() { ConvolutionLayer::force_algorithm_for_testing(ConvolutionLayer::Algorithm::kWinograd); }
  ~ForceWinograd() { ConvolutionLayer::force_algorithm_for_testing(ConvolutionLayer::Algorithm::kAuto); }
};

TEST(ConvolutionTest, WinogradPathMatchesNaive) {
  ForceWinograd force;
  std::vector<ConvGeometry> cases;
  cases.push_back({2, 3, 7, 6, 4, 3, 3});                                // no pad, odd output (5x4)
  cases.push_back({2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1});                    // pad 1, odd height
  cases.push_back({3, 2, 5, 9, 3, 3, 3, 1, 1, 2, 0});                    // pad 2 / 0: input-gradient pad 0 / 2
  cases.push_back({2, 2, 6, 6, 3, 3, 3, 1, 1, 3, 1});                    // pad 3: the input gradient crops
  cases.push_back({2, 4, 6, 7, 6, 3, 3, 1, 1, 1, 1, 1, 1, 2});           // group 2
  cases.push_back({3, 6, 5, 5, 6, 3, 3, 1, 1, 1, 0, 1, 1, 3, false});    // group 3, no bias
  cases.push_back({1, 1, 3, 3, 1, 3, 3});                                // one output pixel
  cases.push_back({2, 2, 40, 37, 3, 3, 3, 1, 1, 1, 1});                  // rows of more than 16 tiles
  // Shapes Winograd does not take keep their own path under the forcing.
  cases.push_back({2, 3, 7, 6, 4, 3, 3, 2, 2, 1, 1});                    // stride 2
  cases.push_back({2, 2, 9, 8, 3, 3, 3, 1, 1, 2, 2, 2, 2});              // dilation 2
  cases.push_back({2, 4, 5, 5, 4, 1, 1});                                // 1x1
  cases.push_back({2, 3, 6, 6, 2, 3, 2, 1, 1, 1, 1});                    // 3x2 kernel
  for (const ConvGeometry& g : cases) check_against_naive(g);
}

TEST(ConvolutionTest, WinogradPortableTransformsMatchNaive) {
  // The transforms' portable loops (CPUs without AVX-512) on this CPU too.
  ForceWinograd force;
  struct ForcePortable {
    ForcePortable() { winograd::force_kernels_for_testing(winograd::Kernels::kPortable); }
    ~ForcePortable() { winograd::force_kernels_for_testing(winograd::Kernels::kAuto); }
  } portable;
  std::vector<ConvGeometry> cases;
  cases.push_back({2, 3, 7, 6, 4, 3, 3});
  cases.push_back({3, 2, 5, 9, 3, 3, 3, 1, 1, 2, 0});
  cases.push_back({2, 2, 6, 6, 3, 3, 3, 1, 1, 3, 1});
  cases.push_back({3, 6, 5, 5, 6, 3, 3, 1, 1, 1, 0, 1, 1, 3, false});
  cases.push_back({5, 16, 9, 11, 16, 3, 3, 1, 1, 1, 1});
  for (const ConvGeometry& g : cases) check_against_naive(g);
}

TEST(ConvolutionTest, WinogradPathWithChunksAndThreads) {
  // Enough channels for the automatic choice to take Winograd on AVX-512
  // CPUs (and forced elsewhere), several images per chunk, a short last
  // chunk, per-thread weight gradients summed, with 1, 2 and 3 threads.
  ForceWinograd force;
  std::vector<ConvGeometry> cases;
  cases.push_back({11, 16, 8, 8, 32, 3, 3, 1, 1, 1, 1});
  cases.push_back({5, 16, 9, 11, 16, 3, 3, 1, 1, 1, 1});
  cases.push_back({3, 32, 16, 16, 16, 3, 3, 1, 1, 1, 1, 1, 1, 2});
  struct RestoreThreads {
    int saved = num_threads();
    ~RestoreThreads() { set_num_threads(saved); }
  } restore;
  for (const int threads : {1, 2, 3}) {
    set_num_threads(threads);
    SCOPED_TRACE("threads " + std::to_string(threads));
    for (const ConvGeometry& g : cases) check_against_naive(g);
  }
}

TEST(ConvolutionTest, AutomaticPathMatchesNaiveWithManyChannels) {
  // The shapes of models/cifar_vgg's convolutions (fewer images), which the
  // automatic choice runs through Winograd on AVX-512 CPUs.
  std::vector<ConvGeometry> cases;
  cases.push_back({3, 3, 32, 32, 64, 3, 3, 1, 1, 1, 1});
  cases.push_back({2, 64, 16, 16, 64, 3, 3, 1, 1, 1, 1});
  cases.push_back({2, 128, 8, 8, 256, 3, 3, 1, 1, 1, 1});
  for (const ConvGeometry& g : cases) check_against_naive(g);
}

TEST(ConvolutionTest, FewInputChannelsAndPadBeyondKernel) {
  // A first layer (3 channels, many outputs) takes col2im for the input
  // gradient even on the patch path; pad > dilation * (kernel - 1) gives the
  // input-gradient convolution a negative pad (it crops).
  std::vector<ConvGeometry> cases;
  cases.push_back({4, 3, 12, 12, 16, 3, 3, 1, 1, 1, 1});
  cases.push_back({3, 4, 6, 6, 4, 3, 3, 1, 1, 3, 3});
  cases.push_back({3, 4, 6, 5, 4, 1, 1, 1, 1, 1, 2});
  cases.push_back({2, 4, 9, 9, 4, 3, 3, 1, 1, 3, 1, 2, 2});
  for (const ConvGeometry& g : cases) check_against_naive(g);
}

TEST(ConvolutionTest, ShapeChangesBetweenForwards) {
  // Reshape to a larger and a smaller batch and spatial size; results must
  // follow (scratch buffers are reused, not reallocated, when they fit).
  ConvGeometry g{4, 3, 12, 12, 5, 3, 3, 1, 1, 1, 1};
  LayerHarness h = make_harness("Convolution", g.config(), {{g.n, g.c, g.h, g.w}});
  Rng rng(3);
  test_util::fill_gaussian(h.bottom[0]->data, rng);
  h.setup();
  h.forward();
  for (const Shape& s : {Shape{9, 3, 20, 16}, Shape{1, 3, 5, 5}, Shape{4, 3, 12, 12}}) {
    h.bottom[0]->resize(s);
    test_util::fill_gaussian(h.bottom[0]->data, rng);
    h.forward();
    ConvGeometry gs = g;
    gs.n = s[0];
    gs.h = s[2];
    gs.w = s[3];
    const NaiveConv naive{gs};
    expect_values(test_util::to_vector(h.top[0]->data),
                  naive.forward(test_util::to_vector(h.bottom[0]->data),
                                test_util::to_vector(h.layer->params()[0].blob->data),
                                test_util::to_vector(h.layer->params()[1].blob->data)),
                  1e-4f);
  }
}

TEST(ConvolutionTest, LargeInputsStayFinite) {
  LayerHarness h = make_harness("Convolution", "convolution_param { num_output: 3 kernel_size: 3 pad: 1 }",
                                {{2, 2, 5, 5}});
  Rng rng(5);
  test_util::fill_gaussian(h.bottom[0]->data, rng, 0.0f, 1e4f);
  h.setup();
  h.forward();
  for (float v : test_util::to_vector(h.top[0]->data)) EXPECT_TRUE(std::isfinite(v));
}

TEST(ConvolutionTest, Errors) {
  expect_error<ShapeError>(
      [] {
        LayerHarness h = make_harness("Convolution", "convolution_param { num_output: 4 kernel_size: 3 group: 2 }",
                                      {{1, 3, 5, 5}});
        h.setup();
      },
      {"layer 'test' (Convolution)", "input channels 3", "not divisible by group 2"});
  expect_error<ConfigError>(
      [] { make_harness("Convolution", "convolution_param { num_output: 3 kernel_size: 3 group: 2 }", {{1, 4, 5, 5}}); },
      {"num_output 3", "not divisible by group 2"});
  expect_error<ShapeError>(
      [] {
        LayerHarness h =
            make_harness("Convolution", "convolution_param { num_output: 1 kernel_size: 5 pad: 1 }", {{2, 1, 2, 2}});
        h.setup();
      },
      {"layer 'test' (Convolution)", "input [2, 1, 2, 2]", "kernel 5x5", "pad 1x1", "output of 0x0"});
  expect_error<ShapeError>(
      [] {
        LayerHarness h = make_harness("Convolution", "convolution_param { num_output: 1 kernel_size: 1 }", {{2, 3, 4}});
        h.setup();
      },
      {"4-D NCHW", "[2, 3, 4]"});
  expect_error<ConfigError>([] { make_harness("Convolution", "convolution_param { kernel_size: 3 }", {{1, 1, 4, 4}}); },
                            {"num_output"});
  expect_error<ConfigError>(
      [] {
        make_harness("Convolution", "convolution_param { num_output: 1 kernel_size: 3 kernel_h: 3 kernel_w: 3 }",
                     {{1, 1, 4, 4}});
      },
      {"kernel_size", "not both"});
  expect_error<ConfigError>(
      [] { make_harness("Convolution", "convolution_param { num_output: 1 kernel_size: 0 }", {{1, 1, 4, 4}}); },
      {"kernel_size must be >= 1"});
  expect_error<ConfigError>(
      [] { make_harness("Convolution", "convolution_param { num_output: 1 kernel_size: 2 stride: 0 }", {{1, 1, 4, 4}}); },
      {"stride must be >= 1"});
  expect_error<ConfigError>(
      [] { make_harness("Convolution", "convolution_param { num_output: 1 kernel_size: 1 kernel_size: 2 kernel_size: 3 }", {{1, 1, 4, 4}}); },
      {"1 value", "got 3"});
}

// -------------------------------------------------------------------- Pooling

std::vector<float> iota(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  return v;
}

TEST(PoolingTest, MaxCeilVersusFloor) {
  // x = 0..35 as 6x6, 3x3 windows with stride 2: ceil gives 3x3 outputs (the
  // last window clipped to 2 wide), floor 2x2. Each max is the window's
  // bottom-right element. PyTorch max_pool2d(ceil_mode=True) agrees.
  LayerHarness ceil = make_harness("Pooling", "pooling_param { pool: MAX kernel_size: 3 stride: 2 }", {{1, 1, 6, 6}});
  run_forward(ceil, iota(36));
  EXPECT_EQ(ceil.top[0]->shape(), (Shape{1, 1, 3, 3}));
  expect_values(test_util::to_vector(ceil.top[0]->data), {14, 16, 17, 26, 28, 29, 32, 34, 35});

  LayerHarness floor = make_harness(
      "Pooling", "pooling_param { pool: MAX kernel_size: 3 stride: 2 round_mode: FLOOR }", {{1, 1, 6, 6}});
  run_forward(floor, iota(36));
  EXPECT_EQ(floor.top[0]->shape(), (Shape{1, 1, 2, 2}));
  expect_values(test_util::to_vector(floor.top[0]->data), {14, 16, 26, 28});
}

TEST(PoolingTest, MaxBackwardRoutesToArgmax) {
  // 2x2 windows, stride 2 over a 1x1x2x4 input: maxima at 5 (index 5) and 7
  // (index 3); ties pick the first.
  LayerHarness h = make_harness("Pooling", "pooling_param { pool: MAX kernel_size: 2 stride: 2 }", {{1, 1, 2, 4}});
  run_forward(h, {1, 2, 3, 7, 4, 5, 7, 0});
  expect_values(test_util::to_vector(h.top[0]->data), {5, 7});
  test_util::copy_into(h.top[0]->diff, {10, 20});
  h.backward();
  expect_values(test_util::to_vector(h.bottom[0]->diff), {0, 0, 0, 20, 0, 10, 0, 0});

  // Overlapping windows add up at a shared maximum.
  LayerHarness o = make_harness("Pooling", "pooling_param { pool: MAX kernel_size: 2 stride: 1 }", {{1, 1, 1, 3}});
  expect_error<ShapeError>([&] { run_forward(o, {1, 9, 2}); }, {"smaller than the kernel"});
  LayerHarness o2 = make_harness("Pooling", "pooling_param { pool: MAX kernel_h: 1 kernel_w: 2 stride: 1 }",
                                 {{1, 1, 1, 3}});
  run_forward(o2, {1, 9, 2});
  expect_values(test_util::to_vector(o2.top[0]->data), {9, 9});
  test_util::copy_into(o2.top[0]->diff, {1, 2});
  o2.backward();
  expect_values(test_util::to_vector(o2.bottom[0]->diff), {0, 3, 0});
}

TEST(PoolingTest, AveragePadDivisor) {
  // Ones, 3x3 windows, stride 2, pad 1 on 4x4: the divisor counts the padding
  // inside the padded image but not beyond it (the ceil-mode border), as in
  // Caffe and PyTorch avg_pool2d(ceil_mode=True, count_include_pad=True).
  LayerHarness h =
      make_harness("Pooling", "pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 }", {{1, 1, 4, 4}});
  run_forward(h, std::vector<float>(16, 1.0f));
  EXPECT_EQ(h.top[0]->shape(), (Shape{1, 1, 3, 3}));
  const float a = 4.0f / 9, b = 6.0f / 9, c = 2.0f / 6, d = 1.0f / 4;
  expect_values(test_util::to_vector(h.top[0]->data), {a, b, c, b, 1.0f, 0.5f, c, 0.5f, d});

  // Backward spreads dy / divisor over the window's image part.
  test_util::copy_into(h.top[0]->diff, {9, 0, 0, 0, 0, 0, 0, 0, 4});
  h.backward();
  expect_values(test_util::to_vector(h.bottom[0]->diff), {1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1});
}

TEST(PoolingTest, PaddedLastWindowMustStartInside) {
  // 5 wide, kernel 2, stride 2, pad 1: ceil((5 + 2 - 2) / 2) + 1 = 4, but the
  // 4th window would start at 3 * 2 - 1 = 5 >= 5, so Caffe keeps 3 (the
  // same rule drops the 2nd of 2 rows of the 1-high image).
  LayerHarness h = make_harness("Pooling", "pooling_param { pool: MAX kernel_size: 2 stride: 2 pad: 1 }",
                                {{1, 1, 1, 5}});
  run_forward(h, {1, 2, 3, 4, 5});
  EXPECT_EQ(h.top[0]->shape(), (Shape{1, 1, 1, 3}));
  expect_values(test_util::to_vector(h.top[0]->data), {1, 3, 5});
  // Without padding the rule only drops windows that would be empty
  // (kernel < stride in CEIL mode): 5 wide, kernel 1, stride 3 gives 2.
  LayerHarness e = make_harness("Pooling", "pooling_param { pool: AVE kernel_size: 1 stride: 3 }", {{1, 1, 1, 5}});
  run_forward(e, {1, 2, 3, 4, 5});
  EXPECT_EQ(e.top[0]->shape(), (Shape{1, 1, 1, 2}));
  expect_values(test_util::to_vector(e.top[0]->data), {1, 4});
}

TEST(PoolingTest, Global) {
  LayerHarness ave = make_harness("Pooling", "pooling_param { pool: AVE global_pooling: true }", {{2, 1, 2, 3}});
  run_forward(ave, iota(12));
  EXPECT_EQ(ave.top[0]->shape(), (Shape{2, 1, 1, 1}));
  expect_values(test_util::to_vector(ave.top[0]->data), {2.5f, 8.5f});
  LayerHarness mx = make_harness("Pooling", "pooling_param { global_pooling: true }", {{1, 2, 2, 2}});
  run_forward(mx, {3, 1, 4, 1, 5, 9, 2, 6});
  expect_values(test_util::to_vector(mx.top[0]->data), {4, 9});
}

TEST(PoolingTest, FastPathMatchesGeneral) {
  // 2x2 windows with stride 2 and no padding take a special path; compare it
  // with the definition.
  LayerHarness fast = make_harness("Pooling", "pooling_param { kernel_size: 2 stride: 2 }", {{3, 4, 6, 8}});
  Rng rng(9);
  test_util::fill_gaussian(fast.bottom[0]->data, rng);
  fast.setup();
  fast.forward();
  const std::vector<float> x = test_util::to_vector(fast.bottom[0]->data);
  const std::vector<float> y = test_util::to_vector(fast.top[0]->data);
  for (int64_t p = 0; p < 12; ++p)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 4; ++j) {
        const float* q = x.data() + p * 48 + 2 * i * 8 + 2 * j;
        const float want = std::max(std::max(q[0], q[1]), std::max(q[8], q[9]));
        EXPECT_EQ(y[static_cast<size_t>(p * 12 + i * 4 + j)], want);
      }
}

TEST(PoolingTest, EveryCpuPathPoolsLikeThePortableOne) {
  // The 2x2 / stride-2 path's vector versions (AVX2: 8 outputs at a time,
  // AVX-512: 16) against the portable loop, values and the argmax the
  // gradient goes to, on rows of 1 to 41 outputs with odd widths, ties and NaNs.
  struct RestoreIsa {
    ~RestoreIsa() { reset_cpu_isa_for_testing(); }
  } restore;
  auto pool = [](int64_t height, int64_t width, const std::vector<float>& x) {
    LayerHarness h = make_harness("Pooling", "pooling_param { kernel_size: 2 stride: 2 }", {{2, 1, height, width}});
    run_forward(h, x);
    std::vector<float> dy(static_cast<size_t>(h.top[0]->numel()));
    for (size_t i = 0; i < dy.size(); ++i) dy[i] = static_cast<float>(i + 1);
    test_util::copy_into(h.top[0]->diff, dy);
    h.backward();
    return std::make_pair(test_util::to_vector(h.top[0]->data), test_util::to_vector(h.bottom[0]->diff));
  };
  int compared = 0;
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (!cpu_isa_supported(isa)) continue;
    SCOPED_TRACE(cpu_isa_name(isa));
    for (int64_t width = 2; width <= 83; width += 3) {
      const int64_t height = 5;
      Rng rng(static_cast<uint64_t>(width));
      std::vector<float> x(static_cast<size_t>(2 * height * width));
      for (float& v : x) v = std::round(rng.uniform(-4.0f, 4.0f));  // whole numbers: many ties
      for (size_t i = 7; i < x.size(); i += 23) x[i] = std::nanf("");
      force_cpu_isa_for_testing(CpuIsa::kPortable);
      const auto want = pool(height, width, x);
      force_cpu_isa_for_testing(isa);
      const auto got = pool(height, width, x);
      ASSERT_EQ(got.first.size(), want.first.size());
      for (size_t i = 0; i < want.first.size(); ++i) {
        if (std::isnan(want.first[i])) {
          EXPECT_TRUE(std::isnan(got.first[i])) << "width " << width << ", output " << i;
        } else {
          EXPECT_EQ(got.first[i], want.first[i]) << "width " << width << ", output " << i;
        }
      }
      EXPECT_EQ(got.second, want.second) << "width " << width << ": the gradient went to other inputs";
      ++compared;
    }
  }
  if (compared == 0) GTEST_SKIP() << "this CPU runs only the portable path: nothing to compare it with";
}

TEST(PoolingTest, MaxPropagatesNaN) {
  LayerHarness h = make_harness("Pooling", "pooling_param { kernel_size: 2 stride: 2 }", {{1, 1, 2, 4}});
  run_forward(h, {1, std::nanf(""), 3, 4, 5, 6, 7, 8});
  const std::vector<float> y = test_util::to_vector(h.top[0]->data);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], 8.0f);
}

TEST(PoolingTest, Errors) {
  expect_error<ConfigError>(
      [] { make_harness("Pooling", "pooling_param { pool: STOCHASTIC kernel_size: 2 }", {{1, 1, 4, 4}}); },
      {"STOCHASTIC is not supported"});
  expect_error<ConfigError>(
      [] { make_harness("Pooling", "pooling_param { global_pooling: true kernel_size: 2 }", {{1, 1, 4, 4}}); },
      {"global_pooling", "remove kernel_size"});
  expect_error<ConfigError>([] { make_harness("Pooling", "pooling_param { pool: MAX }", {{1, 1, 4, 4}}); },
                            {"missing kernel_size"});
  expect_error<ConfigError>(
      [] { make_harness("Pooling", "pooling_param { kernel_size: 2 pad: 2 }", {{1, 1, 4, 4}}); },
      {"pad 2x2 must be smaller than the kernel 2x2"});
  expect_error<ShapeError>(
      [] {
        LayerHarness h = make_harness("Pooling", "pooling_param { kernel_size: 5 pad: 1 }", {{1, 2, 2, 2}});
        h.setup();
      },
      {"layer 'test' (Pooling)", "input [1, 2, 2, 2] is smaller than the kernel 5x5"});
  expect_error<ShapeError>(
      [] {
        LayerHarness h = make_harness("Pooling", "pooling_param { kernel_size: 2 }", {{4, 4}});
        h.setup();
      },
      {"4-D NCHW"});
}

// --------------------------------------------------------------- InnerProduct

TEST(InnerProductTest, HandCheckedWithAxis) {
  // Bottom [2, 2, 3] with axis 2: each of the 4 rows of 3 maps to 2 outputs.
  LayerHarness h = make_harness("InnerProduct", "inner_product_param { num_output: 2 axis: 2 }", {{2, 2, 3}});
  test_util::copy_into(h.bottom[0]->data, iota(12));
  h.setup();
  test_util::copy_into(h.layer->params()[0].blob->data, {1, 0, -1, 0.5f, 0.5f, 0.5f});
  test_util::copy_into(h.layer->params()[1].blob->data, {10, 20});
  h.forward();
  EXPECT_EQ(h.top[0]->shape(), (Shape{2, 2, 2}));
  // Row r = (3r, 3r+1, 3r+2): out0 = 3r - (3r+2) + 10 = 8, out1 = (9r+3)/2 + 20.
  expect_values(test_util::to_vector(h.top[0]->data), {8, 21.5f, 8, 26, 8, 30.5f, 8, 35});

  test_util::copy_into(h.top[0]->diff, {1, 0, 0, 1, 1, 1, 0, 0});
  for (LayerParam& p : h.layer->params()) p.blob->diff.zero();
  h.backward();
  // dx row = dy_row * W.
  expect_values(test_util::to_vector(h.bottom[0]->diff),
                {1, 0, -1, 0.5f, 0.5f, 0.5f, 1.5f, 0.5f, -0.5f, 0, 0, 0});
  // dW = dy^T x over the 4 rows; db = column sums of dy.
  expect_values(test_util::to_vector(h.layer->params()[0].blob->diff), {6, 8, 10, 9, 11, 13});
  expect_values(test_util::to_vector(h.layer->params()[1].blob->diff), {2, 2});
}

TEST(InnerProductTest, TransposeStoresInputMajorWeights) {
  // Same map with transpose: true: the weight is [K, num_output].
  LayerHarness h = make_harness("InnerProduct",
                                "inner_product_param { num_output: 2 axis: -1 transpose: true bias_term: false }",
                                {{2, 3}});
  test_util::copy_into(h.bottom[0]->data, iota(6));
  h.setup();
  EXPECT_EQ(h.layer->params().size(), 1u);
  EXPECT_EQ(h.layer->params()[0].blob->shape(), (Shape{3, 2}));
  test_util::copy_into(h.layer->params()[0].blob->data, {1, 0.5f, 0, 0.5f, -1, 0.5f});
  h.forward();
  expect_values(test_util::to_vector(h.top[0]->data), {-2, 1.5f, -2, 6});
}

TEST(InnerProductTest, Errors) {
  expect_error<ShapeError>(
      [] {
        LayerHarness h = make_harness("InnerProduct", "inner_product_param { num_output: 2 axis: 3 }", {{2, 3}});
        h.setup();
      },
      {"axis 3 is out of range", "[2, 3]"});
  expect_error<ConfigError>([] { make_harness("InnerProduct", "inner_product_param { num_output: 0 }", {{2, 3}}); },
                            {"num_output must be > 0"});
  LayerHarness h = make_harness("InnerProduct", "inner_product_param { num_output: 2 }", {{2, 3, 2}});
  h.setup();
  h.bottom[0]->resize({2, 3, 3});
  expect_error<ShapeError>([&] { h.forward(); }, {"expected 6 inputs per sample", "[2, 3, 3]"});
}

}  // namespace
}  // namespace strata
