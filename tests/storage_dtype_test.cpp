// Activations stored in bf16 or f16 (NetOptions::storage_dtype,
// framework/net_storage.cpp): the conversions, which blobs are stored
// reduced, a net whose every stored value and gradient is the f32 net's
// rounded at each layer's edge (bit for bit), training that gives the same
// bits in every memory layout and with recomputation, a layer that takes
// the stored dtype itself, and what a layer that reads more than it declares
// is told.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/cpu/cpu_isa.h"
#include "framework/cpu/gemm_bf16.h"
#include "framework/dtype.h"
#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/net.h"
#include "framework/rng.h"
#include "framework/solver/solver.h"
#include "framework/solver/solver_config.h"
#include "tests/test_util.h"
#include "tests/train_util.h"
#include "tests/undeclared_read_layer.h"

namespace strata {
namespace {

uint32_t bits_of(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return x;
}

float from_bits(uint32_t x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// Values that test the rounding: ties to even, the edges of f16's range
// (largest finite, overflow, subnormals, underflow), signed zero, inf, NaN.
std::vector<float> edge_values() {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.5f, 3.14159265f, 65504.0f, 65520.0f, 1e6f, -1e30f,
                          6.1e-5f, 5.96e-8f, 2.98e-8f, 1e-10f, 1.0f + 1.0f / 256.0f, 1.0f + 3.0f / 256.0f,
                          1.0f + 1.0f / 2048.0f, 1.0f + 3.0f / 2048.0f,
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(), from_bits(0x3f808000u), from_bits(0x3f818000u)};
  Rng rng(11);
  for (int i = 0; i < 200; ++i) v.push_back(static_cast<float>(rng.gaussian(0.0f, 100.0f)));
  return v;
}

Tensor f32_tensor(const std::vector<float>& v) {
  Tensor t(Shape{static_cast<int64_t>(v.size())});
  std::memcpy(t.data<float>(), v.data(), v.size() * sizeof(float));
  return t;
}

// ------------------------------------------------------------- cast_into ----

TEST(CastInto, RoundsAsTheScalarConversionsDo) {
  const std::vector<float> v = edge_values();
  const Tensor src = f32_tensor(v);
  for (DType to : {DType::kBF16, DType::kF16}) {
    Tensor narrow(src.shape(), to);
    cast_into(narrow, src);
    Tensor back(src.shape());
    cast_into(back, narrow);
    const uint16_t* h = narrow.data<uint16_t>();
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t want = to == DType::kBF16 ? float_to_bf16(v[i]) : float_to_f16(v[i]);
      EXPECT_EQ(h[i], want) << dtype_name(to) << " of " << v[i];
      const float round_trip = to == DType::kBF16 ? bf16_to_float(want) : f16_to_float(want);
      if (std::isnan(v[i])) {
        EXPECT_TRUE(std::isnan(back.data<float>()[i]));
      } else {
        EXPECT_EQ(bits_of(back.data<float>()[i]), bits_of(round_trip)) << dtype_name(to) << " of " << v[i];
      }
    }
  }
  // Ties go to even: 1 + 2^-8 lies halfway between two bf16 values and
  // rounds down to 1; 1 + 3 * 2^-8 rounds up to 1 + 2^-6.
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 1.0f / 256.0f)), 1.0f);
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 3.0f / 256.0f)), 1.0f + 4.0f / 256.0f);
  EXPECT_TRUE(std::isinf(f16_to_float(float_to_f16(65520.0f))));  // beyond f16's largest: inf
}

TEST(CastInto, BetweenTheTwoHalvesGoesThroughF32) {
  const std::vector<float> v = edge_values();
  const Tensor src = f32_tensor(v);
  Tensor b(src.shape(), DType::kBF16), h(src.shape(), DType::kF16), h_direct(src.shape(), DType::kF16);
  cast_into(b, src);
  Tensor wide(src.shape());
  cast_into(wide, b);
  cast_into(h, wide);
  cast_into(h_direct, b);
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(h_direct.data<uint16_t>()[i], h.data<uint16_t>()[i]) << v[i];
  // The same dtype is a copy.
  Tensor same(src.shape());
  cast_into(same, src);
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(bits_of(same.data<float>()[i]), bits_of(v[i]));
}

