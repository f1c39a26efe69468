// strata::Communicator over any Transport (TCP now): the collective
// algorithms of parallel/collectives/collectives.h plus call checking,
// tagged point-to-point messages and asynchronous execution.
//
// Execution: every operation, blocking or not, runs on one worker thread in
// the order it was issued, so async and blocking calls interleave exactly as
// written on every rank. Blocking calls wait for their turn. A blocked recv
// therefore also holds back later operations of the same communicator.
//
// Checks:
// - Locally, before anything is queued: the arguments, by the Communicator
//   base class (framework/communicator_checks.h) on the calling thread; the
//   communicator stays usable. This backend moves CPU tensors only.
// - Across ranks (CallCheck::kOn): before each collective, every rank sends
//   its ring successor a small description of the call (operation, dtype,
//   element count, root, op, call number) and compares the one it receives,
//   so ranks that disagree fail with an error naming both calls instead of
//   hanging or exchanging garbage. Costs one small message per call.
//   Point-to-point messages always carry a header (tag, dtype, element
//   count) that recv checks.
// - After a transport error (timeout, closed connection) or a mismatch the
//   byte streams are out of step: every later call fails at once, naming the
//   first error.
//
// Reductions: see parallel/collectives/reduce_kernels.h (f16/bf16 through f32, integer
// averages truncate). reduce() leaves non-root tensors unchanged.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "framework/communicator.h"
#include "parallel/transport/transport.h"

namespace strata::parallel {

enum class AllreduceAlgorithm { kAuto, kRing, kTree };

// "auto", "ring", "tree"; ConfigError listing them otherwise.
AllreduceAlgorithm parse_allreduce_algorithm(const std::string& name);
const char* allreduce_algorithm_name(AllreduceAlgorithm algorithm);

enum class CallCheck { kOn, kOff };

struct TcpCommunicatorOptions {
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::kAuto;
  // With kAuto: messages below this many bytes use the tree, others the
  // ring. The tree costs 2 log2(n) latencies and moves 2 log2(n) times the
  // data through rank 0; the ring costs 2 (n - 1) latencies and moves
  // 2 (n - 1)/n of the data per rank. With 20 us latency and 1 GB/s links
  // they break even at 16 KiB (4 ranks) to 72 KiB (16 ranks). On 2-rank
  // loopback, where memory copies rather than links are the limit, they
  // measured within 1.7x of each other at every size from 8 B to 16 MiB.
  size_t tree_threshold_bytes = 64 << 10;
  CallCheck check = CallCheck::kOn;
  // This machine's name in messages; "" = gethostname().
  std::string hostname;
};

class TcpCommunicator final : public Communicator {
 public:
  explicit TcpCommunicator(std::unique_ptr<Transport> transport, TcpCommunicatorOptions options = {});
  // Waits for queued operations (each bounded by the timeout), then closes
  // the transport before releasing the held resources.
  ~TcpCommunicator() override;
  TcpCommunicator(const TcpCommunicator&) = delete;
  TcpCommunicator& operator=(const TcpCommunicator&) = delete;

  // Keeps `resource` (the store client, rank 0's store server) alive until
  // the transport is closed.
  void hold(std::shared_ptr<void> resource);
  // The algorithm allreduce uses for a message of this many bytes.
  AllreduceAlgorithm allreduce_algorithm_for(size_t bytes) const;

  int rank() const override;
  int world_size() const override;
  CommBackend backend() const override { return CommBackend::kTcp; }
  void set_timeout(std::chrono::milliseconds timeout) override;

  std::string describe() const override;
  std::string why_cannot_move(const Tensor& t) const override;
  // What carries the bytes: "tcp", "tcp + shm (3 peers)", "rdma (libfabric
  // verbs;ofi_rxm)" (describe_transport); "closed" after a transport error.
  std::string transport_name() const;

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
  void do_barrier() override;
  std::unique_ptr<CommWork> do_allreduce_async(Tensor& t, ReduceOp op) override;
  std::unique_ptr<CommWork> do_broadcast_async(Tensor& t, int root) override;
  std::unique_ptr<CommWork> do_reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) override;
  std::unique_ptr<CommWork> do_allgather_async(const Tensor& in, Tensor& out) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The transport_name of a tcp communicator, also through the host-staging
// wrapper create_communicator puts around it; "" for other backends.
std::string communicator_transport_name(Communicator& c);

}  // namespace strata::parallel
