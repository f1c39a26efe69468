#include "framework/solver/optimizer.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "framework/error.h"
#include "framework/cpu/math.h"
#include "framework/cpu/threads.h"
#ifdef STRATA_WITH_CUDA
#include "framework/cuda/optimizer_kernels.h"
#endif

namespace strata {

namespace {
// Element-wise updates are memory bound; below this size threads cost more than they save.
constexpr int64_t kMinChunk = 1 << 15;

#ifdef STRATA_WITH_CUDA
// The device of the updated parameters (they all live on the net's device).
Device params_device(const std::vector<NetParam>& params) {
  for (const NetParam& p : params) {
    if (is_updated(p)) return p.blob->data.device();
  }
  return Device::cpu();
}

// The fused kernels' table: every updated parameter with `slots` history tensors.
std::vector<cuda::FusedTensor> fused_table(std::vector<NetParam>& params,
                                           std::map<std::string, std::vector<Tensor>>* history) {
  std::vector<cuda::FusedTensor> out;
  for (NetParam& p : params) {
    if (!is_updated(p)) continue;
    cuda::FusedTensor t;
    t.w = p.blob->data.device_data<float>();
    t.g = p.blob->diff.device_data<float>();
    t.n = p.blob->numel();
    t.lr_mult = p.lr_mult;
    t.decay_mult = p.decay_mult;
    if (history) {
      auto it = history->find(p.name);
      STRATA_CHECK(it != history->end(), "optimizer has no history for parameter '", p.name,
                   "'; call prepare() with the net's parameters first");
      std::vector<Tensor>& slots = it->second;
      STRATA_CHECK(slots.front().shape() == p.blob->shape(), "history of '", p.name, "' has shape ",
                   shape_str(slots.front().shape()), ", parameter has ", shape_str(p.blob->shape()));
      if (slots.size() > 0) t.s0 = slots[0].device_data<float>();
      if (slots.size() > 1) t.s1 = slots[1].device_data<float>();
    }
    out.push_back(t);
  }
  return out;
}
#endif
}  // namespace

const std::vector<std::string>& solver_type_names() {
  static const std::vector<std::string> names = {"SGD", "Nesterov", "Adam", "AdamW", "AdaGrad", "AdaDelta", "RMSProp"};
  return names;
}

const char* solver_type_name(SolverType t) { return solver_type_names().at(static_cast<size_t>(t)).c_str(); }

void scale_gradients(std::vector<NetParam>& params, float factor) {
  if (factor == 1.0f) return;
#ifdef STRATA_WITH_CUDA
  const Device d = params_device(params);
  if (!d.is_cpu()) {
    cuda::fused_scale_gradients(fused_table(params, nullptr), factor, cuda::ReadBack::kNo, d.index);
    return;
  }
#endif
  for (NetParam& p : params) {
    if (!is_updated(p)) continue;
    float* g = p.blob->diff.data<float>();
    parallel_for(p.blob->diff.numel(), kMinChunk, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) g[i] *= factor;
    });
  }
}

bool scale_gradients_check_finite(std::vector<NetParam>& params, float factor) {
#ifdef STRATA_WITH_CUDA
  const Device d = params_device(params);
  if (!d.is_cpu()) {
    return cuda::fused_scale_gradients(fused_table(params, nullptr), factor, cuda::ReadBack::kYes, d.index).finite;
  }
#endif
  // One pass over each gradient scales and checks (every step runs this).
  // The check looks at the exponent bits (all ones: inf or NaN) with integer
  // operations, so the loop vectorizes; with factor 1 nothing is written.
  std::atomic<bool> finite{true};
  for (NetParam& p : params) {
    if (!is_updated(p)) continue;
    float* g = p.blob->diff.data<float>();
    parallel_for(p.blob->diff.numel(), kMinChunk, [&](int64_t b, int64_t e) {
      uint32_t bad = 0;
      if (factor != 1.0f) {
        for (int64_t i = b; i < e; ++i) g[i] *= factor;
      }
      for (int64_t i = b; i < e; ++i) {
        uint32_t bits;
        std::memcpy(&bits, g + i, sizeof bits);
        bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
      }
      if (bad) finite.store(false, std::memory_order_relaxed);
    });
  }
  return finite.load();
}

