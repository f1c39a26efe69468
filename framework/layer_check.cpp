#include "framework/layer_check.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "framework/error.h"
#include "framework/layer_harness.h"

namespace strata {

namespace {

using Problems = std::vector<std::string>;

int64_t first_nan(const Tensor& t) {
  const float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (std::isnan(p[i])) return i;
  }
  return -1;
}

void no_nan(Problems& out, const Tensor& t, const std::string& what) {
  const int64_t i = first_nan(t);
  if (i >= 0) out.push_back(what + " has NaN (first at index " + std::to_string(i) + ")");
}

void set_top_diffs(LayerHarness& h, const std::vector<std::vector<float>>& w) {
  for (size_t k = 0; k < h.top.size(); ++k) {
    h.top[k]->diff.resize(h.top[k]->shape());
    copy_into(h.top[k]->diff, w[k]);
  }
}

// J for the current inputs; the layer's RNG is rewound first so that
// stochastic layers draw the same numbers on every evaluation.
double objective(LayerHarness& h, const std::string& state, const std::vector<std::vector<float>>& w,
                 Problems& out) {
  h.layer->load_state(state);
  h.forward();
  double j = 0.0;
  for (size_t k = 0; k < h.top.size(); ++k) {
    const float* y = h.top[k]->data.data<float>();
    if (static_cast<size_t>(h.top[k]->numel()) != w[k].size()) {
      out.push_back("top " + std::to_string(k) + " changed size between forwards");
      return 0.0;
    }
    for (size_t i = 0; i < w[k].size(); ++i) j += static_cast<double>(w[k][i]) * y[i];
  }
  return j;
}

// Analytic against numeric gradients of one blob: the first few mismatches.
void compare(Problems& out, const std::string& what, const std::vector<float>& analytic,
             const std::vector<double>& numeric, float tolerance) {
  int reported = 0;
  for (size_t i = 0; i < analytic.size(); ++i) {
    const double a = analytic[i];
    const double n = numeric[i];
    const double scale = std::max({std::fabs(a), std::fabs(n), 1.0});
    if (!(std::fabs(a - n) <= tolerance * scale)) {
      if (reported++ < 5) {
        std::ostringstream os;
        os << what << " element " << i << ": analytic " << a << " vs numeric " << n << " (tolerance " << tolerance
           << " x " << scale << ")";
        out.push_back(os.str());
      }
    }
  }
  if (reported > 5) out.push_back(what + ": " + std::to_string(reported) + " mismatches in all");
}

// Central differences of J with respect to every element of `data`.
std::vector<double> numeric_gradient(LayerHarness& h, Tensor& data, const std::string& state,
                                     const std::vector<std::vector<float>>& w, float step, Problems& out) {
  std::vector<double> g(static_cast<size_t>(data.numel()));
  float* p = data.data<float>();
  for (int64_t i = 0; i < data.numel(); ++i) {
    const float v = p[i];
    p[i] = v + step;
    const double plus = objective(h, state, w, out);
    p[i] = v - step;
    const double minus = objective(h, state, w, out);
    p[i] = v;
    // The actual float distance between the two points, not 2 * step.
    g[static_cast<size_t>(i)] = (plus - minus) / (static_cast<double>(v + step) - static_cast<double>(v - step));
  }
  return g;
}

// Tops after a zero-batch forward: batch 0, or (for outputs that do not
// follow the batch: a loss, per-class accuracy) free of NaN.
void zero_batch_tops(Problems& out, const LayerHarness& h) {
  for (size_t k = 0; k < h.top.size(); ++k) {
    const Tensor& t = h.top[k]->data;
    if (t.ndim() >= 1 && t.dim(0) == 0) continue;
    no_nan(out, t, "top " + std::to_string(k) + " " + shape_str(t.shape()) + " of a zero batch");
  }
}

void zero_batch_backward(Problems& out, LayerHarness& h, const LayerExample& ex, uint64_t seed) {
  Rng rng(seed + 2);
  set_top_diffs(h, top_weights(h, rng));
  const std::vector<bool> pd = gradient_targets(h, ex);
  for (size_t i = 0; i < h.bottom.size(); ++i) h.bottom[i]->diff.resize(h.bottom[i]->shape());
  h.backward(pd);
  for (const LayerParam& p : h.layer->params()) no_nan(out, p.blob->diff, "param '" + p.name + "' gradient after a zero batch");
}

std::vector<Shape> zero_batch(const std::vector<Shape>& shapes) {
  std::vector<Shape> out = shapes;
  for (Shape& s : out) {
    if (!s.empty()) s[0] = 0;
  }
  return out;
}

void prefix_all(Problems& out, size_t from, const std::string& prefix) {
  for (size_t i = from; i < out.size(); ++i) out[i] = prefix + out[i];
}

}  // namespace