TEST(CastInto, RefusesOtherCountsAndIntegerTypes) {
  Tensor a(Shape{4}), b(Shape{5}, DType::kBF16), i(Shape{4}, DType::kI32);
  EXPECT_CONTAINS(test::error_of<ShapeError>([&] { cast_into(b, a); }), "same element count");
  EXPECT_CONTAINS(test::error_of<ShapeError>([&] { cast_into(i, a); }), "f32, f16 or bf16");
}

// ------------------------------------------------------ which blobs ----

// x and y come from an Input, loss is an output: kept f32. h1, h2, h3 are
// made and read by layers only: stored reduced.
const char* kChain = R"(
layer { name: "in" type: "Input" top: "x" top: "y" input_param { shape { dim: 3 dim: 24 } } }
layer { name: "ip1" type: "InnerProduct" bottom: "x" top: "h1" inner_product_param { num_output: 32 weight_filler { type: "gaussian" std: 0.3 } bias_filler { type: "gaussian" std: 0.1 } } }
layer { name: "relu1" type: "ReLU" bottom: "h1" top: "h1" }
layer { name: "ip2" type: "InnerProduct" bottom: "h1" top: "h2" inner_product_param { num_output: 24 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "tanh" type: "TanH" bottom: "h2" top: "h3" }
layer { name: "loss" type: "EuclideanLoss" bottom: "h3" bottom: "y" top: "loss" }
)";

// kChain with its TanH layer replaced by `layer` (a whole `layer { }` block).
std::string chain_with(const std::string& layer) {
  std::string text = kChain;
  const std::string tanh = R"(layer { name: "tanh" type: "TanH" bottom: "h2" top: "h3" })";
  text.replace(text.find(tanh), tanh.size(), layer);
  return text;
}

std::unique_ptr<Net> make_net(DType storage, BlobMemory memory, const std::string& text = kChain) {
  NetOptions o;
  o.storage_dtype = storage;
  o.blob_memory = memory;
  return std::make_unique<Net>(parse_config_text(text, "net.prototxt"), o);
}

TEST(StorageDtype, BlobsOnlyLayersTouchAreStoredReduced) {
  for (BlobMemory memory : {BlobMemory::kSeparate, BlobMemory::kByLifetime}) {
    auto net = make_net(DType::kBF16, memory);
    for (const char* name : {"h1", "h2", "h3"}) {
      EXPECT_EQ(net->blob(name).data.dtype(), DType::kBF16) << name;
      EXPECT_EQ(net->blob(name).diff.dtype(), DType::kBF16) << name;
      EXPECT_EQ(net->storage_dtype_of(net->blob(name)), DType::kBF16);
    }
    for (const char* name : {"x", "y", "loss"}) {
      EXPECT_EQ(net->blob(name).data.dtype(), DType::kF32) << name;
      EXPECT_EQ(net->storage_dtype_of(net->blob(name)), DType::kF32);
    }
    for (const NetParam& p : net->params()) {
      EXPECT_EQ(p.blob->data.dtype(), DType::kF32) << p.name;
      EXPECT_EQ(p.blob->diff.dtype(), DType::kF32) << p.name;
    }
    const StorageReport& r = net->storage_report();
    EXPECT_EQ(r.reduced, 3);
    EXPECT_EQ(r.kept_f32, 3);
    // ip1 (a bf16 copy of its f32 input x) and the loss (f32 copies of h3);
    // the InnerProducts, ReLU and TanH take bf16 as it is.
    EXPECT_EQ(r.cast_layers, 2) << r.str();
    EXPECT_CONTAINS(r.str(), "stored in bf16: 3 blob(s)");
    // A blob code outside the layers reads goes back to f32.
    net->keep_blobs({"h2"});
    EXPECT_EQ(net->blob("h2").data.dtype(), DType::kF32);
    EXPECT_EQ(net->blob("h2").diff.dtype(), DType::kF32);
    EXPECT_EQ(net->storage_report().reduced, 2);
  }
  EXPECT_EQ(make_net(DType::kF32, BlobMemory::kByLifetime)->storage_report().str(), "");
  const std::string msg = test::error_of<ConfigError>([] { make_net(DType::kI32, BlobMemory::kByLifetime); });
  EXPECT_CONTAINS(msg, "cannot be stored in i32");
}

