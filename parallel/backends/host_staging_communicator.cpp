#include "parallel/backends/host_staging_communicator.h"

#include <utility>

#include "framework/error.h"

namespace strata::parallel {

namespace {


// The async operation on the host copy; wait() copies the result back into
// the caller's device tensor (once). Destroying it without wait() still lets
// the inner operation finish (its own destructor) before the copy goes away.
class StagedWork final : public CommWork {
 public:
  StagedWork(std::shared_ptr<Tensor> host, Tensor* target) : host_(std::move(host)), target_(target) {}
  void start(std::unique_ptr<CommWork> inner) { inner_ = std::move(inner); }

  void wait() override {
    inner_->wait();
    if (!copied_) {
      target_->copy_from(*host_);
      copied_ = true;
    }
  }
  bool is_done() override { return inner_->is_done(); }

 private:
  std::shared_ptr<Tensor> host_;  // declared first: outlives inner_
  Tensor* target_;
  bool copied_ = false;
  std::unique_ptr<CommWork> inner_;
};

}  // namespace

StagingCommunicator::StagingCommunicator(std::unique_ptr<Communicator> inner, Device home)
    : inner_(std::move(inner)), home_(home) {
  STRATA_CHECK(inner_ != nullptr, "a staging communicator needs a communicator to wrap");
}

std::string StagingCommunicator::why_cannot_move(const Tensor& t) const {
  return staged(t) ? std::string() : inner_->why_cannot_move(t);
}

bool StagingCommunicator::staged(const Tensor& t) const {
  return t.device() != home_ && (t.device().is_cpu() || home_.is_cpu());
}

Tensor StagingCommunicator::home_like(const Tensor& t, bool copy) const {
  if (copy) return t.to(home_);
  return Tensor(t.shape(), t.dtype(), home_);
}

// Only the root's buffer of a gather's output (a scatter's input) is used:
// elsewhere an empty stand-in on home_ goes to the inner backend.
Tensor StagingCommunicator::root_only(const Tensor& t, bool is_root, bool copy) const {
  if (!staged(t)) return t;
  if (!is_root) return Tensor(Shape{0}, t.dtype(), home_);
  return home_like(t, copy);
}

void StagingCommunicator::do_exchange(const std::vector<PeerTransfer>& batch) {
  std::vector<PeerTransfer> inner_batch = batch;
  std::vector<Tensor> copies;
  copies.reserve(batch.size());
  for (PeerTransfer& t : inner_batch) {
    if (!staged(*t.tensor)) continue;
    copies.push_back(home_like(*t.tensor, t.kind == PeerTransfer::Kind::kSend));
    t.tensor = &copies.back();
  }
  inner_->exchange(inner_batch);
  for (size_t i = 0; i < batch.size(); ++i) {
    if (batch[i].kind == PeerTransfer::Kind::kRecv && inner_batch[i].tensor != batch[i].tensor) {
      batch[i].tensor->copy_from(*inner_batch[i].tensor);
    }
  }
}

void StagingCommunicator::do_broadcast(Tensor& t, int root) {
  if (!staged(t)) return inner_->broadcast(t, root);
  Tensor h = home_like(t, rank() == root);
  inner_->broadcast(h, root);
  t.copy_from(h);
}

void StagingCommunicator::do_allreduce(Tensor& t, ReduceOp op) {
  if (!staged(t)) return inner_->allreduce(t, op);
  Tensor h = home_like(t, true);
  inner_->allreduce(h, op);
  t.copy_from(h);
}

void StagingCommunicator::do_reduce(Tensor& t, ReduceOp op, int root) {
  if (!staged(t)) return inner_->reduce(t, op, root);
  Tensor h = home_like(t, true);
  inner_->reduce(h, op, root);
  if (rank() == root) t.copy_from(h);  // elsewhere the tensor is left as it was
}

void StagingCommunicator::do_allgather(const Tensor& in, Tensor& out) {
  if (!staged(in) && !staged(out)) return inner_->allgather(in, out);
  const Tensor hin = !staged(in) ? in : home_like(in, true);
  Tensor hout = !staged(out) ? out : home_like(out, false);
  inner_->allgather(hin, hout);
  if (staged(out)) out.copy_from(hout);
}

void StagingCommunicator::do_gather(const Tensor& in, Tensor& out, int root) {
  if (!staged(in) && !staged(out)) return inner_->gather(in, out, root);
  const Tensor hin = !staged(in) ? in : home_like(in, true);
  Tensor hout = root_only(out, rank() == root, false);
  inner_->gather(hin, hout, root);
  if (staged(out) && rank() == root) out.copy_from(hout);
}

void StagingCommunicator::do_scatter(const Tensor& in, Tensor& out, int root) {
  if (!staged(in) && !staged(out)) return inner_->scatter(in, out, root);
  const Tensor hin = root_only(in, rank() == root, true);
  Tensor hout = !staged(out) ? out : home_like(out, false);
  inner_->scatter(hin, hout, root);
  if (staged(out)) out.copy_from(hout);
}

void StagingCommunicator::do_reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  if (!staged(in) && !staged(out)) return inner_->reduce_scatter(in, out, op);
  const Tensor hin = !staged(in) ? in : home_like(in, true);
  Tensor hout = !staged(out) ? out : home_like(out, false);
  inner_->reduce_scatter(hin, hout, op);
  if (staged(out)) out.copy_from(hout);
}

void StagingCommunicator::do_send(const Tensor& t, int dst, int tag) {
  if (!staged(t)) return inner_->send(t, dst, tag);
  inner_->send(home_like(t, true), dst, tag);
}

void StagingCommunicator::do_recv(Tensor& t, int src, int tag) {
  if (!staged(t)) return inner_->recv(t, src, tag);
  Tensor h = home_like(t, false);
  inner_->recv(h, src, tag);
  t.copy_from(h);
}

std::unique_ptr<CommWork> StagingCommunicator::do_allreduce_async(Tensor& t, ReduceOp op) {
  if (!staged(t)) return inner_->allreduce_async(t, op);
  auto h = std::make_shared<Tensor>(home_like(t, true));
  auto work = std::make_unique<StagedWork>(h, &t);
  work->start(inner_->allreduce_async(*h, op));
  return work;
}

std::unique_ptr<CommWork> StagingCommunicator::do_broadcast_async(Tensor& t, int root) {
  if (!staged(t)) return inner_->broadcast_async(t, root);
  auto h = std::make_shared<Tensor>(home_like(t, rank() == root));
  auto work = std::make_unique<StagedWork>(h, &t);
  work->start(inner_->broadcast_async(*h, root));
  return work;
}

std::unique_ptr<CommWork> StagingCommunicator::do_reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) {
  if (!staged(in) && !staged(out)) return inner_->reduce_scatter_async(in, out, op);
  return Communicator::do_reduce_scatter_async(in, out, op);
}

std::unique_ptr<CommWork> StagingCommunicator::do_allgather_async(const Tensor& in, Tensor& out) {
  if (!staged(in) && !staged(out)) return inner_->allgather_async(in, out);
  return Communicator::do_allgather_async(in, out);
}

}  // namespace strata::parallel