GradientStats scale_gradients_check(std::vector<NetParam>& params, float factor) {
#ifdef STRATA_WITH_CUDA
  const Device d = params_device(params);
  if (!d.is_cpu()) {
    const cuda::GradStats s = cuda::fused_scale_gradients(fused_table(params, nullptr), factor, cuda::ReadBack::kYes, d.index);
    return {s.finite, s.sum_squares};
  }
#endif
  GradientStats out;
  out.finite = scale_gradients_check_finite(params, factor);
  // Serial and in double, as clip_gradients sums.
  for (const NetParam& p : params) {
    if (is_updated(p)) out.sum_squares += sum_squares(p.blob->diff.numel(), p.blob->diff.data<float>());
  }
  return out;
}

namespace {

// Serial and in double: the norm (and so the result) does not depend on the thread count.
double host_sum_squares(const std::vector<NetParam>& params) {
  double sq = 0.0;
  for (const NetParam& p : params) {
    if (is_updated(p)) sq += sum_squares(p.blob->diff.numel(), p.blob->diff.data<float>());
  }
  return sq;
}

double clip_by_sum_squares(std::vector<NetParam>& params, double sq, double max_norm) {
  const double norm = std::sqrt(sq);
  if (norm > max_norm) scale_gradients(params, static_cast<float>(max_norm / (norm + 1e-6)));
  return norm;
}

}  // namespace

double clip_gradients(std::vector<NetParam>& params, double max_norm) {
  if (!(max_norm > 0.0)) return 0.0;
#ifdef STRATA_WITH_CUDA
  const Device d = params_device(params);
  if (!d.is_cpu()) {
    const double sq =
        cuda::fused_scale_gradients(fused_table(params, nullptr), 1.0f, cuda::ReadBack::kYes, d.index).sum_squares;
    return clip_by_sum_squares(params, sq, max_norm);
  }
#endif
  return clip_by_sum_squares(params, host_sum_squares(params), max_norm);
}

void scale_check_gradients_into(std::vector<NetParam>& params, float factor, bool loss_scaled, double divisor,
                                bool sum, const StepSlots& slots) {
#ifdef STRATA_WITH_CUDA
  const Device d = params_device(params);
  if (!d.is_cpu()) {
    cuda::fused_scale_check_on_device(fused_table(params, nullptr), factor, loss_scaled ? slots.scale : nullptr,
                                      divisor, slots.nonfinite, slots.sum_squares, d.index);
    return;
  }
#endif
  if (loss_scaled) factor = static_cast<float>(1.0 / (*slots.scale * divisor));
  *slots.nonfinite = scale_gradients_check_finite(params, factor) ? 0 : 1;
  *slots.sum_squares = sum ? host_sum_squares(params) : 0.0;
}

void clip_gradients_from(std::vector<NetParam>& params, const StepSlots& slots, double max_norm) {
  if (!(max_norm > 0.0)) return;
#ifdef STRATA_WITH_CUDA
  const Device d = params_device(params);
  if (!d.is_cpu()) {
    cuda::fused_clip_on_device(fused_table(params, nullptr), slots.sum_squares, max_norm, d.index);
    return;
  }
#endif
  clip_by_sum_squares(params, *slots.sum_squares, max_norm);
}

void Optimizer::prepare(const std::vector<NetParam>& params) {
  names_.clear();
  history_.clear();
  const size_t slots = slot_names().size();
  for (const NetParam& p : params) {
    if (!is_updated(p)) continue;
    std::vector<Tensor> h;
    // Zero-initialised, on the parameter's device.
    for (size_t s = 0; s < slots; ++s) h.emplace_back(p.blob->shape(), DType::kF32, p.blob->data.device());
    names_.push_back(p.name);
    history_[p.name] = std::move(h);
  }
}

