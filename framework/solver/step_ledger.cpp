#include "framework/solver/step_ledger.h"

#include "framework/error.h"

namespace strata {

StepLedger::StepLedger(Device device, const StepRule& rule, const StepCarry& carry)
    : device_(device), rule_(rule), host_(kSlots + 1), host_carry_(carry) {
  STRATA_CHECK(rule.iter_size >= 1, "a step ledger needs iter_size >= 1, got ", rule.iter_size);
#ifdef STRATA_WITH_CUDA
  if (!device_.is_cpu()) gpu_ = step_ledger_cuda::create(device_.index, carry, kSlots);
#else
  STRATA_CHECK(device_.is_cpu(), "this build has no CUDA; a step ledger lives on the CPU only");
#endif
}

StepLedger::~StepLedger() {
#ifdef STRATA_WITH_CUDA
  step_ledger_cuda::destroy(gpu_);
#endif
}

std::vector<SettledStep> StepLedger::begin(int64_t iteration, double lr, StepSlots& slots, bool fixed) {
  // The new record's slot must have been read: at most kSlots - 1 records stay unread.
  std::vector<SettledStep> out = settle(kSlots - 1);
  slot_ = (slot_ + 1) % kSlots;
  iteration_ = iteration;
  fixed_ = fixed;
  open_ = true;
#ifdef STRATA_WITH_CUDA
  if (gpu_) {
    step_ledger_cuda::begin(gpu_, record(), lr, slots);
    return out;
  }
#endif
  StepVerdict& v = host_[static_cast<size_t>(record())];
  v = StepVerdict{};
  v.lr = lr;
  slots.lr = &v.lr;
  slots.loss_sum = &v.loss_sum;
  slots.sum_squares = &v.sum_squares;
  slots.nonfinite = &v.nonfinite;
  slots.stop = &v.stop;
  slots.scale = &host_carry_.scale;
  slots.applied = &v.applied;
  slots.updates = &v.updates;
  return out;
}

void StepLedger::decide() {
  STRATA_CHECK(open_, "StepLedger::decide without begin");
#ifdef STRATA_WITH_CUDA
  if (gpu_) {
    step_ledger_cuda::decide(gpu_, record(), rule_);
    return;
  }
#endif
  decide_step(rule_, host_carry_, host_[static_cast<size_t>(record())]);
}

void StepLedger::finish() {
  STRATA_CHECK(open_, "StepLedger::finish without begin");
#ifdef STRATA_WITH_CUDA
  if (gpu_) step_ledger_cuda::finish(gpu_, record(), slot_);
#endif
  if (fixed_) host_[static_cast<size_t>(slot_)] = host_[kSlots];
  pending_.emplace_back(iteration_, slot_);
  open_ = false;
}

std::vector<SettledStep> StepLedger::settle(size_t pending) {
  std::vector<SettledStep> out;
  while (pending_.size() > pending) {
    const auto [iteration, slot] = pending_.front();
    pending_.pop_front();
    SettledStep s;
    s.iteration = iteration;
#ifdef STRATA_WITH_CUDA
    if (gpu_) {
      s.verdict = step_ledger_cuda::read(gpu_, slot);
      out.push_back(s);
      continue;
    }
#endif
    s.verdict = host_[static_cast<size_t>(slot)];
    out.push_back(s);
  }
  return out;
}

}  // namespace strata
