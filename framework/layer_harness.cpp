#include "framework/layer_harness.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <utility>

#include "framework/config/config.h"
#include "framework/error.h"
#include "framework/layer_registry.h"

namespace strata {

void LayerHarness::setup() {
  layer->setup(bottom, top);
  layer->reshape(bottom, top);
}

void LayerHarness::forward() {
  layer->reshape(bottom, top);
  layer->forward_cpu(bottom, top);
}

std::vector<bool> LayerHarness::backward_targets() const {
  std::vector<bool> pd(bottom.size());
  for (size_t i = 0; i < bottom.size(); ++i) pd[i] = layer->can_backward_to(static_cast<int>(i));
  return pd;
}

void LayerHarness::backward() { backward(backward_targets()); }

void LayerHarness::backward(const std::vector<bool>& propagate_down) {
  layer->backward_cpu(top, propagate_down, bottom);
}

LayerSpec make_spec(const std::string& type, const std::string& config, int num_bottoms, int num_tops) {
  const ConfigNode root =
      parse_config_text("layer { name: \"test\" type: \"" + type + "\" " + config + " }", "<test>");
  LayerSpec spec;
  spec.name = "test";
  spec.type = type;
  spec.node = root.children().at(0);
  for (int i = 0; i < num_bottoms; ++i) spec.bottoms.push_back("in" + std::to_string(i));
  for (int i = 0; i < num_tops; ++i) spec.tops.push_back("out" + std::to_string(i));
  return spec;
}

std::unique_ptr<Layer> build_any(const std::string& type, std::string* why) {
  const LayerRegistration& reg = LayerRegistry::instance().find(type);
  const LayerSchema schema = reg.schema();
  std::vector<std::pair<std::string, int>> configs;  // config, bottoms
  if (!schema.examples.empty()) {
    configs.push_back({schema.examples[0].config, static_cast<int>(schema.examples[0].bottom_shapes.size())});
  }
  configs.push_back({"", 0});
  for (const ParamBlockSchema& b : schema.blocks) {
    const std::string& n = b.block;
    if (n == "input_param" || n == "dummy_data_param") configs.push_back({n + " { shape { dim: 1 } }", 0});
    if (n == "hdf5_output_param") configs.push_back({"hdf5_output_param { file_name: 'unused.h5' }", 1});
    if (n.size() >= 10 && n.compare(n.size() - 10, 10, "data_param") == 0) {
      configs.push_back({n + " { source: 'unused' batch_size: 1 }", 0});
      // ImageData also needs a fixed output size.
      configs.push_back({n + " { source: 'unused' batch_size: 1 } transform_param { crop_size: 1 }", 0});
    }
  }
  for (const auto& [config, bottoms] : configs) {
    try {
      return reg.create(make_spec(type, config, bottoms, 1), LayerContext{});
    } catch (const Error& e) {
      if (why) *why = e.what();
    }
  }
  return nullptr;
}

int default_num_tops(const Layer& layer) {
  if (layer.max_tops() >= 0) return layer.max_tops();
  return std::max(1, layer.min_tops());
}

LayerHarness make_harness(const std::string& type, const std::string& config,
                          const std::vector<Shape>& bottom_shapes, Phase phase, uint64_t seed,
                          int num_tops) {
  const LayerRegistration& reg = LayerRegistry::instance().find(type);
  LayerContext ctx;
  ctx.phase = phase;
  ctx.seed = seed;
  const int nb = static_cast<int>(bottom_shapes.size());
  int nt = num_tops;
  if (nt < 0) {
    // Ask a throwaway instance how many tops it takes.
    nt = default_num_tops(*reg.create(make_spec(type, config, nb, 1), ctx));
  }
  LayerHarness h;
  h.layer = reg.create(make_spec(type, config, nb, nt), ctx);
  for (const Shape& s : bottom_shapes) {
    h.bottom_blobs.push_back(std::make_unique<Blob>(s));
    h.bottom.push_back(h.bottom_blobs.back().get());
  }
  for (int i = 0; i < nt; ++i) {
    h.top_blobs.push_back(std::make_unique<Blob>());
    h.top.push_back(h.top_blobs.back().get());
  }
  return h;
}

LayerHarness make_harness(const std::string& type, const LayerExample& example, uint64_t seed) {
  LayerHarness h = make_harness(type, example.config, example.bottom_shapes, example.phase, seed);
  Rng rng(seed * 7919 + 17);
  fill_inputs(example, h.bottom, rng, 2.0f * example.step);
  return h;
}

InputKind input_kind(const LayerExample& example, size_t i) {
  return i < example.inputs.size() ? example.inputs[i] : InputKind::kGaussian;
}

void fill_gaussian(Tensor& t, Rng& rng, float mean, float stddev) {
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = rng.gaussian(mean, stddev);
}

void fill_uniform(Tensor& t, Rng& rng, float lo, float hi) {
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = rng.uniform(lo, hi);
}

void separate_values(const std::vector<float*>& values, float gap) {
  std::vector<float*> pos, neg;
  for (float* v : values) (*v >= 0.0f ? pos : neg).push_back(v);
  // Walk outwards from 0 on each side, pushing each value at least `gap`
  // beyond its predecessor (0 itself counts as the first predecessor).
  std::sort(pos.begin(), pos.end(), [](const float* a, const float* b) { return *a < *b; });
  std::sort(neg.begin(), neg.end(), [](const float* a, const float* b) { return *a > *b; });
  float prev = 0.0f;
  for (float* v : pos) {
    *v = std::max(*v, prev + gap);
    prev = *v;
  }
  prev = 0.0f;
  for (float* v : neg) {
    *v = std::min(*v, prev - gap);
    prev = *v;
  }
}

void fill_inputs(const LayerExample& example, const BlobVec& bottoms, Rng& rng, float min_gap) {
  std::vector<float*> gaussian_values;
  for (size_t i = 0; i < bottoms.size(); ++i) {
    Tensor& t = bottoms[i]->data;
    switch (input_kind(example, i)) {
      case InputKind::kGaussian: {
        fill_gaussian(t, rng);
        float* p = t.data<float>();
        for (int64_t j = 0; j < t.numel(); ++j) gaussian_values.push_back(p + j);
        break;
      }
      case InputKind::kPositive:
        fill_uniform(t, rng, 0.5f, 1.5f);
        break;
      case InputKind::kLabels: {
        STRATA_CHECK(example.label_classes > 0, "an example with kLabels inputs needs label_classes > 0");
        float* p = t.data<float>();
        for (int64_t j = 0; j < t.numel(); ++j) {
          p[j] = static_cast<float>(rng.uniform_int(static_cast<uint64_t>(example.label_classes)));
        }
        break;
      }
    }
  }
  if (min_gap > 0.0f) separate_values(gaussian_values, min_gap);
}

std::vector<float> to_vector(const Tensor& t) {
  const float* p = t.data<float>();
  return std::vector<float>(p, p + t.numel());
}

void copy_into(Tensor& t, const std::vector<float>& v) {
  STRATA_CHECK(static_cast<size_t>(t.numel()) == v.size(), "copy_into: tensor has ", t.numel(),
               " elements, vector ", v.size());
  std::copy(v.begin(), v.end(), t.data<float>());
}

std::vector<float> widened(const Tensor& t) {
  Tensor host = t.device().is_cpu() ? t : t.to(Device::cpu());
  if (host.dtype() == DType::kF32) return to_vector(host);
  Tensor wide(host.shape(), DType::kF32);
  cast_into(wide, host);
  return to_vector(wide);
}

void store_rounded(Tensor& t, const std::vector<float>& v) {
  Tensor wide(t.shape(), DType::kF32);
  copy_into(wide, v);
  if (t.dtype() == DType::kF32) {
    t.copy_from(wide);
    return;
  }
  Tensor narrow(t.shape(), t.dtype());
  cast_into(narrow, wide);
  t.copy_from(narrow);
}

void store_blobs_as(LayerHarness& h, DType storage) {
  h.layer->set_call_dtype(storage);  // as a Net storing in `storage` would set it
  auto restore = [&](Tensor& t) {
    const std::vector<float> values = t.defined() && t.numel() > 0 ? widened(t) : std::vector<float>{};
    Tensor stored(t.numel() > 0 || !t.shape().empty() ? t.shape() : Shape{0}, storage, t.device());
    if (!values.empty()) store_rounded(stored, values);
    t = std::move(stored);
  };
  // But the blobs the layer declares f32 (labels, a loss), as a Net keeps them.
  for (size_t k = 0; k < h.bottom.size(); ++k) {
    if (h.layer->bottom_stays_f32(static_cast<int>(k))) continue;
    restore(h.bottom[k]->data);
    restore(h.bottom[k]->diff);
  }
  for (size_t t = 0; t < h.top.size(); ++t) {
    if (h.layer->top_stays_f32(static_cast<int>(t))) continue;
    restore(h.top[t]->data);
    restore(h.top[t]->diff);
  }
}

void compare_values(std::vector<std::string>& out, const std::string& what, const std::string& a_name,
                    const std::vector<float>& a, const std::string& b_name, const std::vector<float>& b,
                    float tolerance) {
  if (a.size() != b.size()) {
    out.push_back(what + ": " + a_name + " " + std::to_string(a.size()) + " values, " + b_name + " " +
                  std::to_string(b.size()));
    return;
  }
  int reported = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = a[i], y = b[i];
    const double scale = std::max({std::fabs(x), std::fabs(y), 1.0});
    if (!(std::fabs(x - y) <= tolerance * scale) && reported++ < 5) {
      std::ostringstream os;
      os << what << " element " << i << ": " << a_name << " " << x << " vs " << b_name << " " << y << " (tolerance "
         << tolerance << " x " << scale << ")";
      out.push_back(os.str());
    }
  }
  if (reported > 5) out.push_back(what + ": " + std::to_string(reported) + " mismatches in all");
}

