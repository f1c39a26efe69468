#include "parallel/model_parallel/pipeline_transfers.h"

#include <algorithm>
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

namespace {

// The transfers of `list` with `peer`, in order.
std::vector<const PeerTransfer*> with_peer(const std::vector<PeerTransfer>& list, int peer) {
  std::vector<const PeerTransfer*> out;
  for (const PeerTransfer& t : list) {
    if (t.peer == peer) out.push_back(&t);
  }
  return out;
}

size_t total_bytes(const std::vector<const PeerTransfer*>& ts) {
  size_t n = 0;
  for (const PeerTransfer* t : ts) n += t->tensor->nbytes();
  return n;
}

}  // namespace

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
  // One message per peer and direction (see the header): several tensors
  // for one peer travel packed, byte after byte in the order listed.
  std::set<int> peers;
  for (const PeerTransfer& t : sends) peers.insert(t.peer);
  for (const PeerTransfer& t : recvs) peers.insert(t.peer);
  std::vector<PeerTransfer> batch;
  struct Unpack {
    const Tensor* packed;
    std::vector<const PeerTransfer*> into;
  };
  std::vector<Unpack> unpacks;
  for (const bool sending : {true, false}) {
    for (int peer : peers) {
      const std::vector<const PeerTransfer*> ts = with_peer(sending ? sends : recvs, peer);
      if (ts.size() == 1) batch.push_back(*ts[0]);
      if (ts.size() < 2) continue;
      copies.emplace_back(Shape{static_cast<int64_t>(total_bytes(ts))}, DType::kU8, ts[0]->tensor->device());
      Tensor& packed = copies.back();
      if (sending) {
        size_t at = 0;
        for (const PeerTransfer* t : ts) {
          copy_bytes(packed, at, *t->tensor, 0, t->tensor->nbytes());
          at += t->tensor->nbytes();
        }
      } else {
        unpacks.push_back({&packed, ts});
      }
      batch.push_back({sending ? PeerTransfer::Kind::kSend : PeerTransfer::Kind::kRecv, &packed, peer, ts[0]->tag});
    }
  }
  comm.exchange(batch);
  for (const Unpack& u : unpacks) {
    size_t at = 0;
    for (const PeerTransfer* t : u.into) {
      copy_bytes(*t->tensor, 0, *u.packed, at, t->tensor->nbytes());
      at += t->tensor->nbytes();
    }
  }
}

void exchange_one_peer_at_a_time(Communicator& comm, const std::vector<PeerTransfer>& transfers, PeerOrder order) {
  std::set<int> peers;
  for (const PeerTransfer& t : transfers) peers.insert(t.peer);
  std::vector<int> ordered(peers.begin(), peers.end());
  if (order == PeerOrder::kDescending) std::reverse(ordered.begin(), ordered.end());
  for (int peer : ordered) {
    std::vector<PeerTransfer> sends, recvs;
    for (const PeerTransfer& t : transfers) {
      if (t.peer == peer) (t.kind == PeerTransfer::Kind::kSend ? sends : recvs).push_back(t);
    }
    exchange_batch_transfers(comm, std::move(sends), recvs);
  }
}

}  // namespace strata::parallel
