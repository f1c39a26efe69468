// The collective-communication interface (MPI vocabulary). Declared here so
// that the engine and layers can use it without knowing any transport;
// implemented in parallel/ (tcp, nccl, mpi backends). A process-local
// implementation for a world of one rank lives beside it.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "framework/tensor.h"

namespace strata {

enum class ReduceOp { kSum, kAverage, kMin, kMax };

// Handle of an asynchronous operation. wait() throws the operation's error
// (with rank, host and operation named) or a timeout error.
class CommWork {
 public:
  virtual ~CommWork() = default;
  virtual void wait() = 0;
  virtual bool is_done() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string backend_name() const = 0;
  // Every blocking call gives up after this long with an error naming the peer.
  virtual void set_timeout(std::chrono::milliseconds timeout) = 0;

  // In-place collectives over whole tensors. Tensors must have the same
  // dtype and numel on every rank (checked where the backend can).
  virtual void broadcast(Tensor& t, int root) = 0;
  virtual void allreduce(Tensor& t, ReduceOp op) = 0;
  virtual void reduce(Tensor& t, ReduceOp op, int root) = 0;
  // out.numel() == world_size * in.numel(); rank r's input lands at block r.
  virtual void allgather(const Tensor& in, Tensor& out) = 0;
  virtual void gather(const Tensor& in, Tensor& out, int root) = 0;
  // in.numel() == world_size * out.numel(); rank r gets block r.
  virtual void scatter(const Tensor& in, Tensor& out, int root) = 0;
  // in.numel() == world_size * out.numel(); rank r gets the reduced block r.
  virtual void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) = 0;
  virtual void send(const Tensor& t, int dst, int tag) = 0;
  virtual void recv(Tensor& t, int src, int tag) = 0;
  virtual void barrier() = 0;

  // Asynchronous forms; the tensor must stay alive and untouched until wait().
  virtual std::unique_ptr<CommWork> allreduce_async(Tensor& t, ReduceOp op) = 0;
  virtual std::unique_ptr<CommWork> broadcast_async(Tensor& t, int root) = 0;
};

// A world of one rank: every collective is the identity (average of one value
// is that value). Lets single-process code call the same interface.
class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string backend_name() const override { return "local"; }
  void set_timeout(std::chrono::milliseconds) override {}
  void broadcast(Tensor&, int root) override;
  void allreduce(Tensor&, ReduceOp) override {}
  void reduce(Tensor&, ReduceOp, int root) override;
  void allgather(const Tensor& in, Tensor& out) override;
  void gather(const Tensor& in, Tensor& out, int root) override;
  void scatter(const Tensor& in, Tensor& out, int root) override;
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp) override;
  void send(const Tensor&, int dst, int tag) override;
  void recv(Tensor&, int src, int tag) override;
  void barrier() override {}
  std::unique_ptr<CommWork> allreduce_async(Tensor& t, ReduceOp op) override;
  std::unique_ptr<CommWork> broadcast_async(Tensor& t, int root) override;
};

}  // namespace strata