TEST(StorageDtype, HalfTheActivationBytesInTheArena) {
  auto f32 = make_net(DType::kF32, BlobMemory::kByLifetime);
  auto bf16 = make_net(DType::kBF16, BlobMemory::kByLifetime);
  // The three reduced blobs' values and gradients take half; each call's f32
  // copies (at most one layer's blobs) are planned at their step beside them.
  EXPECT_LT(bf16->blob_plan().peak_bytes - bf16->blob_plan().peak_scratch,
            f32->blob_plan().peak_bytes - f32->blob_plan().peak_scratch);
  EXPECT_GT(bf16->storage_report().cast_bytes, 0u);
  EXPECT_EQ(bf16->blob("h1").data.nbytes(), f32->blob("h1").data.nbytes() / 2);
}

// --------------------------------------------------- the f32 net rounded ----

void round_in_place(Tensor& t, DType to) {
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    p[i] = to == DType::kBF16 ? bf16_to_float(float_to_bf16(p[i])) : f16_to_float(float_to_f16(p[i]));
  }
}

std::vector<float> widened(const Tensor& t) {
  Tensor wide(t.shape());
  cast_into(wide, t);
  return test::values(wide);
}

void fill_inputs(Net& net, uint64_t seed) {
  Rng rng(seed);
  for (const char* in : {"x", "y"}) {
    float* d = net.blob(in).data.data<float>();
    for (int64_t i = 0; i < net.blob(in).numel(); ++i) d[i] = static_cast<float>(rng.uniform(-1, 1));
  }
}

// The reduced net computes what the f32 net computes when every stored value
// and gradient is rounded to the storage dtype as its layer finishes: the same
// bits in the loss, every stored value, and every parameter's gradient.
// The InnerProducts, ReLU and the middle layer in TanH's place (TanH,
// Sigmoid, Flatten) take the 16-bit blobs as they are (ip1 a 16-bit copy of
// its f32 input x, rounded in the reference too); ELU and the loss get f32
// copies: both ways round where the f32 net is rounded here.
// On a CPU with AMX the InnerProducts' bf16 path multiplies on
// bf16 operands (the weight rounded, products summed in pairs: bits of its
// own, checked within tolerance by LayerStorage); the rounding at the
// layers' edges that this test is about is shown on the f32 GEMM's path.
struct F32GemmOnly {
  F32GemmOnly() {
    if (gemm_bf16_available()) force_cpu_isa_for_testing(CpuIsa::kAvx2);
  }
  ~F32GemmOnly() { reset_cpu_isa_for_testing(); }
  F32GemmOnly(const F32GemmOnly&) = delete;
  F32GemmOnly& operator=(const F32GemmOnly&) = delete;
};