void Optimizer::update(std::vector<NetParam>& params, double lr, const StepSlots* slots) {
#ifdef STRATA_WITH_CUDA
  const Device d = params_device(params);
  if (!d.is_cpu()) {
    cuda::DeviceGate gate;  // results read one step later: the device decides
    if (slots) {
      gate.applied = slots->applied;
      gate.step = slots->updates;
      gate.lr = slots->lr;
    }
    // One launch for every parameter: the same formulas as update_of below.
    const std::vector<cuda::FusedTensor> table = fused_table(params, &history_);
    const bool l1 = options_.regularization == Regularization::kL1;
    if (options_.type == SolverType::kSGD || options_.type == SolverType::kNesterov) {
      cuda::FusedSgdArgs a;
      a.lr = lr;
      a.momentum = options_.momentum;
      a.weight_decay = options_.weight_decay;
      a.nesterov = options_.type == SolverType::kNesterov;
      a.l1 = l1;
      a.gate = gate;
      cuda::fused_sgd(table, a, d.index);
    } else if (options_.type == SolverType::kAdaGrad || options_.type == SolverType::kRMSProp ||
               options_.type == SolverType::kAdaDelta) {
      cuda::FusedAdaptiveArgs a;
      a.lr = lr;
      a.rule = options_.type == SolverType::kAdaGrad   ? cuda::AdaptiveRule::kAdaGrad
               : options_.type == SolverType::kRMSProp ? cuda::AdaptiveRule::kRMSProp
                                                       : cuda::AdaptiveRule::kAdaDelta;
      a.decay = options_.type == SolverType::kRMSProp ? options_.rms_decay : options_.momentum;
      a.delta = options_.delta;
      a.weight_decay = options_.weight_decay;
      a.l1 = l1;
      a.gate = gate;
      cuda::fused_adaptive(table, a, d.index);
    } else {
      cuda::FusedAdamArgs a;
      a.lr = lr;
      a.beta1 = options_.momentum;
      a.beta2 = options_.momentum2;
      a.eps = options_.delta;
      a.weight_decay = options_.weight_decay;
      a.decoupled = options_.type == SolverType::kAdamW;
      a.l1 = l1;
      a.step = steps_ + 1;
      a.gate = gate;
      cuda::fused_adam(table, a, d.index);
    }
    if (!slots) ++steps_;  // else the Solver counts from the records it reads back
    return;
  }
#endif
  if (slots) {
    if (*slots->applied == 0) return;  // the CPU decided already: nothing to apply
    steps_ = *slots->updates - 1;      // t from the record, as the kernels read it
    if (slots->lr) lr = *slots->lr;    // and the learning rate
  }
  // Every parameter's elements cut into pieces of kMinChunk, all run in one
  // parallel region: the element-wise formulas give the same bits however
  // the pieces fall.
  struct Piece {
    size_t update;
    int64_t begin, end;
  };
  std::vector<RangeUpdate> updates;
  std::vector<Piece> pieces;
  for (NetParam& p : params) {
    if (!is_updated(p)) continue;
    auto it = history_.find(p.name);
    STRATA_CHECK(it != history_.end(), "optimizer has no history for parameter '", p.name,
                 "'; call prepare() with the net's parameters first");
    STRATA_CHECK(it->second.front().shape() == p.blob->shape(), "history of '", p.name, "' has shape ",
                 shape_str(it->second.front().shape()), ", parameter has ", shape_str(p.blob->shape()));
    updates.push_back(update_of(p, it->second, lr));
    const int64_t n = p.blob->numel();
    for (int64_t b = 0; b < n; b += kMinChunk) pieces.push_back({updates.size() - 1, b, std::min(n, b + kMinChunk)});
  }
  parallel_for(static_cast<int64_t>(pieces.size()), 1, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) {
      const Piece& piece = pieces[static_cast<size_t>(i)];
      updates[piece.update](piece.begin, piece.end);
    }
  });
  ++steps_;
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state_tensors() const {
  std::vector<std::pair<std::string, Tensor>> out;
  const std::vector<std::string> slots = slot_names();
  for (const std::string& name : names_) {
    const std::vector<Tensor>& h = history_.at(name);
    for (size_t s = 0; s < slots.size(); ++s) out.emplace_back(name + "." + slots[s], h[s]);
  }
  return out;
}

std::vector<std::string> Optimizer::state_params() const { return names_; }