std::string describe_example(const std::string& type, const LayerExample& ex) {
  std::ostringstream os;
  os << type << " example {" << ex.config << "} bottoms";
  for (const Shape& s : ex.bottom_shapes) os << " " << shape_str(s);
  os << " phase " << phase_name(ex.phase);
  return os.str();
}

std::vector<std::string> check_gradients(const std::string& type, const LayerExample& ex, uint64_t seed) {
  Problems out;
  LayerHarness h = make_harness(type, ex, seed);
  h.setup();
  const std::string state = h.layer->save_state();
  h.layer->load_state(state);
  h.forward();
  Rng rng(seed + 1);
  const std::vector<std::vector<float>> w = top_weights(h, rng);

  // Analytic gradients. NaN-filled bottom diffs catch a layer that adds to
  // them or skips elements; random parameter diffs check accumulation.
  const std::vector<bool> pd = gradient_targets(h, ex);
  set_top_diffs(h, w);
  for (size_t i = 0; i < h.bottom.size(); ++i) {
    h.bottom[i]->diff.resize(h.bottom[i]->shape());
    if (pd[i]) h.bottom[i]->diff.fill(std::nanf(""));
  }
  std::vector<LayerParam>& params = h.layer->params();
  std::vector<std::vector<float>> offsets(params.size());
  for (size_t p = 0; p < params.size(); ++p) {
    Tensor& d = params[p].blob->diff;
    fill_gaussian(d, rng);
    offsets[p] = to_vector(d);
  }
  h.backward(pd);
  std::vector<std::vector<float>> bottom_grads(h.bottom.size());
  for (size_t i = 0; i < h.bottom.size(); ++i) {
    if (pd[i]) bottom_grads[i] = to_vector(h.bottom[i]->diff);
  }
  std::vector<std::vector<float>> param_grads(params.size());
  for (size_t p = 0; p < params.size(); ++p) {
    param_grads[p] = to_vector(params[p].blob->diff);
    for (size_t i = 0; i < param_grads[p].size(); ++i) param_grads[p][i] -= offsets[p][i];
  }

  // What backward_reads() leaves out may be lost before backward (the Net
  // lends its memory on), and in a net that stores its activations in bf16
  // it is not converted to f32 for the call (framework/net_storage.cpp): the
  // same backward with those values replaced by bf16 tensors of NaN must give
  // the same gradients, bit for bit, without taking them as f32.
  const Layer::BackwardReads reads = h.layer->backward_reads();
  if (!reads.bottoms || !reads.tops) {
    std::vector<std::vector<float>> inputs;
    for (const Blob* b : h.bottom) inputs.push_back(to_vector(b->data));
    h.layer->load_state(state);
    h.forward();
    set_top_diffs(h, w);
    std::vector<std::pair<Tensor*, Tensor>> undeclared;  // each value left out, and its f32 tensor
    auto leave_out = [&](Tensor& t) {
      for (const auto& u : undeclared) {
        if (u.first == &t) return;
      }
      undeclared.emplace_back(&t, t);
      t = Tensor(t.shape(), DType::kBF16, t.device());
      t.fill_bytes(0xff);  // NaN
    };
    for (size_t i = 0; i < h.bottom.size(); ++i) {
      const bool also_top = std::find(h.top.begin(), h.top.end(), h.bottom[i]) != h.top.end();
      if (!reads.bottoms && !(also_top && reads.tops)) leave_out(h.bottom[i]->data);
      if (pd[i]) h.bottom[i]->diff.fill(std::nanf(""));
    }
    if (!reads.tops) {
      for (Blob* t : h.top) {
        const bool also_bottom = std::find(h.bottom.begin(), h.bottom.end(), t) != h.bottom.end();
        if (!(also_bottom && reads.bottoms)) leave_out(t->data);
      }
    }
    for (size_t p = 0; p < params.size(); ++p) copy_into(params[p].blob->diff, offsets[p]);
    bool same = true;
    try {
      h.backward(pd);
    } catch (const Error& e) {
      same = false;
      out.push_back(std::string("backward takes a value backward_reads() leaves out (bottoms ") +
                    (reads.bottoms ? "yes" : "no") + ", tops " + (reads.tops ? "yes" : "no") + ") as f32: " +
                    e.what() + "; a net storing bf16 does not convert it: take it only where it is read, "
                    "or declare the read");
    }
    for (auto& [tensor, f32] : undeclared) *tensor = f32;
    if (!same) {
      for (size_t i = 0; i < h.bottom.size(); ++i) copy_into(h.bottom[i]->data, inputs[i]);
      return out;  // the gradients below would not be this layer's
    }
    for (size_t i = 0; i < h.bottom.size() && same; ++i) {
      if (pd[i]) same = to_vector(h.bottom[i]->diff) == bottom_grads[i];
    }
    for (size_t p = 0; p < params.size() && same; ++p) {
      std::vector<float> g = to_vector(params[p].blob->diff);
      for (size_t i = 0; i < g.size(); ++i) g[i] -= offsets[p][i];
      same = g == param_grads[p];
    }
    if (!same) {
      out.push_back(std::string("backward reads more than backward_reads() declares (bottoms ") +
                    (reads.bottoms ? "yes" : "no") + ", tops " + (reads.tops ? "yes" : "no") +
                    "): with the undeclared values NaN the gradients differ; declare what backward reads");
    }
    // The inputs again, for the numeric gradients below.
    for (size_t i = 0; i < h.bottom.size(); ++i) copy_into(h.bottom[i]->data, inputs[i]);
  }

  // Numeric gradients.
  for (size_t i = 0; i < h.bottom.size(); ++i) {
    if (!pd[i]) continue;
    const std::vector<double> n = numeric_gradient(h, h.bottom[i]->data, state, w, ex.step, out);
    compare(out, "bottom " + std::to_string(i) + " gradient", bottom_grads[i], n, ex.tolerance);
  }
  for (size_t p = 0; p < params.size(); ++p) {
    if (params[p].learnable != Learnable::kYes) continue;
    const std::vector<double> n = numeric_gradient(h, params[p].blob->data, state, w, ex.step, out);
    compare(out, "param '" + params[p].name + "' gradient", param_grads[p], n, ex.tolerance);
  }
  return out;
}