TEST(StorageDtype, EveryStoredValueAndGradientIsTheF32NetsRoundedAtTheLayersEdge) {
  const F32GemmOnly f32_gemm;
  for (const char* middle : {"TanH", "Sigmoid", "ELU", "Flatten"}) {
  for (DType storage : {DType::kBF16, DType::kF16}) {
    for (BlobMemory memory : {BlobMemory::kSeparate, BlobMemory::kByLifetimeChecked}) {
      SCOPED_TRACE(std::string(middle) + " " + dtype_name(storage));
      const std::string text =
          chain_with(std::string(R"(layer { name: "mid" type: ")") + middle + R"(" bottom: "h2" top: "h3" })");
      auto reduced = make_net(storage, memory, text);
      auto ref = make_net(DType::kF32, BlobMemory::kSeparate, text);
      fill_inputs(*reduced, 4);
      fill_inputs(*ref, 4);
      round_in_place(ref->blob("x").data, storage);  // what ip1, taking the storage dtype, reads
      const float loss = reduced->forward();
      // The reference, layer by layer, rounding each stored top.
      float ref_loss = 0;
      for (int i = 0; i < ref->num_layers(); ++i) {
        ref_loss += ref->forward(i, i);
        for (const std::string& name : {std::string("h1"), std::string("h2"), std::string("h3")}) {
          Blob& b = ref->blob(name);
          for (Blob* top : ref->tops(i)) {
            if (top == &b) round_in_place(b.data, storage);
          }
        }
      }
      EXPECT_EQ(bits_of(loss), bits_of(ref_loss)) << dtype_name(storage);
      // Under SEPARATE every value outlives the step; compare them.
      if (memory == BlobMemory::kSeparate) {
        for (const char* name : {"h1", "h2", "h3"}) {
          EXPECT_EQ(widened(reduced->blob(name).data), test::values(ref->blob(name).data)) << name;
        }
      }
      reduced->backward();
      for (int i = ref->num_layers() - 1; i >= 0; --i) {
        ref->backward(i, i);
        for (const std::string& name : {std::string("h1"), std::string("h2"), std::string("h3")}) {
          Blob& b = ref->blob(name);
          for (Blob* bottom : ref->bottoms(i)) {
            if (bottom == &b) round_in_place(b.diff, storage);
          }
        }
      }
      ASSERT_EQ(reduced->params().size(), ref->params().size());
      for (size_t p = 0; p < ref->params().size(); ++p) {
        EXPECT_EQ(test::values(reduced->params()[p].blob->diff), test::values(ref->params()[p].blob->diff))
            << dtype_name(storage) << " " << ref->params()[p].name;
      }
    }
  }
  }
}

// A layer that takes bf16 reading an f32 blob (an Input) gets a bf16 copy of
// it, so that its blobs are of one dtype: r = relu(round(x)).
TEST(StorageDtype, ALayerThatTakesBf16GetsBf16CopiesOfTheF32Blobs) {
  const std::string text = R"(
layer { name: "in" type: "Input" top: "x" top: "y" input_param { shape { dim: 2 dim: 40 } shape { dim: 2 dim: 4 } } }
layer { name: "relu" type: "ReLU" bottom: "x" top: "r" }
layer { name: "ip" type: "InnerProduct" bottom: "r" top: "h" inner_product_param { num_output: 4 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "h" bottom: "y" top: "loss" }
)";
  auto net = make_net(DType::kBF16, BlobMemory::kSeparate, text);
  EXPECT_EQ(net->blob("x").data.dtype(), DType::kF32);
  EXPECT_EQ(net->blob("r").data.dtype(), DType::kBF16);
  fill_inputs(*net, 6);
  net->forward();
  net->backward();
  const std::vector<float> x = test::values(net->blob("x").data);
  const std::vector<float> r = widened(net->blob("r").data);
  ASSERT_EQ(r.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float rounded = bf16_to_float(float_to_bf16(x[i]));
    EXPECT_EQ(bits_of(r[i]), bits_of(rounded > 0.0f ? rounded : 0.0f * rounded)) << i;  // ReLUOp: -0 below 0
  }
  // relu's forward and backward: the input's bf16 copy; the loss: f32 copies of h (ip takes bf16).
  EXPECT_EQ(net->storage_report().cast_layers, 2) << net->storage_report().str();
}

// A layer that takes 16 bits sizes its scratch by its call dtype, which the
// net sets before it plans: the convolution's f32 chunk buffers and the
// InnerProducts' row blocks get their places in the arena (no call grows the
// shared buffer), also for conv1 and ip1, whose inputs are f32 blobs handed
// to them as 16-bit copies.
TEST(StorageDtype, The16BitCallsScratchIsPlanned) {
  const std::string text = R"(
layer { name: "in" type: "Input" top: "x" top: "y" input_param { shape { dim: 2 dim: 3 dim: 10 dim: 10 } shape { dim: 2 dim: 5 } } }
layer { name: "conv1" type: "Convolution" bottom: "x" top: "c1" convolution_param { num_output: 8 kernel_size: 3 weight_filler { type: "xavier" } } }
layer { name: "conv2" type: "Convolution" bottom: "c1" top: "c2" convolution_param { num_output: 8 kernel_size: 3 weight_filler { type: "xavier" } } }
layer { name: "ip1" type: "InnerProduct" bottom: "c2" top: "h" inner_product_param { num_output: 5 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "h" bottom: "y" top: "loss" }
)";
  for (DType storage : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(storage));
    auto net = make_net(storage, BlobMemory::kByLifetimeChecked, text);
    auto call_dtype = [&](const char* layer) { return net->layer(net->layer_index(layer)).call_dtype(); };
    for (const char* layer : {"conv1", "conv2", "ip1"}) EXPECT_EQ(call_dtype(layer), storage) << layer;
    EXPECT_EQ(call_dtype("loss"), DType::kF32);
    const size_t planned = net->blob_plan().peak_bytes;
    fill_inputs(*net, 3);
    net->forward();
    net->backward();
    EXPECT_EQ(net->memory_report().workspace_bytes, 0u) << "a 16-bit call took the shared scratch: sized for f32";
    EXPECT_EQ(net->blob_plan().peak_bytes, planned) << "the first step planned again";
  }
  // An f32 net's layers call in f32.
  auto f32 = make_net(DType::kF32, BlobMemory::kByLifetime, text);
  EXPECT_EQ(f32->layer(f32->layer_index("conv2")).call_dtype(), DType::kF32);
}

