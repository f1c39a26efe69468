#include "parallel/model_parallel/pipeline_transfers.h"

#include <deque>
#include <set>

namespace strata::parallel {

namespace {

using Kind = StageTransfer::Kind;

// What `op` receives before it runs.
void add_receives(const PipelinePlan& plan, int stage, const PipeOp& op, std::vector<StageTransfer>& out) {
  if (op.kind == PipeOpKind::kForward) {
    for (int b : plan.incoming(stage)) out.push_back({Kind::kRecv, false, b, op.micro, plan.boundaries[b].from});
    return;
  }
  for (int b : plan.outgoing(stage)) {
    if (plan.boundaries[b].carries_grad) out.push_back({Kind::kRecv, true, b, op.micro, plan.boundaries[b].to});
  }
}

// What `op` sends once it has run.
void add_sends(const PipelinePlan& plan, int stage, const PipeOp& op, std::vector<StageTransfer>& out) {
  if (op.kind == PipeOpKind::kForward) {
    for (int b : plan.outgoing(stage)) out.push_back({Kind::kSend, false, b, op.micro, plan.boundaries[b].to});
    return;
  }
  for (int b : plan.incoming(stage)) {
    if (plan.boundaries[b].carries_grad) out.push_back({Kind::kSend, true, b, op.micro, plan.boundaries[b].from});
  }
}

}  // namespace

std::vector<std::vector<StageTransfer>> stage_transfer_batches(const PipelinePlan& plan, int stage,
                                                               const std::vector<PipeOp>& ops) {
  std::vector<std::vector<StageTransfer>> batches(ops.size() + 1);
  for (size_t i = 0; i <= ops.size(); ++i) {
    if (i > 0) add_sends(plan, stage, ops[i - 1], batches[i]);
    if (i < ops.size()) add_receives(plan, stage, ops[i], batches[i]);
  }
  return batches;
}

void exchange_batch_transfers(Communicator& comm, std::vector<PeerTransfer> sends,
                              const std::vector<PeerTransfer>& recvs) {
  if (sends.empty() && recvs.empty()) return;
  std::set<const void*> written;
  for (const PeerTransfer& r : recvs) written.insert(r.tensor->storage_id());
  std::deque<Tensor> copies;  // stable addresses while the exchange runs
  for (PeerTransfer& t : sends) {
    if (written.count(t.tensor->storage_id())) {
      copies.push_back(t.tensor->clone());
      t.tensor = &copies.back();
    }
  }
  sends.insert(sends.end(), recvs.begin(), recvs.end());
  comm.exchange(sends);
}

}  // namespace strata::parallel