std::vector<bool> gradient_targets(const LayerHarness& h, const LayerExample& ex) {
  std::vector<bool> pd = h.backward_targets();
  for (size_t i = 0; i < pd.size(); ++i) {
    if (input_kind(ex, i) == InputKind::kLabels) pd[i] = false;
  }
  return pd;
}

std::vector<std::vector<float>> top_weights(const LayerHarness& h, Rng& rng) {
  std::vector<std::vector<float>> w(h.top.size());
  for (size_t k = 0; k < h.top.size(); ++k) {
    const float lw = h.layer->default_loss_weight(static_cast<int>(k));
    w[k].resize(static_cast<size_t>(h.top[k]->numel()));
    for (float& v : w[k]) v = lw != 0.0f ? lw : rng.gaussian(0.0f, 1.0f);
  }
  return w;
}

CudaTwin make_cuda_twin(const std::string& type, const std::string& config, Phase phase, uint64_t seed,
                        const LayerHarness& cpu, Device device, TwinInPlace in_place) {
  CudaTwin g;
  LayerContext ctx;
  ctx.phase = phase;
  ctx.seed = seed;
  ctx.device = device;
  g.layer = LayerRegistry::instance().find(type).create(
      make_spec(type, config, static_cast<int>(cpu.bottom.size()), static_cast<int>(cpu.top.size())), ctx);
  g.layer->set_call_dtype(cpu.layer->call_dtype());
  // Each blob in the CPU twin's dtype (store_blobs_as).
  auto device_blob = [&](const Shape& shape, DType dtype) {
    auto b = std::make_unique<Blob>();
    b->data = Tensor(shape, dtype, device);
    b->diff = Tensor(shape, dtype, device);
    g.blobs.push_back(std::move(b));
    return g.blobs.back().get();
  };
  for (const Blob* b : cpu.bottom) {
    g.bottom.push_back(device_blob(b->shape(), b->data.dtype()));
    g.bottom.back()->data.copy_from(b->data);
  }
  for (size_t i = 0; i < cpu.top.size(); ++i) {
    g.top.push_back(i == 0 && in_place == TwinInPlace::kYes ? g.bottom[0] : device_blob({0}, cpu.top[i]->data.dtype()));
  }
  return g;
}

