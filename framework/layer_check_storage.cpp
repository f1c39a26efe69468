// check_storage (framework/layer_check.h): a layer's 16-bit path on the CPU
// against its f32 path on the same (rounded) inputs.
#include <algorithm>
#include <cmath>

#include "framework/error.h"
#include "framework/layer_check.h"
#include "framework/layer_harness.h"
#include "framework/layer_registry.h"

namespace strata {

namespace {

using Problems = std::vector<std::string>;

// `v` rounded to `storage` and widened again: what the f32 path's values
// become once stored.
std::vector<float> rounded(const std::vector<float>& v, DType storage) {
  Tensor t(Shape{static_cast<int64_t>(v.size())}, storage);
  store_rounded(t, v);
  return widened(t);
}

void compare(Problems& out, const std::string& what, const std::vector<float>& f32_path,
             const std::vector<float>& reduced_path, float tolerance) {
  compare_values(out, what, "f32 path (rounded)", f32_path, "16-bit path", reduced_path, tolerance);
}

std::vector<float> nans(int64_t n) { return std::vector<float>(static_cast<size_t>(n), std::nanf("")); }

}  // namespace

bool example_takes_storage(const std::string& type, const LayerExample& ex, DType storage, Device device) {
  LayerContext ctx;
  ctx.phase = ex.phase;
  ctx.device = device;
  const int bottoms = static_cast<int>(ex.bottom_shapes.size());
  const LayerRegistration& reg = LayerRegistry::instance().find(type);
  const int tops = default_num_tops(*reg.create(make_spec(type, ex.config, bottoms, 1), ctx));
  return reg.create(make_spec(type, ex.config, bottoms, tops), ctx)->takes_storage(storage);
}

float storage_check_tolerance(DType storage, int roundings) {
  const float per_rounding = [&] {
    switch (storage) {
      case DType::kBF16: return 1.6e-2f;  // 2 x 2^-7
      case DType::kF16: return 2e-3f;     // 2 x 2^-10
      default: return 0.0f;
    }
  }();
  return per_rounding * static_cast<float>(std::max(1, roundings));
}

float storage_check_tolerance(const std::string& type, DType storage) {
  return storage_check_tolerance(storage, LayerRegistry::instance().find(type).schema().storage_roundings);
}

std::vector<std::string> check_storage(const std::string& type, const LayerExample& ex, DType storage,
                                       uint64_t seed) {
  if (storage != DType::kBF16 && storage != DType::kF16) {
    fail<Error>("check_storage: ", dtype_name(storage), " is not a 16-bit storage dtype (bf16, f16)");
  }
  const float tolerance = storage_check_tolerance(type, storage);
  Problems out;
  LayerHarness ref = make_harness(type, ex, seed);  // f32 blobs
  LayerHarness h = make_harness(type, ex, seed);    // the same inputs, stored in `storage`
  if (!h.layer->takes_storage(storage)) return {type + " does not take blobs stored in " + dtype_name(storage)};
  // What a blob holds once stored: rounded, but where the layer declares it f32.
  auto stored_bottom = [&](size_t k, const std::vector<float>& v) {
    return h.layer->bottom_stays_f32(static_cast<int>(k)) ? v : rounded(v, storage);
  };
  auto stored_top = [&](size_t t, const std::vector<float>& v) {
    return h.layer->top_stays_f32(static_cast<int>(t)) ? v : rounded(v, storage);
  };
  auto top_dtype = [&](size_t t) { return h.layer->top_stays_f32(static_cast<int>(t)) ? DType::kF32 : storage; };
  for (size_t k = 0; k < ref.bottom.size(); ++k) {
    copy_into(ref.bottom[k]->data, stored_bottom(k, to_vector(ref.bottom[k]->data)));
  }
  store_blobs_as(h, storage);
  if (const std::string why = set_up_with_shared_params(ref, h, type); !why.empty()) return {why};
  std::vector<LayerParam>& rp = ref.layer->params();
  std::vector<LayerParam>& hp = h.layer->params();

  ref.forward();
  h.forward();
  for (size_t k = 0; k < ref.top.size(); ++k) {
    if (h.top[k]->data.dtype() != top_dtype(k)) {
      out.push_back("top " + std::to_string(k) + " became " + dtype_name(h.top[k]->data.dtype()) +
                    " (a layer keeps its tops' dtype: resize, not a new Tensor)");
      return out;
    }
    if (ref.top[k]->shape() != h.top[k]->shape()) {
      out.push_back("top " + std::to_string(k) + ": f32 path " + shape_str(ref.top[k]->shape()) + ", 16-bit path " +
                    shape_str(h.top[k]->shape()));
      return out;
    }
    compare(out, "top " + std::to_string(k), stored_top(k, to_vector(ref.top[k]->data)), widened(h.top[k]->data),
            tolerance);
  }
  for (size_t p = 0; p < rp.size(); ++p) {
    compare(out, "param '" + rp[p].name + "' after forward", to_vector(rp[p].blob->data), widened(hp[p].blob->data),
            tolerance);
  }

  // Backward: the same top gradients (rounded), bottom gradients NaN (to be
  // overwritten), parameter gradients random (to be accumulated, in f32).
  Rng rng(seed + 1);
  std::vector<std::vector<float>> w = top_weights(ref, rng);
  for (size_t k = 0; k < ref.top.size(); ++k) {
    w[k] = stored_top(k, w[k]);
    ref.top[k]->diff.resize(ref.top[k]->shape());
    copy_into(ref.top[k]->diff, w[k]);
    h.top[k]->diff.resize(h.top[k]->shape());
    store_rounded(h.top[k]->diff, w[k]);
  }
  const std::vector<bool> pd = gradient_targets(ref, ex);
  for (size_t i = 0; i < ref.bottom.size(); ++i) {
    if (!pd[i]) continue;
    ref.bottom[i]->diff.fill(std::nanf(""));
    store_rounded(h.bottom[i]->diff, nans(h.bottom[i]->numel()));
  }
  for (size_t p = 0; p < rp.size(); ++p) {
    fill_gaussian(rp[p].blob->diff, rng);
    hp[p].blob->diff.copy_from(rp[p].blob->diff);
  }
  const Layer::BackwardReads reads = h.layer->backward_reads();
  for (Blob* b : h.bottom) {
    if (!reads.bottoms) store_rounded(b->data, nans(b->numel()));
  }
  for (Blob* t : h.top) {
    if (!reads.tops) store_rounded(t->data, nans(t->numel()));
  }
  ref.backward(pd);
  h.backward(pd);
  for (size_t i = 0; i < ref.bottom.size(); ++i) {
    if (!pd[i]) continue;
    compare(out, "bottom " + std::to_string(i) + " gradient", stored_bottom(i, to_vector(ref.bottom[i]->diff)),
            widened(h.bottom[i]->diff), tolerance);
  }
  for (size_t p = 0; p < rp.size(); ++p) {
    compare(out, "param '" + rp[p].name + "' gradient", to_vector(rp[p].blob->diff), widened(hp[p].blob->diff),
            tolerance);
  }
  return out;
}

}  // namespace strata
