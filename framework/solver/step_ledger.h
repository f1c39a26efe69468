// StepLedger: training steps whose results the host reads one step later.
//
// Eagerly a GPU step stops the host three times: it reads the loss after
// forward, reads the finite flag after the gradient check, and only then
// launches (or skips) the update, so the GPU idles while the host decides.
// With the ledger, each step's results stay where they are made: forward
// adds the weighted loss into the step's record (Net::set_loss_sink), the
// gradient check sets its flag there, a one-thread kernel decides the step
// (decide_step, step_verdict.h: apply or skip, the next FP16 loss scale, a
// halt under `nonfinite: STOP`), the update kernels read that decision and
// Adam its step count, and backward reads the loss scale from the device.
// The record is then copied to pinned host memory behind an event; the host
// reads it after it has queued the next step, so the GPU always has work.
//
// On the CPU the same record lives in host memory and every step is settled
// at once: the same decisions and bookkeeping, tested in CI.
//
// A ring of kSlots records, one per step in turn; begin() first reads the
// finished records beyond kSlots - 1, so a host copy is read before its slot
// is written again.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "framework/solver/step_verdict.h"
#include "framework/tensor.h"

namespace strata {

// Where a step's work reads and writes its part of the record (device
// pointers on a GPU, host pointers on the CPU).
struct StepSlots {
  double* loss_sum = nullptr;        // forward adds w * loss here
  double* sum_squares = nullptr;     // the gradient check's sum of squares
  int32_t* nonfinite = nullptr;      // the gradient check sets 1 on inf/NaN
  double* stop = nullptr;            // a strategy's stop requests (TrainingStrategy::reduce_results)
  const double* scale = nullptr;     // the loss scale backward multiplies by
  const double* lr = nullptr;        // the learning rate the update uses
  const int32_t* applied = nullptr;  // after decide(): the update runs
  const int64_t* updates = nullptr;  // after decide(): updates applied, this one included (Adam's t)
};

// A record read back, with the iteration it belongs to (1-based, as progress lines count).
struct SettledStep {
  int64_t iteration = 0;
  StepVerdict verdict;
};

#ifdef STRATA_WITH_CUDA
// The ledger's device half (step_ledger.cu); only StepLedger calls these.
namespace step_ledger_cuda {
struct Ring;
// Records 0 .. slots - 1 are the ring; record `slots` is the fixed one.
Ring* create(int index, const StepCarry& carry, int slots);
void destroy(Ring* ring) noexcept;
void begin(Ring* ring, int record, double lr, StepSlots& slots);
void decide(Ring* ring, int record, const StepRule& rule);
void finish(Ring* ring, int record, int slot);  // record `record` to slot `slot`'s host copy
StepVerdict read(Ring* ring, int slot);  // waits for the slot's copy
}  // namespace step_ledger_cuda
#endif

class StepLedger {
 public:
  static constexpr int kSlots = 4;

  // `carry`: the state the first step starts from (the scaler's scale and
  // counter, the optimizer's update count).
  StepLedger(Device device, const StepRule& rule, const StepCarry& carry);
  ~StepLedger();
  StepLedger(const StepLedger&) = delete;
  StepLedger& operator=(const StepLedger&) = delete;

  const StepRule& rule() const { return rule_; }
  Device device() const { return device_; }
  // Starts the record of iteration `iteration`, whose update uses `lr`.
  // Returns the settled steps it had to read first to free its slot (oldest
  // first). `fixed`: the step's work finds its record at the same place every
  // step (a captured step graph, step_graph.h), and finish() copies it out.
  std::vector<SettledStep> begin(int64_t iteration, double lr, StepSlots& slots, bool fixed = false);
  // The step's gradients are checked: decides it (before the update is queued).
  void decide();
  // The step's work is queued: its record goes to the host behind an event.
  void finish();
  // Reads the finished records, oldest first, until at most `pending` remain
  // unread (0: all; waits for the device as needed).
  std::vector<SettledStep> settle(size_t pending);
  size_t unread() const { return pending_.size(); }

 private:
  Device device_;
  StepRule rule_;
  int slot_ = 0;
  bool fixed_ = false;     // the open record is the fixed one (index kSlots)
  int64_t iteration_ = 0;  // of the open record
  bool open_ = false;      // begin() without finish() yet (a step that threw stays unread)
  std::deque<std::pair<int64_t, int>> pending_;  // (iteration, slot), oldest first
  int record() const { return fixed_ ? kSlots : slot_; }
  // The CPU's records (the ring, then the fixed one) and carry (a GPU keeps its own on the device).
  std::vector<StepVerdict> host_;
  StepCarry host_carry_;
#ifdef STRATA_WITH_CUDA
  step_ledger_cuda::Ring* gpu_ = nullptr;
#endif
};


}  // namespace strata
