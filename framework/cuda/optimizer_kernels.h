// Fused optimizer kernels: one launch updates every parameter of a kind
// (multi-tensor apply). The parameters are described by a table of
// pointers and sizes that lives on the device; it is uploaded when it
// changes (the first step, after a restore that reallocated) and reused
// otherwise, so a step costs one launch and no host-to-device copy.
// Each block handles one chunk of one tensor; the formulas are those of the
// CPU optimizers (framework/solver/optimizer.h), in fp32 with per-tensor scalars
// computed in double as the CPU does. No CUDA headers: callers are .cpp files.
#pragma once

#include <cstdint>
#include <vector>

namespace strata::cuda {

// One parameter: value, gradient, up to two history slots (null when the
// rule has fewer), element count and its multipliers.
struct FusedTensor {
  float* w = nullptr;
  float* g = nullptr;
  float* s0 = nullptr;
  float* s1 = nullptr;
  int64_t n = 0;
  float lr_mult = 1.0f;
  float decay_mult = 1.0f;
};

// Results read one step later (framework/solver/step_ledger.h): the update
// runs only when the device's decision `*applied` is 1, and Adam's t is the
// device's update count `*step`; `*lr`, when set, replaces the args' lr (a
// captured step graph replays the same arguments every step). Null: always
// run, t and lr from the args.
struct DeviceGate {
  const int32_t* applied = nullptr;
  const int64_t* step = nullptr;
  const double* lr = nullptr;
};

struct FusedSgdArgs {
  double lr = 0.0;
  double momentum = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool l1 = false;
  DeviceGate gate;
};

struct FusedAdamArgs {
  double lr = 0.0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled = false;  // AdamW
  bool l1 = false;
  int64_t step = 1;        // t of the bias corrections
  DeviceGate gate;         // gate.step, when set, replaces `step`
};

// Caffe's AdaGrad, RMSProp and AdaDelta (framework/solver/optimizer.h). AdaGrad and
// RMSProp keep one history slot (s0), AdaDelta two (s0: squared gradients,
// s1: squared updates).
enum class AdaptiveRule { kAdaGrad, kRMSProp, kAdaDelta };
struct FusedAdaptiveArgs {
  double lr = 0.0;
  AdaptiveRule rule = AdaptiveRule::kAdaGrad;
  double decay = 0.0;   // RMSProp: rms_decay; AdaDelta: momentum; AdaGrad: unused
  double delta = 1e-8;
  double weight_decay = 0.0;
  bool l1 = false;
  DeviceGate gate;
};

// All on the compute stream of device `index`; tensors with n == 0 are skipped.
void fused_sgd(const std::vector<FusedTensor>& tensors, const FusedSgdArgs& args, int index);
void fused_adam(const std::vector<FusedTensor>& tensors, const FusedAdamArgs& args, int index);
void fused_adaptive(const std::vector<FusedTensor>& tensors, const FusedAdaptiveArgs& args, int index);

struct GradStats {
  bool finite = true;
  double sum_squares = 0.0;  // of the gradients after scaling
};
enum class ReadBack { kNo, kYes };
// g *= factor for every tensor (factor 1: no write). With ReadBack::kYes also
// checks that every gradient is finite and sums their squares (in a fixed
// order: deterministic), and waits for the result; kNo returns at once.
GradStats fused_scale_gradients(const std::vector<FusedTensor>& tensors, float factor, ReadBack read_back,
                                int index);

// The same pass with nothing read back (results one step later): the factor
// is 1 / (*loss_scale * divisor) when loss_scale is set, else `factor`; an
// inf or NaN sets *nonfinite to 1, and the sum of squares (in the same order
// as above) goes to *sum_squares.
void fused_scale_check_on_device(const std::vector<FusedTensor>& tensors, float factor, const double* loss_scale,
                                 double divisor, int32_t* nonfinite, double* sum_squares, int index);
// clip_gradients from a sum of squares on the device: when sqrt(*sum_squares)
// exceeds max_norm, g *= max_norm / (norm + 1e-6), as the host computes it.
void fused_clip_on_device(const std::vector<FusedTensor>& tensors, const double* sum_squares, double max_norm,
                          int index);

}  // namespace strata::cuda