void CudaTwin::setup_from(const LayerHarness& cpu) {
  layer->setup(bottom, top);
  std::vector<LayerParam>& gp = layer->params();
  const std::vector<LayerParam>& cp = cpu.layer->params();
  if (gp.size() != cp.size()) {
    fail<ShapeError>(layer->type(), ": the CPU and CUDA layers made different parameters (", cp.size(), " and ",
                     gp.size(), ")");
  }
  const Device device = bottom.empty() ? layer->device() : bottom[0]->data.device();
  for (size_t p = 0; p < gp.size(); ++p) {
    Blob& b = *gp[p].blob;
    if (b.shape() != cp[p].blob->shape()) {
      fail<ShapeError>(layer->type(), ": param '", gp[p].name, "' is ", shape_str(cp[p].blob->shape()),
                       " on the CPU and ", shape_str(b.shape()), " on CUDA");
    }
    if (b.data.device() != device) b.data = Tensor(b.shape(), DType::kF32, device);
    if (b.diff.device() != device) b.diff = Tensor(b.shape(), DType::kF32, device);
    b.data.copy_from(cp[p].blob->data);
  }
  layer->reshape(bottom, top);
}

void CudaTwin::forward() {
  layer->reshape(bottom, top);
  layer->forward_cuda(bottom, top);
}

void CudaTwin::backward(const std::vector<bool>& propagate_down) { layer->backward_cuda(top, propagate_down, bottom); }

std::string set_up_with_shared_params(LayerHarness& a, LayerHarness& b, const std::string& type) {
  a.setup();
  b.setup();
  std::vector<LayerParam>& ap = a.layer->params();
  std::vector<LayerParam>& bp = b.layer->params();
  if (ap.size() != bp.size()) return type + ": the two layers made different parameters";
  for (size_t p = 0; p < ap.size(); ++p) bp[p].blob->data.copy_from(ap[p].blob->data);
  return "";
}

}  // namespace strata
