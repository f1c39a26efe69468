// check_channels_last (framework/layer_check.h): a layer's NHWC path on the
// CPU against its NCHW path on the same inputs, bit for bit.
#include <cmath>

#include "framework/error.h"
#include "framework/layer_check.h"
#include "framework/layer_harness.h"
#include "framework/layer_registry.h"
#include "framework/layout.h"

namespace strata {

namespace {

using Problems = std::vector<std::string>;

// `v`, the values of a blob of shape `s`, laid out from one layout to the
// other (rank 2 or less: the same order).
std::vector<float> relaid(const std::vector<float>& v, const Shape& s, Layout from, Layout to) {
  Tensor src(s), dst(s);
  copy_into(src, v);
  convert_layout_into(dst, to, src, from);
  return to_vector(dst);
}

std::vector<float> to_nhwc(const Tensor& t) { return relaid(to_vector(t), t.shape(), Layout::kNCHW, Layout::kNHWC); }
std::vector<float> to_nchw(const Tensor& t) { return relaid(to_vector(t), t.shape(), Layout::kNHWC, Layout::kNCHW); }

void compare(Problems& out, const std::string& what, const std::vector<float>& nchw, const std::vector<float>& nhwc) {
  compare_values(out, what, "NCHW path", nchw, "NHWC path (laid back)", nhwc, 0.0f);
}

}  // namespace

bool example_takes_channels_last(const std::string& type, const LayerExample& ex) {
  LayerContext ctx;
  ctx.phase = ex.phase;
  const int bottoms = static_cast<int>(ex.bottom_shapes.size());
  const LayerRegistration& reg = LayerRegistry::instance().find(type);
  const int tops = default_num_tops(*reg.create(make_spec(type, ex.config, bottoms, 1), ctx));
  return reg.create(make_spec(type, ex.config, bottoms, tops), ctx)->channels_last() != ChannelsLast::kNo;
}

std::vector<std::string> check_channels_last(const std::string& type, const LayerExample& ex, uint64_t seed) {
  Problems out;
  LayerHarness ref = make_harness(type, ex, seed);  // NCHW
  LayerHarness h = make_harness(type, ex, seed);    // the same inputs, laid out NHWC
  if (h.layer->channels_last() == ChannelsLast::kNo) return {type + " does not take channels-last (NHWC) blobs"};
  h.layer->set_call_layout(Layout::kNHWC);
  for (size_t k = 0; k < ref.bottom.size(); ++k) copy_into(h.bottom[k]->data, to_nhwc(ref.bottom[k]->data));
  if (const std::string why = set_up_with_shared_params(ref, h, type); !why.empty()) return {why};
  std::vector<LayerParam>& rp = ref.layer->params();
  std::vector<LayerParam>& hp = h.layer->params();

  ref.forward();
  h.forward();
  for (size_t k = 0; k < ref.top.size(); ++k) {
    if (ref.top[k]->shape() != h.top[k]->shape()) {
      out.push_back("top " + std::to_string(k) + ": NCHW path " + shape_str(ref.top[k]->shape()) + ", NHWC path " +
                    shape_str(h.top[k]->shape()));
      return out;
    }
    compare(out, "top " + std::to_string(k), to_vector(ref.top[k]->data), to_nchw(h.top[k]->data));
  }
  for (size_t p = 0; p < rp.size(); ++p) {
    compare(out, "param '" + rp[p].name + "' after forward", to_vector(rp[p].blob->data), to_vector(hp[p].blob->data));
  }

  // Backward: the same top gradients (laid out NHWC), bottom gradients NaN
  // (to be overwritten), parameter gradients random (to be accumulated),
  // and NaN in the NHWC values backward does not declare it reads.
  Rng rng(seed + 1);
  const std::vector<std::vector<float>> w = top_weights(ref, rng);
  for (size_t k = 0; k < ref.top.size(); ++k) {
    ref.top[k]->diff.resize(ref.top[k]->shape());
    copy_into(ref.top[k]->diff, w[k]);
    h.top[k]->diff.resize(h.top[k]->shape());
    copy_into(h.top[k]->diff, relaid(w[k], ref.top[k]->shape(), Layout::kNCHW, Layout::kNHWC));
  }
  const std::vector<bool> pd = gradient_targets(ref, ex);
  for (size_t i = 0; i < ref.bottom.size(); ++i) {
    if (!pd[i]) continue;
    ref.bottom[i]->diff.fill(std::nanf(""));
    h.bottom[i]->diff.fill(std::nanf(""));
  }
  for (size_t p = 0; p < rp.size(); ++p) {
    fill_gaussian(rp[p].blob->diff, rng);
    hp[p].blob->diff.copy_from(rp[p].blob->diff);
  }
  const Layer::BackwardReads reads = h.layer->backward_reads();
  for (Blob* b : h.bottom) {
    if (!reads.bottoms) b->data.fill(std::nanf(""));
  }
  for (Blob* t : h.top) {
    if (!reads.tops) t->data.fill(std::nanf(""));
  }
  ref.backward(pd);
  h.backward(pd);
  for (size_t i = 0; i < ref.bottom.size(); ++i) {
    if (!pd[i]) continue;
    compare(out, "bottom " + std::to_string(i) + " gradient", to_vector(ref.bottom[i]->diff), to_nchw(h.bottom[i]->diff));
  }
  for (size_t p = 0; p < rp.size(); ++p) {
    compare(out, "param '" + rp[p].name + "' gradient", to_vector(rp[p].blob->diff), to_vector(hp[p].blob->diff));
  }
  return out;
}

}  // namespace strata
