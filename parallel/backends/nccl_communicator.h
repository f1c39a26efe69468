// The "nccl" backend: strata::Communicator over NVIDIA NCCL for tensors in
// CUDA device memory. Built when CMake finds CUDA and NCCL (cmake/nccl.cmake;
// STRATA_HAVE_NCCL is then defined for everything that links strata_parallel);
// elsewhere create_nccl_communicator() is a ConfigError saying so.
//
// Behaviour worth knowing:
// - One rank per process, one CUDA device per communicator (options.device,
//   or the calling thread's current device). Every tensor handed to it must
//   live on that device; CPU tensors are a ConfigError that says to use tcp.
// - Rendezvous: rank 0 calls ncclGetUniqueId and sets it in the store under
//   "<key>/id"; the other ranks get it from there (waiting at most the store's
//   timeout). Each communicator on one store needs its own key.
// - dtypes f32, f16, bf16, i32, u8; ReduceOp kAverage is ncclAvg (for i32/u8
//   the division truncates). f16/bf16 sums are rounded by NCCL at each step.
// - Ordering: the work runs on the device's comm_stream(), after everything
//   queued so far on its compute_stream() (an event between them). Blocking
//   calls return when the result is in the tensor (the host polls the done
//   event); async calls return a CommWork whose wait() does the same.
// - Timeouts: the communicator is nonblocking in NCCL's sense, and every wait
//   polls cudaEventQuery and ncclCommGetAsyncError. A call that does not
//   finish within the timeout, or an asynchronous NCCL error (a peer died),
//   aborts the NCCL communicator (ncclCommAbort) and throws an Error naming
//   the rank, the host and the operation; the communicator is unusable after.
// - gather/scatter are grouped ncclSend/ncclRecv; send/recv are single
//   ncclSend/ncclRecv: unbuffered (a send returns once the peer has received)
//   and tag-less (the tag is not transmitted; messages between two ranks
//   match in call order), so two ranks exchanging tensors must not both send
//   first; exchange() posts a batch of them in one NCCL group, which is how
//   two ranks send to each other (the pipeline's stages on GPUs).
//   barrier() is a one-element allreduce.
// - Calls are serialised by a mutex; a CommWork may outlive the
//   communicator (it keeps the NCCL state alive), but normally should not.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "framework/communicator.h"
#include "parallel/rendezvous/env.h"
#include "parallel/rendezvous/store.h"

namespace strata::parallel {

struct NcclCommunicatorOptions {
  int device = -1;                 // CUDA device index; -1: the current device
  std::string key = "strata/nccl"; // store key prefix for the unique id
  // Where this rank is, for messages; "" = env.describe(). A group of a
  // process grid names the world rank and the group ("rank 3 (tp rank 1 of 2) on host-a").
  std::string who;
  // Objects to keep alive as long as the communicator (rank 0's StoreServer).
  std::vector<std::shared_ptr<void>> keep_alive;
};

// env supplies rank, world size, timeout and the host name used in messages.
// The store must be shared by the env.world_size ranks.
std::unique_ptr<Communicator> create_nccl_communicator(const RankEnv& env, std::shared_ptr<Store> store,
                                                       NcclCommunicatorOptions options = {});

// True when this build has the nccl backend.
bool nccl_backend_built();

}  // namespace strata::parallel
