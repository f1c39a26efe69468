// Parameter update rules (CPU). The Solver calls, once per iteration and in
// this order: scale_gradients (1 / iter_size), clip_gradients (global norm),
// Optimizer::update. Only learnable parameters with lr_mult > 0 take part;
// buffers (BatchNorm statistics) and frozen parameters are never touched.
//
// Per-parameter rate and decay: lr_p = lr * lr_mult, wd_p = weight_decay * decay_mult.
//   SGD       (Caffe)   v = momentum * v + lr_p * (g + wd_p * w);  w -= v
//   Nesterov  (Caffe)   v' = momentum * v + lr_p * (g + wd_p * w);
//                       w -= (1 + momentum) * v' - momentum * v
//   Adam      (torch.optim.Adam) g += wd_p * w; m = b1 m + (1-b1) g; s = b2 s + (1-b2) g^2;
//                       w -= lr_p / (1 - b1^t) * m / (sqrt(s) / sqrt(1 - b2^t) + eps)
//   AdamW     (torch.optim.AdamW) w *= 1 - lr_p * wd_p, then Adam without the L2 term.
// Caffe's adaptive rules (sgd_solvers: AdaGradSolver, RMSPropSolver,
// AdaDeltaSolver), with g = gradient + wd_p * w (or sign(w) for L1):
//   AdaGrad   (Caffe)   h += g^2;                         w -= lr_p * g / (sqrt(h) + delta)
//   RMSProp   (Caffe)   h = d h + (1 - d) g^2 (d = rms_decay); w -= lr_p * g / (sqrt(h) + delta)
//   AdaDelta  (Caffe)   h = m h + (1 - m) g^2 (m = momentum);
//                       u = g * sqrt((hu + delta) / (h + delta));
//                       hu = m hu + (1 - m) u^2;          w -= lr_p * u
// These equal torch.optim.Adagrad, RMSprop (alpha = rms_decay, eps = delta,
// no momentum) and Adadelta (rho = momentum, eps = delta) in exact
// arithmetic; tests/golden/make_solver_golden.py computes them from Caffe's
// formulas and checks that.
// Caffe's SGD keeps the learning rate inside the momentum buffer, so it equals
// torch.optim.SGD (and Nesterov equals nesterov=True) exactly while the rate is
// constant; when the rate changes, Caffe's form lets old velocity keep its old
// rate, torch's rescales it. With regularization L1, g += wd_p * sign(w).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "framework/net.h"
#include "framework/solver/step_ledger.h"
#include "framework/tensor.h"

