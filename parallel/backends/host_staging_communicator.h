// A Communicator for backends that move host memory (tcp, mpi) that also
// takes tensors in CUDA device memory: such a tensor is copied to a host
// tensor, the inner backend runs the operation on it, and the result is
// copied back (for the async forms, at wait()). Host tensors go straight to
// the inner backend, untouched. The factory wraps tcp and mpi in it, so
// `Communicator` users need not care where a tensor lives; NCCL (device
// memory, no copies) remains the fast path for GPUs.
//
//   auto comm = std::make_unique<HostStagingCommunicator>(std::move(tcp));
//   Tensor g({n}, DType::kF32, Device::cuda(0));
//   comm->allreduce(g, ReduceOp::kAverage);   // device -> host, ring, host -> device
//
// Staging buffers are ordinary host tensors, allocated per call; the copies
// follow Tensor::copy_from (ordered after the device's compute stream).
#pragma once

#include <memory>
#include <string>

#include "framework/communicator.h"

namespace strata::parallel {

class HostStagingCommunicator final : public Communicator {
 public:
  explicit HostStagingCommunicator(std::unique_ptr<Communicator> inner);

  Communicator& inner() { return *inner_; }

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  std::string backend_name() const override { return inner_->backend_name(); }
  void set_timeout(std::chrono::milliseconds timeout) override { inner_->set_timeout(timeout); }

  std::string describe() const override { return inner_->describe(); }
  // Any device: CUDA tensors reach the inner backend as host copies.
  std::string why_cannot_move(const Tensor&) const override { return {}; }
  int max_tag() const override { return inner_->max_tag(); }

 protected:
  void do_broadcast(Tensor& t, int root) override;
  void do_allreduce(Tensor& t, ReduceOp op) override;
  void do_reduce(Tensor& t, ReduceOp op, int root) override;
  void do_allgather(const Tensor& in, Tensor& out) override;
  void do_gather(const Tensor& in, Tensor& out, int root) override;
  void do_scatter(const Tensor& in, Tensor& out, int root) override;
  void do_reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override;
  void do_send(const Tensor& t, int dst, int tag) override;
  void do_recv(Tensor& t, int src, int tag) override;
  void do_barrier() override { inner_->barrier(); }
  std::unique_ptr<CommWork> do_allreduce_async(Tensor& t, ReduceOp op) override;
  std::unique_ptr<CommWork> do_broadcast_async(Tensor& t, int root) override;

 private:
  std::unique_ptr<Communicator> inner_;
};

}  // namespace strata::parallel
