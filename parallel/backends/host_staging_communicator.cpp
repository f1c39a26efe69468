#include "parallel/backends/host_staging_communicator.h"

#include <utility>

#include "framework/error.h"

namespace strata::parallel {

namespace {

bool on_host(const Tensor& t) { return t.device().is_cpu(); }

// A host tensor shaped like `t` (its contents copied when `copy`).
Tensor host_like(const Tensor& t, bool copy) {
  if (copy) return t.to(Device::cpu());
  return Tensor(t.shape(), t.dtype(), Device::cpu());
}

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

HostStagingCommunicator::HostStagingCommunicator(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {
  STRATA_CHECK(inner_ != nullptr, "HostStagingCommunicator needs a communicator to wrap");
}

void HostStagingCommunicator::do_broadcast(Tensor& t, int root) {
  if (on_host(t)) return inner_->broadcast(t, root);
  Tensor h = host_like(t, rank() == root);
  inner_->broadcast(h, root);
  t.copy_from(h);
}

void HostStagingCommunicator::do_allreduce(Tensor& t, ReduceOp op) {
  if (on_host(t)) return inner_->allreduce(t, op);
  Tensor h = host_like(t, true);
  inner_->allreduce(h, op);
  t.copy_from(h);
}

void HostStagingCommunicator::do_reduce(Tensor& t, ReduceOp op, int root) {
  if (on_host(t)) return inner_->reduce(t, op, root);
  Tensor h = host_like(t, true);
  inner_->reduce(h, op, root);
  if (rank() == root) t.copy_from(h);  // elsewhere the tensor is left as it was
}

void HostStagingCommunicator::do_allgather(const Tensor& in, Tensor& out) {
  if (on_host(in) && on_host(out)) return inner_->allgather(in, out);
  const Tensor hin = host_like(in, true);
  Tensor hout = on_host(out) ? out : host_like(out, false);
  inner_->allgather(hin, hout);
  if (!on_host(out)) out.copy_from(hout);
}

void HostStagingCommunicator::do_gather(const Tensor& in, Tensor& out, int root) {
  if (on_host(in) && on_host(out)) return inner_->gather(in, out, root);
  const Tensor hin = host_like(in, true);
  Tensor hout = on_host(out) ? out : host_like(out, false);
  inner_->gather(hin, hout, root);
  if (!on_host(out) && rank() == root) out.copy_from(hout);
}

void HostStagingCommunicator::do_scatter(const Tensor& in, Tensor& out, int root) {
  if (on_host(in) && on_host(out)) return inner_->scatter(in, out, root);
  const Tensor hin = on_host(in) ? in : host_like(in, rank() == root);
  Tensor hout = on_host(out) ? out : host_like(out, false);
  inner_->scatter(hin, hout, root);
  if (!on_host(out)) out.copy_from(hout);
}

void HostStagingCommunicator::do_reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  if (on_host(in) && on_host(out)) return inner_->reduce_scatter(in, out, op);
  const Tensor hin = host_like(in, true);
  Tensor hout = on_host(out) ? out : host_like(out, false);
  inner_->reduce_scatter(hin, hout, op);
  if (!on_host(out)) out.copy_from(hout);
}

void HostStagingCommunicator::do_send(const Tensor& t, int dst, int tag) {
  if (on_host(t)) return inner_->send(t, dst, tag);
  inner_->send(host_like(t, true), dst, tag);
}

void HostStagingCommunicator::do_recv(Tensor& t, int src, int tag) {
  if (on_host(t)) return inner_->recv(t, src, tag);
  Tensor h = host_like(t, false);
  inner_->recv(h, src, tag);
  t.copy_from(h);
}

std::unique_ptr<CommWork> HostStagingCommunicator::do_allreduce_async(Tensor& t, ReduceOp op) {
  if (on_host(t)) return inner_->allreduce_async(t, op);
  auto h = std::make_shared<Tensor>(host_like(t, true));
  auto work = std::make_unique<StagedWork>(h, &t);
  work->start(inner_->allreduce_async(*h, op));
  return work;
}

std::unique_ptr<CommWork> HostStagingCommunicator::do_broadcast_async(Tensor& t, int root) {
  if (on_host(t)) return inner_->broadcast_async(t, root);
  auto h = std::make_shared<Tensor>(host_like(t, rank() == root));
  auto work = std::make_unique<StagedWork>(h, &t);
  work->start(inner_->broadcast_async(*h, root));
  return work;
}

}  // namespace strata::parallel
