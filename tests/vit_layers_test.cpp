// Transformer / vision layers beyond the generic and golden tests:
// MultiHeadAttention at a size where the (sample, head) items run on several
// threads, against a direct double-precision reference and against one
// thread; GELU in place; configuration and shape errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/cpu/threads.h"
#include "tests/layer_test_util.h"

namespace strata {
namespace {

using test_util::LayerHarness;
using test_util::make_harness;

// Restores the thread count a test changes.
class ThreadsGuard {
 public:
  ThreadsGuard() : saved_(num_threads()) {}
  ~ThreadsGuard() { set_num_threads(saved_); }

 private:
  int saved_;
};

// softmax(q k^T / sqrt(dh)) v per head, then out_proj; double precision.
std::vector<double> reference_attention(const std::vector<float>& x, const std::vector<float>& in_w,
                                        const std::vector<float>& in_b, const std::vector<float>& out_w,
                                        const std::vector<float>& out_b, int64_t N, int64_t T, int64_t D,
                                        int64_t H) {
  const int64_t dh = D / H;
  std::vector<double> qkv(N * T * 3 * D), ctx(N * T * D), y(N * T * D);
  for (int64_t r = 0; r < N * T; ++r) {
    for (int64_t o = 0; o < 3 * D; ++o) {
      double s = in_b[o];
      for (int64_t i = 0; i < D; ++i) s += static_cast<double>(x[r * D + i]) * in_w[o * D + i];
      qkv[r * 3 * D + o] = s;
    }
  }
  std::vector<double> p(T);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < T; ++i) {
        const double* q = &qkv[(n * T + i) * 3 * D + h * dh];
        double mx = -1e300;
        for (int64_t j = 0; j < T; ++j) {
          const double* k = &qkv[(n * T + j) * 3 * D + D + h * dh];
          double s = 0.0;
          for (int64_t c = 0; c < dh; ++c) s += q[c] * k[c];
          p[j] = s / std::sqrt(static_cast<double>(dh));
          mx = std::max(mx, p[j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j < T; ++j) sum += (p[j] = std::exp(p[j] - mx));
        for (int64_t c = 0; c < dh; ++c) {
          double o = 0.0;
          for (int64_t j = 0; j < T; ++j) o += p[j] / sum * qkv[(n * T + j) * 3 * D + 2 * D + h * dh + c];
          ctx[(n * T + i) * D + h * dh + c] = o;
        }
      }
    }
  }
  for (int64_t r = 0; r < N * T; ++r) {
    for (int64_t o = 0; o < D; ++o) {
      double s = out_b[o];
      for (int64_t i = 0; i < D; ++i) s += ctx[r * D + i] * out_w[o * D + i];
      y[r * D + o] = s;
    }
  }
  return y;
}

struct AttentionRun {
  std::vector<float> y, dx, d_in_w, d_out_w;
};

// Forward and backward of one attention layer (fixed seed) on `threads` threads.
AttentionRun run_attention(int threads, int64_t N, int64_t T, int64_t D, int64_t H,
                           std::vector<double>* reference = nullptr) {
  set_num_threads(threads);
  LayerHarness h = make_harness("MultiHeadAttention",
                                 "attention_param { num_heads: " + std::to_string(H) +
                                     " bias_filler { type: 'gaussian' std: 0.3 } }",
                                 {{N, T, D}}, Phase::kTrain, 7);
  Rng input_rng(3);
  test_util::fill_gaussian(h.bottom[0]->data, input_rng);
  h.setup();
  h.forward();
  auto params = [&](int i) { return test_util::to_vector(h.layer->params()[i].blob->data); };
  if (reference) {
    *reference = reference_attention(test_util::to_vector(h.bottom[0]->data), params(0), params(1), params(2),
                                     params(3), N, T, D, H);
  }
  Rng rng(11);
  test_util::fill_gaussian(h.top[0]->diff, rng);
  h.backward();
  AttentionRun r;
  r.y = test_util::to_vector(h.top[0]->data);
  r.dx = test_util::to_vector(h.bottom[0]->diff);
  r.d_in_w = test_util::to_vector(h.layer->params()[0].blob->diff);
  r.d_out_w = test_util::to_vector(h.layer->params()[2].blob->diff);
  return r;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= tol * (1.0 + std::fabs(want[i])))) {
      if (bad++ < 3) ADD_FAILURE() << what << "[" << i << "]: " << got[i] << " vs " << want[i];
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

// T = 96, dh = 16: large enough that the items are spread over the threads.
TEST(MultiHeadAttention, ManyThreadsMatchReferenceAndOneThread) {
  ThreadsGuard guard;
  const int64_t N = 2, T = 96, D = 32, H = 2;
  std::vector<double> ref;
  const AttentionRun multi = run_attention(std::max(2, hardware_threads()), N, T, D, H, &ref);
  const AttentionRun single = run_attention(1, N, T, D, H);
  ASSERT_EQ(multi.y.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_NEAR(multi.y[i], ref[i], 1e-4 * (1.0 + std::fabs(ref[i]))) << "output element " << i;
  }
  expect_close(multi.y, single.y, 1e-5, "output");
  expect_close(multi.dx, single.dx, 1e-5, "bottom gradient");
  expect_close(multi.d_in_w, single.d_in_w, 1e-5, "in_proj_weight gradient");
  expect_close(multi.d_out_w, single.d_out_w, 1e-5, "out_proj_weight gradient");
}

// The sequence length may change between batches; D may not.
TEST(MultiHeadAttention, SequenceLengthMayChange) {
  LayerHarness h = make_harness("MultiHeadAttention", "attention_param { num_heads: 2 }", {{2, 5, 4}});
  h.setup();
  h.forward();
  h.bottom[0]->resize({3, 7, 4});
  h.forward();
  EXPECT_EQ(h.top[0]->shape(), (Shape{3, 7, 4}));
  h.bottom[0]->resize({3, 7, 6});
  EXPECT_THROW(h.forward(), ShapeError);
}

TEST(MultiHeadAttention, HeadsMustDivideTheDim) {
  LayerHarness h = make_harness("MultiHeadAttention", "attention_param { num_heads: 3 }", {{2, 5, 4}});
  EXPECT_THROW(h.setup(), ShapeError);
  EXPECT_THROW(make_harness("MultiHeadAttention", "attention_param { num_heads: 0 }", {{2, 5, 4}}), ConfigError);
  EXPECT_THROW(make_harness("MultiHeadAttention", "", {{2, 5, 4}}), ConfigError);  // num_heads is required
}

TEST(GELU, InPlaceMatchesOutOfPlace) {
  for (const std::string cfg : {"", "gelu_param { approximate: TANH }"}) {
    SCOPED_TRACE(cfg);
    LayerHarness h = make_harness("GELU", layer_example(cfg, {{2, 3, 4}}), 3);
    h.setup();
    h.forward();
    Rng rng(5);
    test_util::fill_gaussian(h.top[0]->diff, rng);
    const std::vector<float> dy = test_util::to_vector(h.top[0]->diff);
    h.backward();
    const std::vector<float> y = test_util::to_vector(h.top[0]->data);
    const std::vector<float> dx = test_util::to_vector(h.bottom[0]->diff);

    // The same layer type run with top == bottom.
    LayerHarness g = make_harness("GELU", layer_example(cfg, {{2, 3, 4}}), 3);
    Blob& blob = *g.bottom[0];
    const BlobVec io = {&blob};
    g.layer->setup(io, io);
    g.layer->reshape(io, io);
    g.layer->forward_cpu(io, io);
    EXPECT_EQ(test_util::to_vector(blob.data), y);
    test_util::copy_into(blob.diff, dy);
    g.layer->backward_cpu(io, {true}, io);
    EXPECT_EQ(test_util::to_vector(blob.diff), dx);
  }
}

TEST(PatchEmbed, ImageSizeMustBeAMultipleOfThePatch) {
  LayerHarness h = make_harness("PatchEmbed", "patch_embed_param { patch_size: 2 num_output: 3 }", {{1, 3, 4, 5}});
  h.layer->setup(h.bottom, h.top);
  EXPECT_THROW(h.layer->reshape(h.bottom, h.top), ShapeError);
  EXPECT_THROW(make_harness("PatchEmbed", "patch_embed_param { num_output: 3 }", {{1, 3, 4, 4}}), ConfigError);
}

TEST(PositionEmbedding, TokenCountIsFixedAtSetup) {
  LayerHarness h = make_harness("PositionEmbedding", "", {{2, 4, 3}});
  h.setup();
  ASSERT_EQ(h.layer->params().size(), 2u);
  EXPECT_EQ(h.layer->params()[0].name, "class_token");
  EXPECT_EQ(h.layer->params()[1].blob->shape(), (Shape{1, 5, 3}));
  EXPECT_EQ(h.top[0]->shape(), (Shape{2, 5, 3}));
  h.bottom[0]->resize({2, 6, 3});
  EXPECT_THROW(h.forward(), ShapeError);
}

TEST(AdaptivePooling, OutputSizeKeys) {
  EXPECT_THROW(make_harness("AdaptivePooling", "", {{1, 1, 4, 4}}), ConfigError);
  EXPECT_THROW(make_harness("AdaptivePooling", "adaptive_pooling_param { output_size: 2 output_h: 2 }",
                            {{1, 1, 4, 4}}),
               ConfigError);
  EXPECT_THROW(make_harness("AdaptivePooling", "adaptive_pooling_param { output_size: 0 }", {{1, 1, 4, 4}}),
               ConfigError);
  LayerHarness h =
      make_harness("AdaptivePooling", "adaptive_pooling_param { output_h: 2 output_w: 3 }", {{2, 3, 5, 4}});
  h.setup();
  EXPECT_EQ(h.top[0]->shape(), (Shape{2, 3, 2, 3}));
}

}  // namespace
}  // namespace strata
