#include "layers/dropout.h"

#include <cstring>

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/cpu/threads.h"

namespace strata {
namespace {
constexpr int64_t kMinChunk = 32768;
}

DropoutLayer::DropoutLayer(const LayerSpec& spec, const LayerContext& ctx)
    : NeuronLayer(spec, ctx), mask_(Shape{0}, DType::kU8) {
  const ConfigNode& p = block("dropout_param");
  const double ratio = p.get_double("dropout_ratio", 0.5);
  if (!(ratio >= 0.0 && ratio < 1.0)) {  // also rejects NaN
    const ConfigNode* key = p.find("dropout_ratio");
    fail<ConfigError>(where(), " at ", (key ? key->loc() : spec.node.loc()).str(), ": dropout_ratio ", ratio,
                      " is outside [0, 1); it is the probability of dropping an element");
  }
  ratio_ = static_cast<float>(ratio);
  scale_ = static_cast<float>(1.0 / (1.0 - ratio));
}

LayerSchema DropoutLayer::schema() {
  LayerSchema s;
  s.summary = "Inverted dropout: drops with probability dropout_ratio, scales kept values by 1/(1-ratio); identity at TEST";
  s.blocks = {{"dropout_param", {"dropout_ratio"}}};
  // Finite differences run forward twice and a TRAIN forward with ratio > 0
  // draws a new mask each time, so the generic examples are the identity
  // cases (TEST phase, and TRAIN with ratio 0). The TRAIN gradient with a
  // random mask is checked in tests/activation_loss_test.cpp, which replays
  // the same mask by restoring the layer state before each forward.
  LayerExample test_phase;
  test_phase.bottom_shapes = {{2, 3, 4}};
  test_phase.phase = Phase::kTest;
  LayerExample train_no_drop;
  train_no_drop.config = "dropout_param { dropout_ratio: 0 }";
  train_no_drop.bottom_shapes = {{2, 5}};
  s.examples = {test_phase, train_no_drop};
  return s;
}

void DropoutLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  NeuronLayer::reshape(bottom, top);
  if (!is_identity()) mask_.resize(bottom[0]->shape());
}

namespace {

// The NCHW index of memory position j (the mask's order).
int64_t mask_index(const DropoutLayer::ChannelsLastIndex& cl, int64_t j) {
  if (!cl.active()) return j;
  const int64_t c = j % cl.channels, rest = j / cl.channels;  // rest = n * spatial + s
  return ((rest / cl.spatial) * cl.channels + c) * cl.spatial + rest % cl.spatial;
}

}  // namespace

void DropoutLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  const Tensor& x = bottom[0]->data;
  Tensor& y = top[0]->data;
  check_same_storage("Dropout forward", {&x, &y});
  const int64_t n = x.numel();
  if (is_identity()) {
    if (!y.shares_storage_with(x) && n > 0) std::memcpy(y.raw_data(), x.raw_data(), x.nbytes());  // any dtype
    return;
  }
  // Drawn serially so the mask depends only on the RNG state, not on
  // threads; in NCHW order (the NHWC call reads it at each element's NCHW index).
  uint8_t* mask = mask_.data<uint8_t>();
  const float keep = 1.0f - ratio_;
  for (int64_t i = 0; i < n; ++i) mask[i] = rng_.uniform() < keep ? 1 : 0;
  const float scale = scale_;
  const ChannelsLastIndex cl = channels_last_index(x.shape());
  with_float_element(x.dtype(), "Dropout forward", [&](auto e) {
    using E = decltype(e);
    const typename E::T* in = x.data<typename E::T>();
    typename E::T* out = y.data<typename E::T>();
    parallel_for(n, kMinChunk, [&](int64_t b, int64_t end) {
      for (int64_t i = b; i < end; ++i) out[i] = E::store(mask[mask_index(cl, i)] ? E::load(in[i]) * scale : 0.0f);
    });
  });
}

void DropoutLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                                const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const Tensor& dy = top[0]->diff;
  Tensor& dx = bottom[0]->diff;
  check_same_storage("Dropout backward", {&dy, &dx});
  const int64_t n = dy.numel();
  if (is_identity()) {
    if (!dx.shares_storage_with(dy) && n > 0) std::memcpy(dx.raw_data(), dy.raw_data(), dy.nbytes());
    return;
  }
  STRATA_CHECK(mask_.numel() == n, "Dropout backward before forward (mask has ", mask_.numel(),
               " elements, gradient has ", n, ")");
  const uint8_t* mask = mask_.data<uint8_t>();
  const float scale = scale_;
  const ChannelsLastIndex cl = channels_last_index(dy.shape());
  with_float_element(dy.dtype(), "Dropout backward", [&](auto e) {
    using E = decltype(e);
    const typename E::T* g = dy.data<typename E::T>();
    typename E::T* out = dx.data<typename E::T>();
    parallel_for(n, kMinChunk, [&](int64_t b, int64_t end) {
      for (int64_t i = b; i < end; ++i) out[i] = E::store(mask[mask_index(cl, i)] ? E::load(g[i]) * scale : 0.0f);
    });
  });
}

STRATA_REGISTER_LAYER("Dropout", DropoutLayer);

}  // namespace strata