namespace {

float regularizer(Regularization r, float w) {
  if (r == Regularization::kL2) return w;
  return static_cast<float>((w > 0.0f) - (w < 0.0f));
}

// Each optimizer's per-element update over one chunk. The scalars are members
// of a copy and the arrays __restrict (a parameter, its gradient and its
// slots never overlap): read through the update's lambda references instead,
// every store could alias them and the loops would not be vectorised.
struct SgdStep {
  float rate, decay, mom;
  bool nesterov;
  Regularization reg;
  void run(int64_t n, float* __restrict w, const float* __restrict g, float* __restrict v) const {
    for (int64_t i = 0; i < n; ++i) {
      const float grad = decay != 0.0f ? g[i] + decay * regularizer(reg, w[i]) : g[i];
      const float v_new = mom * v[i] + rate * grad;
      w[i] -= nesterov ? (1.0f + mom) * v_new - mom * v[i] : v_new;
      v[i] = v_new;
    }
  }
};

struct AdamStep {
  float l2;
  Regularization reg;
  float beta1, beta2, one_minus_b1, one_minus_b2, bc2_sqrt, eps, shrink, step_size;
  void run(int64_t n, float* __restrict w, const float* __restrict g, float* __restrict m,
           float* __restrict s) const {
    for (int64_t i = 0; i < n; ++i) {
      const float grad = l2 != 0.0f ? g[i] + l2 * regularizer(reg, w[i]) : g[i];
      m[i] = m[i] * beta1 + one_minus_b1 * grad;
      s[i] = s[i] * beta2 + one_minus_b2 * grad * grad;
      const float denom = std::sqrt(s[i]) / bc2_sqrt + eps;
      w[i] = w[i] * shrink - step_size * (m[i] / denom);
    }
  }
};

struct AdaptiveStep {
  float rate, decay, delta;
  bool rms;
  float keep, add;
  Regularization reg;
  void run(int64_t n, float* __restrict w, const float* __restrict g, float* __restrict h) const {
    for (int64_t i = 0; i < n; ++i) {
      const float grad = decay != 0.0f ? g[i] + decay * regularizer(reg, w[i]) : g[i];
      const float hi = rms ? keep * h[i] + add * (grad * grad) : h[i] + grad * grad;
      h[i] = hi;
      w[i] -= rate * grad / (std::sqrt(hi) + delta);
    }
  }
};

struct AdaDeltaStep {
  float rate, decay, delta, mom, one_minus;
  Regularization reg;
  void run(int64_t n, float* __restrict w, const float* __restrict g, float* __restrict h,
           float* __restrict hu) const {
    for (int64_t i = 0; i < n; ++i) {
      const float grad = decay != 0.0f ? g[i] + decay * regularizer(reg, w[i]) : g[i];
      const float hi = mom * h[i] + one_minus * (grad * grad);
      h[i] = hi;
      const float u = grad * std::sqrt((hu[i] + delta) / (hi + delta));
      hu[i] = mom * hu[i] + one_minus * (u * u);
      w[i] -= rate * u;
    }
  }
};

// Caffe's SGD and Nesterov: the velocity holds lr * gradient.
class SgdOptimizer final : public Optimizer {
 public:
  using Optimizer::Optimizer;
  std::vector<std::string> slot_names() const override { return {"momentum"}; }

 protected:
  RangeUpdate update_of(NetParam& p, std::vector<Tensor>& slots, double lr) override {
    const float rate = static_cast<float>(lr * p.lr_mult);
    const float decay = static_cast<float>(options_.weight_decay * p.decay_mult);
    const float mom = static_cast<float>(options_.momentum);
    const bool nesterov = options_.type == SolverType::kNesterov;
    const Regularization reg = options_.regularization;
    const SgdStep k{rate, decay, mom, nesterov, reg};
    float* w = p.blob->data.data<float>();
    const float* g = p.blob->diff.data<float>();
    float* v = slots[0].data<float>();
    return [=](int64_t b, int64_t e) { k.run(e - b, w + b, g + b, v + b); };
  }
};

// torch.optim.Adam / AdamW (amsgrad off).
class AdamOptimizer final : public Optimizer {
 public:
  using Optimizer::Optimizer;
  std::vector<std::string> slot_names() const override { return {"exp_avg", "exp_avg_sq"}; }

