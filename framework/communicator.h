// The collective-communication interface (MPI vocabulary). Declared here so
// that the engine and layers can use it without knowing any transport;
// implemented in parallel/backends/ (tcp, nccl, mpi). A process-local
// implementation for a world of one rank lives beside it. The public calls
// check their arguments here, once, in front of every backend.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "framework/tensor.h"

namespace strata {

enum class ReduceOp { kSum, kAverage, kMin, kMax };

// Which library moves a communicator's bytes: code that must know (NCCL
// takes device memory and groups of its own) asks backend(), never a name.
enum class CommBackend { kLocal, kTcp, kNccl, kMpi };
const char* comm_backend_name(CommBackend backend);  // "local", "tcp", "nccl", "mpi"

// One point-to-point transfer of a batch (Communicator::exchange).
struct PeerTransfer {
  enum class Kind { kSend, kRecv };
  Kind kind = Kind::kSend;
  Tensor* tensor = nullptr;  // read by a send, written by a receive; alive until exchange returns
  int peer = 0;
  int tag = 0;
};

// Handle of an asynchronous operation. wait() throws the operation's error
// (with rank, host and operation named) or a timeout error.
class CommWork {
 public:
  virtual ~CommWork() = default;
  virtual void wait() = 0;
  virtual bool is_done() = 0;
  // Orders the work queued afterwards on the device's compute stream after
  // this operation, instead of blocking the host: the host goes on, and the
  // backend keeps the timeout (the nccl backend's watchdog thread aborts the
  // communicator when it expires, and the next call throws its message).
  // Backends whose operations do not run on a device stream wait here.
  virtual void order_on_compute_stream() { wait(); }
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual CommBackend backend() const = 0;
  // For messages: "tcp" and so on.
  std::string backend_name() const { return comm_backend_name(backend()); }
  // Every blocking call gives up after this long with an error naming the peer.
  virtual void set_timeout(std::chrono::milliseconds timeout) = 0;
  // "rank 1 of 2 on host-a": where this rank is, for error messages.
  virtual std::string describe() const;
  // Empty when this backend can move `t` where it lives; otherwise why not
  // and what to do instead. Every tensor argument is asked.
  virtual std::string why_cannot_move(const Tensor& t) const;
  // The largest tag send/recv accept (0 is the smallest).
  virtual int max_tag() const;

  // The calls. Each checks its arguments (framework/communicator_checks.h:
  // ranks, tags, dtypes, sizes, storage, device) on the calling rank, then
  // hands over to the backend's do_* function, so every backend answers the
  // same mistake with the same error. Tensors must have the same dtype and
  // numel on every rank (checked across ranks where the backend can).
  //
  // In-place collectives over whole tensors.
  void broadcast(Tensor& t, int root);
  void allreduce(Tensor& t, ReduceOp op);
  void reduce(Tensor& t, ReduceOp op, int root);
  // out.numel() == world_size * in.numel(); rank r's input lands at block r.
  void allgather(const Tensor& in, Tensor& out);
  // As allgather, into the root's out only (other ranks' out is not looked at).
  void gather(const Tensor& in, Tensor& out, int root);
  // in.numel() == world_size * out.numel(); rank r gets block r (only the root's in is read).
  void scatter(const Tensor& in, Tensor& out, int root);
  // in.numel() == world_size * out.numel(); rank r gets the reduced block r.
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op);
  void send(const Tensor& t, int dst, int tag);
  void recv(Tensor& t, int src, int tag);
  // Posts every transfer of `batch` at once and returns when all are done
  // (MPI's Isend/Irecv then Waitall; NCCL's ncclSend/ncclRecv in one group).
  // Two ranks that each send to and receive from the other in one batch
  // cannot block each other, as two blocking sends issued first would on a
  // backend whose sends wait for the receiver (nccl). Between two ranks,
  // transfers in one direction match in the order they are posted, batch
  // after batch, whatever their tags (nccl ignores tags; keep tags and
  // order in agreement so that every backend pairs them alike).
  void exchange(const std::vector<PeerTransfer>& batch);
  void barrier();

  // Asynchronous forms; the tensor must stay alive and untouched until wait().
  std::unique_ptr<CommWork> allreduce_async(Tensor& t, ReduceOp op);
  std::unique_ptr<CommWork> broadcast_async(Tensor& t, int root);
  // As reduce_scatter; `in` and `out` stay alive and untouched until wait().
  std::unique_ptr<CommWork> reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op);
  // As allgather; `in` and `out` stay alive and untouched until wait().
  std::unique_ptr<CommWork> allgather_async(const Tensor& in, Tensor& out);

 protected:
  // The backend's side: called only with arguments that passed the checks.
  virtual void do_broadcast(Tensor& t, int root) = 0;
  virtual void do_allreduce(Tensor& t, ReduceOp op) = 0;
  virtual void do_reduce(Tensor& t, ReduceOp op, int root) = 0;
  virtual void do_allgather(const Tensor& in, Tensor& out) = 0;
  virtual void do_gather(const Tensor& in, Tensor& out, int root) = 0;
  virtual void do_scatter(const Tensor& in, Tensor& out, int root) = 0;
  virtual void do_reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) = 0;
  virtual void do_send(const Tensor& t, int dst, int tag) = 0;
  virtual void do_recv(Tensor& t, int src, int tag) = 0;
  // Backends without a batch of their own: the sends in order, then the
  // receives in order. Right for backends whose sends return before the
  // receiver takes them (tcp: once the bytes are in the socket buffers, so
  // for messages that fit them); nccl has its own (one group).
  virtual void do_exchange(const std::vector<PeerTransfer>& batch);
  virtual void do_barrier() = 0;
  virtual std::unique_ptr<CommWork> do_allreduce_async(Tensor& t, ReduceOp op) = 0;
  virtual std::unique_ptr<CommWork> do_broadcast_async(Tensor& t, int root) = 0;
  // Backends without an asynchronous reduce-scatter of their own (mpi): the
  // blocking call, finished when this returns.
  virtual std::unique_ptr<CommWork> do_reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op);
  // Likewise for allgather (mpi: the blocking call).
  virtual std::unique_ptr<CommWork> do_allgather_async(const Tensor& in, Tensor& out);
};

// A world of one rank: every collective is the identity (average of one value
// is that value). Lets single-process code call the same interface.
class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  CommBackend backend() const override { return CommBackend::kLocal; }
  void set_timeout(std::chrono::milliseconds) override {}

 protected:
  void do_broadcast(Tensor&, int) override {}
  void do_allreduce(Tensor&, ReduceOp) override {}
  void do_reduce(Tensor&, ReduceOp, int) override {}
  void do_allgather(const Tensor& in, Tensor& out) override;
  void do_gather(const Tensor& in, Tensor& out, int root) override;
  void do_scatter(const Tensor& in, Tensor& out, int root) override;
  void do_reduce_scatter(const Tensor& in, Tensor& out, ReduceOp) override;
  void do_send(const Tensor&, int dst, int tag) override;
  void do_recv(Tensor&, int src, int tag) override;
  void do_barrier() override {}
  std::unique_ptr<CommWork> do_allreduce_async(Tensor& t, ReduceOp op) override;
  std::unique_ptr<CommWork> do_broadcast_async(Tensor& t, int root) override;
};

}  // namespace strata