namespace strata {

// Order: the index of solver_type_names().
enum class SolverType { kSGD, kNesterov, kAdam, kAdamW, kAdaGrad, kAdaDelta, kRMSProp };
enum class Regularization { kL2, kL1 };

// "SGD", "Nesterov", "Adam", "AdamW", "AdaGrad", "AdaDelta", "RMSProp" (Caffe's spelling).
const char* solver_type_name(SolverType t);
const std::vector<std::string>& solver_type_names();

struct OptimizerOptions {
  SolverType type = SolverType::kSGD;
  double momentum = 0.0;     // SGD momentum, Adam beta1, AdaDelta's decay
  double momentum2 = 0.999;  // Adam beta2
  double delta = 1e-8;       // Adam epsilon; AdaGrad, RMSProp, AdaDelta's delta
  double rms_decay = 0.99;   // RMSProp
  double weight_decay = 0.0;
  Regularization regularization = Regularization::kL2;
};

// Does the solver update this parameter?
inline bool is_updated(const NetParam& p) { return p.learnable == Learnable::kYes && p.lr_mult > 0.0f; }

// Multiplies every updated parameter's gradient by `factor`.
// Parameters on a CUDA device: one fused launch for all of them (here and
// below), and the optimizer update likewise (framework/cuda/optimizer_kernels.h).
void scale_gradients(std::vector<NetParam>& params, float factor);
// scale_gradients, and whether every updated gradient is finite afterwards
// (the overflow check of FP16 loss scaling).
bool scale_gradients_check_finite(std::vector<NetParam>& params, float factor);
// scale_gradients_check_finite, and the sum of the squares of the scaled
// gradients (what clip_gradients takes the root of), from one pass (on a CUDA
// device one fused launch, nothing copied to the host but the two results).
// For strategies that combine the norm over ranks (sharded data parallel).
struct GradientStats {
  bool finite = true;
  double sum_squares = 0.0;
};
GradientStats scale_gradients_check(std::vector<NetParam>& params, float factor);
// PyTorch's clip_grad_norm_: the L2 norm over all updated gradients together;
// when norm > max_norm the gradients are scaled by max_norm / (norm + 1e-6).
// max_norm <= 0 disables clipping. Returns the norm before clipping (0 when
// disabled: the norm is then not computed).
double clip_gradients(std::vector<NetParam>& params, double max_norm);

// Results read one step later (framework/solver/step_ledger.h): the same two
// passes with nothing read back. scale_check_gradients_into multiplies by
// 1 / (*slots.scale * divisor) when `loss_scaled` (the FP16 scale lives on the
// device), else by `factor`; sets *slots.nonfinite to 1 on inf or NaN and,
// with `sum`, writes the sum of squares clip_gradients takes the root of to
// *slots.sum_squares. clip_gradients_from clips by that sum.
void scale_check_gradients_into(std::vector<NetParam>& params, float factor, bool loss_scaled, double divisor,
                                bool sum, const StepSlots& slots);
void clip_gradients_from(std::vector<NetParam>& params, const StepSlots& slots, double max_norm);

class Optimizer {
 public:
  explicit Optimizer(const OptimizerOptions& options) : options_(options) {}
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  SolverType type() const { return options_.type; }
  const OptimizerOptions& options() const { return options_; }
  // Names of the history tensors kept per parameter ("momentum"; "exp_avg",
  // "exp_avg_sq"; "history" for AdaGrad and RMSProp; "history",
  // "update_history" for AdaDelta).
  virtual std::vector<std::string> slot_names() const = 0;

  // Creates zeroed history for every updated parameter of `params`. Called
  // once by the Solver; update() and load_state() need it.
  void prepare(const std::vector<NetParam>& params);
  // One update of every updated parameter from its (final) gradient.
  void update(std::vector<NetParam>& params, double lr) { update(params, lr, nullptr); }
  // With a step's slots (results read one step later): the update runs only
  // when *slots->applied, with Adam's t = *slots->updates, both read where
  // they are (on a GPU by the kernels). steps() then follows the records the
  // Solver reads back (set_steps).
  void update(std::vector<NetParam>& params, double lr, const StepSlots* slots);

  // Updates applied so far (Adam's bias-correction step t is steps() + 1).
  int64_t steps() const { return steps_; }
  void set_steps(int64_t s) { steps_ = s; }

  // History as "<param name>.<slot>" -> tensor (shared storage, not copies),
  // in parameter order then slot order.
  std::vector<std::pair<std::string, Tensor>> state_tensors() const;
  // Parameter names that have history, in order.
  std::vector<std::string> state_params() const;

 protected:
  // The update of one parameter over its elements [begin, end); `slots`
  // holds slot_names().size() tensors shaped like it. update() runs the
  // ranges of every parameter in one parallel region (on a GPU one launch
  // does, framework/cuda/optimizer_kernels.h), so small parameters do not
  // each wake the threads.
  using RangeUpdate = std::function<void(int64_t begin, int64_t end)>;
  virtual RangeUpdate update_of(NetParam& p, std::vector<Tensor>& slots, double lr) = 0;

  OptimizerOptions options_;
  int64_t steps_ = 0;

 private:
  std::vector<std::string> names_;           // parameter names, in net order
  std::map<std::string, std::vector<Tensor>> history_;
};

std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& options);

}  // namespace strata