std::vector<std::string> check_zero_batch(const std::string& type, const LayerExample& ex, uint64_t seed) {
  Problems out;
  const std::vector<Shape> shapes = zero_batch(ex.bottom_shapes);
  {
    const size_t from = out.size();
    LayerHarness h = make_harness(type, ex.config, shapes, ex.phase, seed);
    h.setup();
    h.forward();
    zero_batch_tops(out, h);
    zero_batch_backward(out, h, ex, seed);
    prefix_all(out, from, "set up with a zero batch: ");
  }
  {
    const size_t from = out.size();
    LayerHarness h = make_harness(type, ex, seed);
    h.setup();
    h.forward();
    for (size_t i = 0; i < h.bottom.size(); ++i) h.bottom[i]->resize(shapes[i]);
    h.forward();
    zero_batch_tops(out, h);
    zero_batch_backward(out, h, ex, seed);
    prefix_all(out, from, "zero batch after a full one: ");
  }
  return out;
}

std::vector<std::string> check_extreme_values(const std::string& type, const LayerExample& ex, uint64_t seed) {
  Problems out;
  for (const float scale : {1e4f, -1e4f, 1e-30f}) {
    const size_t from = out.size();
    LayerHarness h = make_harness(type, ex, seed);
    for (size_t i = 0; i < h.bottom.size(); ++i) {
      const InputKind kind = input_kind(ex, i);
      if (kind == InputKind::kLabels) continue;
      const float s = kind == InputKind::kPositive ? std::fabs(scale) : scale;
      float* p = h.bottom[i]->data.data<float>();
      for (int64_t j = 0; j < h.bottom[i]->numel(); ++j) p[j] *= s;
    }
    h.setup();
    h.forward();
    for (size_t k = 0; k < h.top.size(); ++k) no_nan(out, h.top[k]->data, "top " + std::to_string(k));
    Rng rng(seed + 3);
    set_top_diffs(h, top_weights(h, rng));
    const std::vector<bool> pd = gradient_targets(h, ex);
    for (size_t i = 0; i < h.bottom.size(); ++i) h.bottom[i]->diff.resize(h.bottom[i]->shape());
    h.backward(pd);
    for (size_t i = 0; i < h.bottom.size(); ++i) {
      if (pd[i]) no_nan(out, h.bottom[i]->diff, "bottom " + std::to_string(i) + " gradient");
    }
    for (const LayerParam& p : h.layer->params()) no_nan(out, p.blob->diff, "param '" + p.name + "' gradient");
    std::ostringstream os;
    os << "inputs scaled by " << scale << ": ";
    prefix_all(out, from, os.str());
  }
  return out;
}

}  // namespace strata