// Two nets of the same function (`a` and `b`, the same parameter shapes)
// train alike bit for bit over two steps (the second with the running
// statistics updated once), stored in `storage`, in a checked plan.
void expect_same_training_bits(Net& a, Net& b) {
  ASSERT_EQ(a.params().size(), b.params().size());
  for (size_t p = 0; p < a.params().size(); ++p) b.params()[p].blob->data.copy_from(a.params()[p].blob->data);
  fill_inputs(a, 5);
  fill_inputs(b, 5);
  for (int step = 0; step < 2; ++step) {
    const float la = a.forward(), lb = b.forward();
    EXPECT_EQ(bits_of(la), bits_of(lb));
    EXPECT_TRUE(std::isfinite(la));
    a.zero_param_diffs();
    b.zero_param_diffs();
    a.backward();
    b.backward();
    for (size_t p = 0; p < a.params().size(); ++p) {
      EXPECT_EQ(test::values(a.params()[p].blob->diff), test::values(b.params()[p].blob->diff)) << a.params()[p].name;
      EXPECT_EQ(test::values(a.params()[p].blob->data), test::values(b.params()[p].blob->data)) << a.params()[p].name;
    }
  }
}

const char* kConvHead = R"(
layer { name: "in" type: "Input" top: "x" top: "y" input_param { shape { dim: 3 dim: 2 dim: 6 dim: 6 } shape { dim: 3 dim: 5 } } }
layer { name: "conv" type: "Convolution" bottom: "x" top: "c" convolution_param { num_output: 4 kernel_size: 3 weight_filler { type: "gaussian" std: 0.4 } } }
)";
const char* kProjectionTail = R"(
layer { name: "ip" type: "InnerProduct" bottom: "r" top: "h" inner_product_param { num_output: 5 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "h" bottom: "y" top: "loss" }
)";

// BatchNorm's kept copy of its normalised input, in bytes.
size_t bn_kept_bytes(const Net& net) { return net.layer(net.layer_index("bn")).kept_bytes(); }

// BatchNorm and Scale in place, as Caffe's nets use them (conv -> BatchNorm
// -> Scale -> ReLU on one blob), in f32 and taking 16-bit blobs: what they
// keep for backward (BatchNorm's normalised input, Scale's copy of the
// input it overwrites) is stored in the call dtype and placed by the plan,
// and the in-place net gives the same bits as the same layers out of place
// (whose 16-bit paths LayerStorage checks against the f32 ones). Out of
// place BatchNorm keeps nothing: its backward reads its top, which Scale
// reads anyway.
TEST(StorageDtype, BatchNormAndScaleInPlaceGiveTheBitsOfOutOfPlace) {
  const std::string scale = R"(scale_param { bias_term: true filler { type: "gaussian" mean: 1 std: 0.5 } bias_filler { type: "gaussian" std: 0.5 } })";
  const std::string in_place = std::string(kConvHead) + R"(
layer { name: "bn" type: "BatchNorm" bottom: "c" top: "c" }
layer { name: "scale" type: "Scale" bottom: "c" top: "c" )" + scale + R"( }
layer { name: "relu" type: "ReLU" bottom: "c" top: "c" }
layer { name: "id" type: "Reshape" bottom: "c" top: "r" reshape_param { shape { dim: 0 dim: -1 } } }
)" + kProjectionTail;
  const std::string apart = std::string(kConvHead) + R"(
