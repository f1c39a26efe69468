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
//
// DeviceStagingCommunicator is the mirror image, for nccl: host tensors are
// copied to its GPU and back. Both are one StagingCommunicator with the
// place the inner backend wants ("home").
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "framework/communicator.h"

namespace strata::parallel {

// What both staging communicators share: a tensor that the inner backend
// cannot take where it lives (host memory for a device backend, device
// memory for a host backend) is copied to `home`, the inner backend runs
// the operation there, and the result is copied back.
class StagingCommunicator : public Communicator {
 public:
  StagingCommunicator(std::unique_ptr<Communicator> inner, Device home);

  Communicator& inner() { return *inner_; }

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  CommBackend backend() const override { return inner_->backend(); }
  void set_timeout(std::chrono::milliseconds timeout) override { inner_->set_timeout(timeout); }

  std::string describe() const override { return inner_->describe(); }
  // Staged tensors: none; the others: what the inner backend says.
  std::string why_cannot_move(const Tensor& t) const override;
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
  // The inner backend's own batch (nccl: one group), staged tensors copied around it.
  void do_exchange(const std::vector<PeerTransfer>& batch) override;
  void do_barrier() override { inner_->barrier(); }
  std::unique_ptr<CommWork> do_allreduce_async(Tensor& t, ReduceOp op) override;
  std::unique_ptr<CommWork> do_broadcast_async(Tensor& t, int root) override;
  // Unstaged tensors: the inner backend's own; staged ones: the blocking call.
  std::unique_ptr<CommWork> do_reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) override;
  std::unique_ptr<CommWork> do_allgather_async(const Tensor& in, Tensor& out) override;

 private:
  // Whether `t` goes through a copy on home_: it lives on the host and home_
  // is a device, or the other way round.
  bool staged(const Tensor& t) const;
  Tensor home_like(const Tensor& t, bool copy) const;
  Tensor root_only(const Tensor& t, bool is_root, bool copy) const;

  std::unique_ptr<Communicator> inner_;
  Device home_;
};

// tcp and mpi (host memory) taking CUDA tensors too, through host copies.
class HostStagingCommunicator final : public StagingCommunicator {
 public:
  explicit HostStagingCommunicator(std::unique_ptr<Communicator> inner)
      : StagingCommunicator(std::move(inner), Device::cpu()) {}
};

// nccl (device memory) taking host tensors too, through copies on `device`:
// what lets the model-parallel strategies, whose small control messages
// (shapes, losses, snapshot parts) are host tensors, run over nccl while
// their activations and gradients go straight from device memory. Tensors
// on `device` go straight to nccl.
class DeviceStagingCommunicator final : public StagingCommunicator {
 public:
  DeviceStagingCommunicator(std::unique_ptr<Communicator> inner, Device device)
      : StagingCommunicator(std::move(inner), device) {}
};

}  // namespace strata::parallel