 protected:
  RangeUpdate update_of(NetParam& p, std::vector<Tensor>& slots, double lr) override {
    const double local_lr = lr * p.lr_mult;
    const double wd = options_.weight_decay * p.decay_mult;
    const bool decoupled = options_.type == SolverType::kAdamW;
    const Regularization reg = options_.regularization;
    const double b1 = options_.momentum, b2 = options_.momentum2;
    const double t = static_cast<double>(steps_ + 1);
    const float l2 = decoupled ? 0.0f : static_cast<float>(wd);
    const float shrink = decoupled ? static_cast<float>(1.0 - local_lr * wd) : 1.0f;
    const float beta1 = static_cast<float>(b1), beta2 = static_cast<float>(b2);
    const float one_minus_b1 = static_cast<float>(1.0 - b1), one_minus_b2 = static_cast<float>(1.0 - b2);
    const float step_size = static_cast<float>(local_lr / (1.0 - std::pow(b1, t)));
    const float bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(b2, t)));
    const float eps = static_cast<float>(options_.delta);
    const AdamStep k{l2, reg, beta1, beta2, one_minus_b1, one_minus_b2, bc2_sqrt, eps, shrink, step_size};
    float* w = p.blob->data.data<float>();
    const float* g = p.blob->diff.data<float>();
    float* m = slots[0].data<float>();
    float* s = slots[1].data<float>();
    return [=](int64_t b, int64_t e) { k.run(e - b, w + b, g + b, m + b, s + b); };
  }
};

// Caffe's AdaGrad and RMSProp: one history of squared gradients, summed
// (AdaGrad) or averaged with rms_decay (RMSProp). The arithmetic follows
// Caffe's GPU kernels (adagrad_update_gpu, rmsprop_update_gpu) in float.
class AdaptiveOptimizer final : public Optimizer {
 public:
  using Optimizer::Optimizer;
  std::vector<std::string> slot_names() const override { return {"history"}; }

 protected:
  RangeUpdate update_of(NetParam& p, std::vector<Tensor>& slots, double lr) override {
    const float rate = static_cast<float>(lr * p.lr_mult);
    const float decay = static_cast<float>(options_.weight_decay * p.decay_mult);
    const float delta = static_cast<float>(options_.delta);
    const bool rms = options_.type == SolverType::kRMSProp;
    const float keep = rms ? static_cast<float>(options_.rms_decay) : 1.0f;
    const float add = rms ? static_cast<float>(1.0 - options_.rms_decay) : 1.0f;
    const Regularization reg = options_.regularization;
    const AdaptiveStep k{rate, decay, delta, rms, keep, add, reg};
    float* w = p.blob->data.data<float>();
    const float* g = p.blob->diff.data<float>();
    float* h = slots[0].data<float>();
    return [=](int64_t b, int64_t e) { k.run(e - b, w + b, g + b, h + b); };
  }
};

// Caffe's AdaDelta (adadelta_update_gpu): running averages of squared
// gradients and of squared updates, both decayed by `momentum`.
class AdaDeltaOptimizer final : public Optimizer {
 public:
  using Optimizer::Optimizer;
  std::vector<std::string> slot_names() const override { return {"history", "update_history"}; }

 protected:
  RangeUpdate update_of(NetParam& p, std::vector<Tensor>& slots, double lr) override {
    const float rate = static_cast<float>(lr * p.lr_mult);
    const float decay = static_cast<float>(options_.weight_decay * p.decay_mult);
    const float delta = static_cast<float>(options_.delta);
    const float mom = static_cast<float>(options_.momentum);
    const float one_minus = static_cast<float>(1.0 - options_.momentum);
    const Regularization reg = options_.regularization;
    const AdaDeltaStep k{rate, decay, delta, mom, one_minus, reg};
    float* w = p.blob->data.data<float>();
    const float* g = p.blob->diff.data<float>();
    float* h = slots[0].data<float>();
    float* hu = slots[1].data<float>();
    return [=](int64_t b, int64_t e) { k.run(e - b, w + b, g + b, h + b, hu + b); };
  }
};

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& options) {
  switch (options.type) {
    case SolverType::kSGD:
    case SolverType::kNesterov:
      return std::make_unique<SgdOptimizer>(options);
    case SolverType::kAdam:
    case SolverType::kAdamW:
      return std::make_unique<AdamOptimizer>(options);
    case SolverType::kAdaGrad:
    case SolverType::kRMSProp:
      return std::make_unique<AdaptiveOptimizer>(options);
    case SolverType::kAdaDelta:
      return std::make_unique<AdaDeltaOptimizer>(options);
  }
  fail<Error>("unknown solver type ", static_cast<int>(options.type));
}

}  // namespace strata