layer { name: "bn" type: "BatchNorm" bottom: "c" top: "b" }
layer { name: "scale" type: "Scale" bottom: "b" top: "s" )" + scale + R"( }
layer { name: "relu" type: "ReLU" bottom: "s" top: "t" }
layer { name: "id" type: "Reshape" bottom: "t" top: "r" reshape_param { shape { dim: 0 dim: -1 } } }
)" + kProjectionTail;
  for (DType storage : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(storage));
    auto a = make_net(storage, BlobMemory::kByLifetimeChecked, in_place);
    auto b = make_net(storage, BlobMemory::kByLifetimeChecked, apart);
    for (const char* layer : {"bn", "scale"}) {
      EXPECT_EQ(a->layer(a->layer_index(layer)).call_dtype(), storage) << layer;
    }
    EXPECT_EQ(a->blob("c").data.dtype(), storage);
    EXPECT_EQ(bn_kept_bytes(*a), size_t{3 * 4 * 4 * 4} * dtype_size(storage));  // Scale and ReLU overwrite c
    EXPECT_EQ(bn_kept_bytes(*b), 0u);
    EXPECT_TRUE(b->layer(b->layer_index("bn")).backward_reads().tops);
    // What they keep is the plan's, not theirs for the whole run: the layers
    // own no more than their per-channel statistics (and the convolution's
    // nothing), far less than one [3, 4, 4, 4] blob.
    EXPECT_LT(a->memory_report().layer_bytes, size_t{3 * 4 * 4 * 4 * 2}) << a->memory_report().str();
    expect_same_training_bits(*a, *b);
  }
}

// A BatchNorm whose top a later layer overwrites in place (here a ReLU, no
// Scale) keeps its normalised input; reading the top would see the ReLU's
// output. Trained alike with the ReLU out of place, where it reads the top.
TEST(StorageDtype, BatchNormKeepsItsNormalisedInputWhereALaterLayerOverwritesItsTop) {
  const std::string overwritten = std::string(kConvHead) + R"(
layer { name: "bn" type: "BatchNorm" bottom: "c" top: "b" }
layer { name: "relu" type: "ReLU" bottom: "b" top: "b" }
layer { name: "id" type: "Reshape" bottom: "b" top: "r" reshape_param { shape { dim: 0 dim: -1 } } }
)" + kProjectionTail;
  const std::string kept = std::string(kConvHead) + R"(
layer { name: "bn" type: "BatchNorm" bottom: "c" top: "b" }
layer { name: "relu" type: "ReLU" bottom: "b" top: "t" }
layer { name: "id" type: "Reshape" bottom: "t" top: "r" reshape_param { shape { dim: 0 dim: -1 } } }
)" + kProjectionTail;
  for (DType storage : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(storage));
    auto a = make_net(storage, BlobMemory::kByLifetimeChecked, overwritten);
    auto b = make_net(storage, BlobMemory::kByLifetimeChecked, kept);
    EXPECT_GT(bn_kept_bytes(*a), 0u);
    EXPECT_FALSE(a->layer(a->layer_index("bn")).backward_reads().tops);
    EXPECT_EQ(bn_kept_bytes(*b), 0u);
    expect_same_training_bits(*a, *b);
  }
}

// -------------------------------------------------------------- training ----

SolverConfig small_solver(const std::string& precision, const std::string& memory, bool recompute = false) {
  return test::small_conv_solver(memory, "", recompute ? "  recompute { from: \"conv1\" to: \"drop\" }\n" : "",
                                 "precision: " + precision);
}

TEST(StorageDtype, TrainingGivesTheSameBitsInEveryMemoryLayout) {
  for (const char* precision : {"BF16", "FP16"}) {
    SCOPED_TRACE(precision);
    test::expect_layouts_train_alike([&](const std::string& memory) { return small_solver(precision, memory); });
  }
}

TEST(StorageDtype, RecomputeGivesTheSameBits) {
  std::vector<float> plain_losses, recomputed_losses;
  const auto plain = test::train_to_end(small_solver("BF16", "BY_LIFETIME"), &plain_losses);
  const auto recomputed = test::train_to_end(small_solver("BF16", "BY_LIFETIME", true), &recomputed_losses);
  EXPECT_EQ(recomputed, plain);
  EXPECT_EQ(recomputed_losses, plain_losses);
}

TEST(StorageDtype, TheSolverStoresReducedOnTheCpuAndTrainsCloseToF32) {
  Solver bf16(small_solver("BF16", "BY_LIFETIME"));
  EXPECT_EQ(bf16.net().blob("conv1").data.dtype(), DType::kBF16);
  EXPECT_EQ(bf16.net().blob("loss").data.dtype(), DType::kF32);
  std::vector<float> f32_losses, bf16_losses, f16_losses;
  test::train_to_end(small_solver("FP32", "BY_LIFETIME"), &f32_losses);
  test::train_to_end(small_solver("BF16", "BY_LIFETIME"), &bf16_losses);
  test::train_to_end(small_solver("FP16", "BY_LIFETIME"), &f16_losses);
  ASSERT_EQ(bf16_losses.size(), f32_losses.size());
  for (size_t i = 0; i < f32_losses.size(); ++i) {
    // bf16 keeps 8 bits of mantissa, f16 11: the losses stay within their rounding.
    EXPECT_NEAR(bf16_losses[i], f32_losses[i], 0.02 * std::fabs(f32_losses[i]) + 1e-3) << i;
    EXPECT_NEAR(f16_losses[i], f32_losses[i], 0.005 * std::fabs(f32_losses[i]) + 1e-3) << i;
  }
  EXPECT_NE(bf16_losses, f32_losses) << "bf16 storage changed nothing: is it stored reduced?";
  const std::string msg = test::error_of<ConfigError>([] { Solver s(small_solver("TF32", "BY_LIFETIME")); });
  EXPECT_CONTAINS(msg, "TF32 is a tensor-core mode");
}

// ------------------------------------------- a layer that takes bf16 ----

// y = x, reading and writing bf16 itself: the Net hands it the stored tensors.
class Bf16CopyLayer : public Layer {
 public:
  using Layer::Layer;
  static LayerSchema schema() { return {}; }
  bool takes_storage(DType dtype) const override { return dtype == DType::kF32 || dtype == DType::kBF16; }
  BackwardReads backward_reads() const override { return {false, false}; }
  void reshape(const BlobVec& bottom, const BlobVec& top) override { top[0]->reshape_like(*bottom[0]); }
  void forward_cpu(const BlobVec& bottom, const BlobVec& top) override {
    seen_dtype = bottom[0]->data.dtype();
    EXPECT_EQ(top[0]->data.dtype(), seen_dtype);
    std::memcpy(top[0]->data.raw_data(), bottom[0]->data.raw_data(), bottom[0]->data.nbytes());
  }
  void backward_cpu(const BlobVec& top, const std::vector<bool>&, const BlobVec& bottom) override {
    EXPECT_EQ(bottom[0]->diff.dtype(), top[0]->diff.dtype());
    std::memcpy(bottom[0]->diff.raw_data(), top[0]->diff.raw_data(), top[0]->diff.nbytes());
  }
  static DType seen_dtype;
};
DType Bf16CopyLayer::seen_dtype = DType::kU8;

TEST(StorageDtype, ALayerThatTakesTheStoredDtypeGetsNoCopies) {
  ScopedLayerRegistration reg(layer_registration<Bf16CopyLayer>("Bf16CopyForTest"));
  auto made = make_net(DType::kBF16, BlobMemory::kByLifetimeChecked,
                       chain_with(R"(layer { name: "copy" type: "Bf16CopyForTest" bottom: "h2" top: "h3" })"));
  Net& net = *made;
  // ip1 (a bf16 copy of its f32 input) and the loss (f32 copies); the InnerProducts take bf16.
  EXPECT_EQ(net.storage_report().cast_layers, 2) << net.storage_report().str();
  fill_inputs(net, 2);
  net.forward();
  EXPECT_EQ(Bf16CopyLayer::seen_dtype, DType::kBF16);
  net.backward();
  for (const NetParam& p : net.params()) {
    for (float g : test::values(p.blob->diff)) ASSERT_TRUE(std::isfinite(g)) << p.name;
  }
}

// ----------------------------------------------------- labels stay f32 ----

// 300 classes: 257 and 299 are not bf16 values (they round to 256 and 300),
// and the labels reach the loss and the accuracy through a Reshape and the
// net's Split (the labels fan out to two layers), both layers that take
// 16 bits. The labels stay f32 all the way, and so do the loss and the
// accuracy; the net trains as the f32 net does within bf16's rounding.
TEST(StorageDtype, LabelsStayF32OnTheirWayToTheLossAndTheAccuracy) {
  const std::string text = R"(
layer { name: "in" type: "Input" top: "x" top: "label" input_param { shape { dim: 4 dim: 16 } shape { dim: 4 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "score" inner_product_param { num_output: 300 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "relabel" type: "Reshape" bottom: "label" top: "label_r" reshape_param { shape { dim: 4 dim: 1 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "score" bottom: "label_r" top: "loss" }
layer { name: "acc" type: "Accuracy" bottom: "score" bottom: "label_r" top: "acc" accuracy_param { top_k: 300 } }
)";
  const F32GemmOnly f32_gemm;
  for (DType storage : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(storage));
    auto reduced = make_net(storage, BlobMemory::kByLifetimeChecked, text);
    auto ref = make_net(DType::kF32, BlobMemory::kSeparate, text);
    EXPECT_EQ(reduced->storage_dtype_of(reduced->blob("score")), storage);
    for (const char* name : {"label", "label_r", "loss", "acc"}) {
      EXPECT_EQ(reduced->storage_dtype_of(reduced->blob(name)), DType::kF32) << name;
    }
    for (Net* net : {reduced.get(), ref.get()}) {
      Rng rng(5);
      float* x = net->blob("x").data.data<float>();
      for (int64_t i = 0; i < net->blob("x").numel(); ++i) x[i] = static_cast<float>(rng.uniform(-1, 1));
      const float labels[] = {257, 299, 3, 2047};
      std::memcpy(net->blob("label").data.data<float>(), labels, sizeof(labels));
    }
    // 2047 is no class of 300: both nets name it (a label rounded to 2048
    // would be named so).
    EXPECT_CONTAINS(test::error_of<Error>([&] { reduced->forward(); }), "2047");
    for (Net* net : {reduced.get(), ref.get()}) net->blob("label").data.data<float>()[3] = 255;
    const float loss = reduced->forward();
    const float ref_loss = ref->forward();
    EXPECT_NEAR(loss, ref_loss, 0.02f * std::fabs(ref_loss));
    // top_k = 300 counts every labelled sample, whatever the scores: a label
    // rounded out of range would be named instead.
    EXPECT_EQ(reduced->blob("acc").data.data<float>()[0], 1.0f);
    reduced->backward();
    ref->backward();
    const std::vector<float> g = test::values(reduced->params()[0].blob->diff);
    const std::vector<float> rg = test::values(ref->params()[0].blob->diff);
    ASSERT_EQ(g.size(), rg.size());
    double err = 0, norm = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      err = std::max(err, std::fabs(static_cast<double>(g[i]) - rg[i]));
      norm = std::max(norm, std::fabs(static_cast<double>(rg[i])));
    }
    EXPECT_LT(err, 0.02 * norm);
  }
}

// ------------------------------------------ an undeclared read, named ----

// In every memory layout, not only the checked one: the value it did not
// declare is still in the stored dtype when its backward runs.
TEST(StorageDtype, ALayerThatReadsWhatItDoesNotDeclareIsNamed) {
  ScopedLayerRegistration reg(layer_registration<test::UndeclaredReadLayer>("UndeclaredReadForStorageTest"));
  auto made = make_net(DType::kBF16, BlobMemory::kSeparate,
                       chain_with(R"(layer { name: "sq" type: "UndeclaredReadForStorageTest" bottom: "h2" top: "h3" })"));
  Net& net = *made;
  fill_inputs(net, 2);
  net.forward();
  const std::string msg = test::error_of<Error>([&] { net.backward(); });
  EXPECT_CONTAINS(msg, "layer 'sq' (UndeclaredReadForStorageTest)");
  EXPECT_CONTAINS(msg, "tensor holds bf16 but was accessed as f32");
  EXPECT_CONTAINS(msg, "Layer::backward_reads");
}

}  // namespace
}  // namespace strata
