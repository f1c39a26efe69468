#include "parallel/backends/nccl_communicator.h"
#include "parallel/backends/completion_watchdog.h"

#include "framework/error.h"

#if !defined(STRATA_HAVE_NCCL) || !defined(STRATA_WITH_CUDA)

namespace strata::parallel {

bool nccl_backend_built() { return false; }

std::unique_ptr<Communicator> create_nccl_communicator(const RankEnv& env, std::shared_ptr<Store>,
                                                       NcclCommunicatorOptions) {
  fail<ConfigError>(env.describe(), ": this strata was built without NCCL, so the nccl backend is unavailable; "
                    "it needs the CUDA backend (nvcc) and NCCL (nccl.h and libnccl.so in the CUDA toolkit "
                    "folders or under $NCCL_ROOT) when cmake runs; use the tcp backend");
}

}  // namespace strata::parallel

#else  // STRATA_HAVE_NCCL && STRATA_WITH_CUDA

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "framework/cuda/device_api.h"
#include "framework/cuda/runtime.h"
#include "framework/cuda/streams.h"
#include "parallel/backends/gpu_placement.h"

// Throws "NCCL call failed: <expr> at <file>:<line>: <ncclGetErrorString>".
#define STRATA_NCCL_CHECK(expr) \
  STRATA_GPU_CHECK_("NCCL", strata_status_ == ncclSuccess, ncclGetErrorString, expr)
// For calls on a nonblocking communicator, which may answer ncclInProgress
// while it finishes in the background (NcclState::settle waits for that).
#define STRATA_NCCL_CHECK_STARTED(expr)                                                          \
  STRATA_GPU_CHECK_("NCCL", strata_status_ == ncclSuccess || strata_status_ == ncclInProgress, \
                    ncclGetErrorString, expr)

namespace strata::parallel {

bool nccl_backend_built() { return true; }

namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_dtype(DType t) {
  switch (t) {
    case DType::kF32: return ncclFloat32;
    case DType::kF16: return ncclFloat16;
    case DType::kBF16: return ncclBfloat16;
    case DType::kI32: return ncclInt32;
    case DType::kU8: return ncclUint8;
  }
  fail<Error>("unknown dtype");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAverage: return ncclAvg;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
  }
  fail<Error>("unknown reduce op");
}

// Polling back-off: spin a little (small collectives finish in microseconds),
// then sleep so a long wait does not burn a core.
class Backoff {
 public:
  void pause() {
    if (++n_ < 200) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(n_ < 2000 ? 20 : 200));
    }
  }

 private:
  int n_ = 0;
};

// "allreduce (f32, 1000 elements)"
std::string call_text(const std::string& op, const Tensor& t) {
  return op + " (" + dtype_name(t.dtype()) + ", " + std::to_string(t.numel()) + " elements)";
}

// ncclCommAbort(comm), bounded: if it has not returned after `grace_ms`,
// a watchdog thread prints that and ends the process (exit status 70), as
// a wait that never ends is worse than a rank that stops with a message
// (the launcher then names the rank).
void abort_with_deadline(ncclComm_t comm, int64_t grace_ms) {
  auto returned = std::make_shared<std::atomic<bool>>(false);
  std::thread([returned, grace_ms] {
    const auto deadline = Clock::now() + std::chrono::milliseconds(grace_ms);
    while (Clock::now() < deadline) {
      if (returned->load()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (returned->load()) return;
    std::fprintf(stderr, "ncclCommAbort did not return within %lld ms (a kernel that never ends?); exiting\n",
                 static_cast<long long>(grace_ms));
    std::fflush(stderr);
    std::_Exit(70);
  }).detach();
  ncclCommAbort(comm);
  returned->store(true);
}

// Everything an operation in flight needs: shared by the communicator and
// its CommWork handles, so a handle never points at a destroyed communicator.
struct NcclState {
  std::string who;  // "rank 1 of 2 on host-b"
  int rank = 0;
  int world_size = 1;
  int device = 0;
  std::atomic<int64_t> timeout_ms{300000};
  std::mutex mu;  // serialises NCCL calls; guards comm and aborted
  ncclComm_t comm = nullptr;
  bool aborted = false;
  std::string abort_reason;
  Tensor barrier_buffer;
  std::vector<std::shared_ptr<void>> keep_alive;
  // Operations ordered on the compute stream (order_on_compute_stream),
  // which no host call waits for: their timeouts. Made at the first.
  std::unique_ptr<CompletionWatchdog> watchdog;

  NcclState() = default;
  NcclState(const NcclState&) = delete;
  NcclState& operator=(const NcclState&) = delete;

  ~NcclState() {
    watchdog.reset();  // its thread may abort `comm`: stopped before the teardown
    if (!comm) return;
    std::optional<cuda::DeviceGuard> guard;
    try {
      guard.emplace(device);
    } catch (const Error&) {
      // Not rethrown (destructors must not throw): the teardown below does what it still can.
    }
    // Flush and free; if a peer is gone the flush never ends, so abort after the timeout.
    const ncclResult_t finalized = ncclCommFinalize(comm);
    bool clean = finalized == ncclSuccess || finalized == ncclInProgress;
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms.load());
    Backoff backoff;
    while (clean) {
      ncclResult_t r = ncclSuccess;
      if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) r = ncclInternalError;
      if (r == ncclSuccess) break;
      if (r != ncclInProgress || Clock::now() > deadline) {
        clean = false;
        break;
      }
      backoff.pause();
    }
    if (clean) {
      ncclCommDestroy(comm);
    } else {
      ncclCommAbort(comm);
    }
  }

  std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(timeout_ms.load()); }

  std::string timeout_text() const {
    const int64_t ms = timeout_ms.load();
    return ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms";
  }

  // Caller holds mu. Aborts the NCCL communicator (kernels in flight stop,
  // peers see an error) and throws `message`. The message is printed first:
  // ncclCommAbort waits for the kernels it stops, and should it never
  // return (seen with a stuck peer on a shared GPU), the process says why
  // and exits after a grace period instead of hanging unseen.
  [[noreturn]] void abort_and_throw(const std::string& message) {
    abort_locked(message);
    throw Error(message);
  }

  // Caller holds mu: the abort of abort_and_throw, without the throw.
  void abort_locked(const std::string& message) {
    if (comm) {
      std::fprintf(stderr, "%s; aborting the NCCL communicator\n", message.c_str());
      std::fflush(stderr);
      abort_with_deadline(comm, std::min<int64_t>(timeout_ms.load(), 60000));
    }
    comm = nullptr;
    aborted = true;
    abort_reason = message;
  }

  // The watchdog's timeout (its thread): the next call on the communicator reports `message`.
  void abort_from_watchdog(const std::string& message) {
    std::lock_guard<std::mutex> lock(mu);
    if (!aborted) abort_locked(message);
  }

  // Hands `done` (recorded after an operation `op`) to the watchdog, which
  // owns it from here on and destroys it once the operation is over.
  void watch(cudaEvent_t done, const std::string& op) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!watchdog) {
        watchdog = std::make_unique<CompletionWatchdog>([this](const std::string& m) { abort_from_watchdog(m); });
      }
    }
    const int dev = device;
    watchdog->watch(
        [done, dev] {
          cudaSetDevice(dev);  // the watchdog's thread; a failure shows in the query below
          return cudaEventQuery(done) != cudaErrorNotReady;
        },
        [done] { cudaEventDestroy(done); }, Clock::now() + timeout(),
        who + ": nccl " + op + " (ordered on the compute stream) did not finish within " + timeout_text() +
            " (a peer rank died, is stuck, or called a different collective)");
  }

  // Caller holds mu.
  void check_usable(const std::string& op) const {
    if (aborted) {
      fail<Error>(who, ": nccl ", op, ": the NCCL communicator was aborted by an earlier error (", abort_reason,
                  "); it cannot be used any more");
    }
  }

  // Caller holds mu. Reads NCCL's asynchronous error state; aborts and throws
  // on an error. Returns true while the communicator is still in progress.
  bool poll_async_error(const std::string& op) {
    ncclResult_t r = ncclSuccess;
    const ncclResult_t q = ncclCommGetAsyncError(comm, &r);
    if (q != ncclSuccess) r = q;
    if (r == ncclSuccess) return false;
    if (r == ncclInProgress) return true;
    const char* last = ncclGetLastError(comm);
    abort_and_throw(who + ": nccl " + op + " failed: " + ncclGetErrorString(r) +
                    (last && *last ? std::string(" (") + last + ")" : std::string()) +
                    "; a peer rank may have died or called a different collective; the communicator was aborted");
  }

  // Caller holds mu. A nonblocking communicator may still be setting up
  // (init, first connection to a peer) after a call returned: wait for it.
  void settle(const std::string& op) {
    const auto deadline = Clock::now() + timeout();
    Backoff backoff;
    while (poll_async_error(op)) {
      if (Clock::now() > deadline) {
        abort_and_throw(who + ": nccl " + op + " did not start within " + timeout_text() +
                        " (waiting for the other ranks to join it); the communicator was aborted");
      }
      backoff.pause();
    }
  }

  // Waits on the host until `done` (recorded after the operation on the
  // comm stream) has happened, polling NCCL for asynchronous errors.
  void wait_event(cudaEvent_t done, const std::string& op) {
    const auto deadline = Clock::now() + timeout();
    Backoff backoff;
    for (;;) {
      const cudaError_t q = cudaEventQuery(done);
      if (q == cudaSuccess) return;
      std::lock_guard<std::mutex> lock(mu);
      check_usable(op);
      if (q != cudaErrorNotReady) {
        cudaGetLastError();
        abort_and_throw(who + ": nccl " + op + ": CUDA error while waiting for it: " + cudaGetErrorString(q) +
                        "; the communicator was aborted");
      }
      poll_async_error(op);
      if (Clock::now() > deadline) {
        abort_and_throw(who + ": nccl " + op + " did not finish within " + timeout_text() +
                        " (a peer rank died, is stuck, or called a different collective); "
                        "the communicator was aborted and cannot be used any more");
      }
      backoff.pause();
    }
  }
};

class NcclWork final : public CommWork {
 public:
  // done == nullptr: nothing was queued (empty tensors).
  NcclWork(std::shared_ptr<NcclState> state, cudaEvent_t done, std::string op)
      : state_(std::move(state)), done_(done), op_(std::move(op)), finished_(done == nullptr) {}
  ~NcclWork() override {
    if (done_) cudaEventDestroy(done_);
  }
  NcclWork(const NcclWork&) = delete;
  NcclWork& operator=(const NcclWork&) = delete;

  void wait() override {
    if (finished_) return;
    cuda::DeviceGuard guard(state_->device);
    state_->wait_event(done_, op_);
    finished_ = true;
  }

  // The compute stream waits for the operation's event; the watchdog keeps its timeout.
  void order_on_compute_stream() override {
    if (finished_) return;
    cuda::DeviceGuard guard(state_->device);
    STRATA_CUDA_CHECK(cudaStreamWaitEvent(cuda::compute_stream(), done_, 0));
    state_->watch(done_, op_);
    done_ = nullptr;  // the watchdog's now
    finished_ = true;
  }

  // True once wait() would return or throw without waiting.
  bool is_done() override {
    if (finished_) return true;
    const cudaError_t q = cudaEventQuery(done_);
    if (q != cudaErrorNotReady) return true;
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->aborted) return true;
    ncclResult_t r = ncclSuccess;
    return ncclCommGetAsyncError(state_->comm, &r) != ncclSuccess || (r != ncclSuccess && r != ncclInProgress);
  }

 private:
  std::shared_ptr<NcclState> state_;
  cudaEvent_t done_;
  std::string op_;
  bool finished_;
};

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(std::shared_ptr<NcclState> state) : s_(std::move(state)) {}

  int rank() const override { return s_->rank; }
  int world_size() const override { return s_->world_size; }
  CommBackend backend() const override { return CommBackend::kNccl; }
  void set_timeout(std::chrono::milliseconds timeout) override {
    if (timeout.count() <= 0) fail<ConfigError>(s_->who, ": the nccl timeout must be positive");
    s_->timeout_ms = timeout.count();
  }
  std::string describe() const override { return s_->who; }
  std::string why_cannot_move(const Tensor& t) const override {
    const Device d = t.device();
    if (d.is_cpu()) {
      return "the nccl backend moves CUDA device memory only, not CPU tensors: put it on cuda:" +
             std::to_string(s_->device) + " (Tensor::to) or use the tcp backend for host tensors";
    }
    if (d.index != s_->device) return "this nccl communicator runs on cuda:" + std::to_string(s_->device);
    return {};
  }

 protected:
  void do_broadcast(Tensor& t, int root) override { do_broadcast_async(t, root)->wait(); }
  void do_allreduce(Tensor& t, ReduceOp op) override { do_allreduce_async(t, op)->wait(); }

  std::unique_ptr<CommWork> do_allreduce_async(Tensor& t, ReduceOp op) override {
    return launch(call_text("allreduce", t), t.numel(), [&](ncclComm_t c, cudaStream_t s) {
      STRATA_NCCL_CHECK_STARTED(ncclAllReduce(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()),
                                              nccl_dtype(t.dtype()), nccl_op(op), c, s));
    });
  }

  std::unique_ptr<CommWork> do_broadcast_async(Tensor& t, int root) override {
    return launch(call_text("broadcast", t) + ", root " + std::to_string(root), t.numel(),
                  [&](ncclComm_t c, cudaStream_t s) {
                    STRATA_NCCL_CHECK_STARTED(ncclBroadcast(t.raw_data(), t.raw_data(),
                                                            static_cast<size_t>(t.numel()), nccl_dtype(t.dtype()),
                                                            root, c, s));
                  });
  }

  void do_reduce(Tensor& t, ReduceOp op, int root) override {
    launch(call_text("reduce", t) + ", root " + std::to_string(root), t.numel(), [&](ncclComm_t c, cudaStream_t s) {
      STRATA_NCCL_CHECK_STARTED(ncclReduce(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()),
                                           nccl_dtype(t.dtype()), nccl_op(op), root, c, s));
    })->wait();
  }

  void do_allgather(const Tensor& in, Tensor& out) override { do_allgather_async(in, out)->wait(); }

  std::unique_ptr<CommWork> do_allgather_async(const Tensor& in, Tensor& out) override {
    return launch(call_text("allgather", in) + " per rank", in.numel(), [&](ncclComm_t c, cudaStream_t s) {
      STRATA_NCCL_CHECK_STARTED(ncclAllGather(in.raw_data(), out.raw_data(), static_cast<size_t>(in.numel()),
                                              nccl_dtype(in.dtype()), c, s));
    });
  }

  void do_reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override {
    do_reduce_scatter_async(in, out, op)->wait();
  }

  std::unique_ptr<CommWork> do_reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) override {
    return launch(call_text("reduce_scatter", out) + " per rank", out.numel(), [&](ncclComm_t c, cudaStream_t s) {
      STRATA_NCCL_CHECK_STARTED(ncclReduceScatter(in.raw_data(), out.raw_data(), static_cast<size_t>(out.numel()),
                                                  nccl_dtype(in.dtype()), nccl_op(op), c, s));
    });
  }

  // The root receives every other rank's block in one NCCL group.
  void do_gather(const Tensor& in, Tensor& out, int root) override {
    const bool is_root = s_->rank == root;
    const size_t n = static_cast<size_t>(in.numel());
    const size_t bytes = in.nbytes();
    const ncclDataType_t dt = nccl_dtype(in.dtype());
    launch(call_text("gather", in) + " per rank, root " + std::to_string(root), in.numel(),
           [&](ncclComm_t c, cudaStream_t s) {
             if (is_root) {
               char* base = static_cast<char*>(out.raw_data());
               STRATA_CUDA_CHECK(cudaMemcpyAsync(base + bytes * root, in.raw_data(), bytes,
                                                 cudaMemcpyDeviceToDevice, s));
               grouped([&] {
                 for (int r = 0; r < s_->world_size; ++r) {
                   if (r != root) STRATA_NCCL_CHECK_STARTED(ncclRecv(base + bytes * r, n, dt, r, c, s));
                 }
               });
             } else {
               STRATA_NCCL_CHECK_STARTED(ncclSend(in.raw_data(), n, dt, root, c, s));
             }
           })->wait();
  }

  // The root sends block r to rank r in one NCCL group.
  void do_scatter(const Tensor& in, Tensor& out, int root) override {
    const bool is_root = s_->rank == root;
    const size_t n = static_cast<size_t>(out.numel());
    const size_t bytes = out.nbytes();
    const ncclDataType_t dt = nccl_dtype(out.dtype());
    launch(call_text("scatter", out) + " per rank, root " + std::to_string(root), out.numel(),
           [&](ncclComm_t c, cudaStream_t s) {
             if (is_root) {
               const char* base = static_cast<const char*>(in.raw_data());
               STRATA_CUDA_CHECK(cudaMemcpyAsync(out.raw_data(), base + bytes * root, bytes,
                                                 cudaMemcpyDeviceToDevice, s));
               grouped([&] {
                 for (int r = 0; r < s_->world_size; ++r) {
                   if (r != root) STRATA_NCCL_CHECK_STARTED(ncclSend(base + bytes * r, n, dt, r, c, s));
                 }
               });
             } else {
               STRATA_NCCL_CHECK_STARTED(ncclRecv(out.raw_data(), n, dt, root, c, s));
             }
           })->wait();
  }

  // NCCL has no tags: messages between two ranks match in call order.
  void do_send(const Tensor& t, int dst, int /*tag*/) override {
    launch(call_text("send", t) + " to rank " + std::to_string(dst), t.numel(), [&](ncclComm_t c, cudaStream_t s) {
      STRATA_NCCL_CHECK_STARTED(
          ncclSend(t.raw_data(), static_cast<size_t>(t.numel()), nccl_dtype(t.dtype()), dst, c, s));
    })->wait();
  }

  void do_recv(Tensor& t, int src, int /*tag*/) override {
    launch(call_text("recv", t) + " from rank " + std::to_string(src), t.numel(), [&](ncclComm_t c, cudaStream_t s) {
      STRATA_NCCL_CHECK_STARTED(
          ncclRecv(t.raw_data(), static_cast<size_t>(t.numel()), nccl_dtype(t.dtype()), src, c, s));
    })->wait();
  }

  // One NCCL group: every send and receive of the batch is posted before
  // any has to finish, so ranks that send to each other do not deadlock.
  void do_exchange(const std::vector<PeerTransfer>& batch) override {
    int64_t numel = 0;
    int sends = 0;
    for (const PeerTransfer& t : batch) {
      numel += t.tensor->numel();
      sends += t.kind == PeerTransfer::Kind::kSend ? 1 : 0;
    }
    const int recvs = static_cast<int>(batch.size()) - sends;
    const std::string op = "exchange (" + std::to_string(sends) + " send" + (sends == 1 ? "" : "s") + ", " +
                           std::to_string(recvs) + " receive" + (recvs == 1 ? "" : "s") + ", " +
                           std::to_string(numel) + " elements)";
    launch(op, numel, [&](ncclComm_t c, cudaStream_t s) {
      grouped([&] {
        for (const PeerTransfer& t : batch) {
          if (t.tensor->numel() == 0) continue;  // the peer's matching transfer is empty as well
          const size_t n = static_cast<size_t>(t.tensor->numel());
          if (t.kind == PeerTransfer::Kind::kSend) {
            STRATA_NCCL_CHECK_STARTED(ncclSend(t.tensor->raw_data(), n, nccl_dtype(t.tensor->dtype()), t.peer, c, s));
          } else {
            STRATA_NCCL_CHECK_STARTED(ncclRecv(t.tensor->raw_data(), n, nccl_dtype(t.tensor->dtype()), t.peer, c, s));
          }
        }
      });
    })->wait();
  }

  void do_barrier() override {
    Tensor& b = s_->barrier_buffer;
    launch("barrier", 1, [&](ncclComm_t c, cudaStream_t s) {
      STRATA_NCCL_CHECK_STARTED(ncclAllReduce(b.raw_data(), b.raw_data(), 1, ncclInt32, ncclSum, c, s));
    })->wait();
  }

 private:
  template <typename Fn>
  static void grouped(Fn&& fn) {
    STRATA_NCCL_CHECK(ncclGroupStart());
    try {
      fn();
    } catch (...) {
      ncclGroupEnd();
      throw;
    }
    STRATA_NCCL_CHECK_STARTED(ncclGroupEnd());
  }

  // Queues `enqueue` on the comm stream after the compute stream's work so
  // far; returns the handle whose wait() blocks until it is done.
  template <typename Fn>
  std::unique_ptr<CommWork> launch(const std::string& op, int64_t numel, Fn&& enqueue) {
    cuda::DeviceGuard guard(s_->device);
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->check_usable(op);
    if (numel == 0) return std::make_unique<NcclWork>(s_, nullptr, op);  // same on every rank: nothing to do
    cudaEvent_t done = nullptr;
    try {
      const cudaStream_t comm_stream = cuda::comm_stream();
      cuda::stream_wait(comm_stream, cuda::compute_stream());
      enqueue(s_->comm, comm_stream);
      s_->settle(op);
      STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
      STRATA_CUDA_CHECK(cudaEventRecord(done, comm_stream));
    } catch (const ConfigError&) {
      if (done) cudaEventDestroy(done);
      throw;
    } catch (const Error& e) {
      if (done) cudaEventDestroy(done);
      if (s_->aborted) throw;  // settle's message already names rank, host and operation
      fail<Error>(s_->who, ": nccl ", op, ": ", e.what());
    }
    return std::make_unique<NcclWork>(s_, done, op);
  }

  std::shared_ptr<NcclState> s_;
};

}  // namespace

std::unique_ptr<Communicator> create_nccl_communicator(const RankEnv& env, std::shared_ptr<Store> store,
                                                       NcclCommunicatorOptions options) {
  STRATA_CHECK(store != nullptr, "the nccl backend needs a store");
  if (env.world_size < 1 || env.rank < 0 || env.rank >= env.world_size) {
    fail<ConfigError>(env.describe(), ": not a valid rank / world size for the nccl backend");
  }
  auto state = std::make_shared<NcclState>();
  state->who = options.who.empty() ? env.describe() : options.who;
  state->rank = env.rank;
  state->world_size = env.world_size;
  state->timeout_ms = std::max<int64_t>(1, env.timeout.count());
  state->keep_alive = std::move(options.keep_alive);
  if (cuda::device_count() == 0) {
    fail<ConfigError>(state->who, ": the nccl backend needs a CUDA device, and there is none here (no GPU or no "
                      "driver); use the tcp backend");
  }
  state->device = options.device >= 0 ? options.device : cuda::current_device();
  cuda::check_device_index(state->device);
  cuda::DeviceGuard guard(state->device);

  // One rank per GPU: a clash is refused here with what to do, before
  // NCCL refuses it with "Duplicate GPU detected".
  {
    GpuPlacement mine;
    const char* host_id = std::getenv("NCCL_HOSTID");
    mine.host = host_id && *host_id ? host_id : env.hostname;
    char bus[64] = {0};
    STRATA_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, state->device));
    mine.gpu = bus;
    mine.device = state->device;
    mine.host_gpus = cuda::device_count();
    store->set(options.key + "/gpu/" + std::to_string(env.rank), encode_gpu_placement(mine));
    std::vector<GpuPlacement> all;
    for (int r = 0; r < env.world_size; ++r) {
      all.push_back(decode_gpu_placement(store->get(options.key + "/gpu/" + std::to_string(r))));
    }
    const std::string clash = duplicate_gpu_problem(all);
    if (!clash.empty()) fail<ConfigError>(state->who, ": the nccl backend: ", clash);
  }

  // Rendezvous: rank 0's unique id through the store.
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  const std::string key = options.key + "/id";
  if (env.rank == 0) {
    STRATA_NCCL_CHECK(ncclGetUniqueId(&id));
    store->set(key, std::string(id.internal, sizeof id.internal));
  } else {
    const std::string value = store->get(key);
    if (value.size() != sizeof id.internal) {
      fail<Error>(state->who, ": the NCCL unique id in the store under '", key, "' has ", value.size(),
                  " bytes, expected ", sizeof id.internal, " (another program using the same store key?)");
    }
    std::memcpy(id.internal, value.data(), sizeof id.internal);
  }

  // Nonblocking, so that a rank that never joins is a timeout, not a hang.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  state->barrier_buffer = Tensor({1}, DType::kI32, Device::cuda(state->device));
  {
    std::lock_guard<std::mutex> lock(state->mu);
    const ncclResult_t r = ncclCommInitRankConfig(&state->comm, env.world_size, id, env.rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      const std::string detail = ncclGetErrorString(r);
      if (state->comm) ncclCommAbort(state->comm);
      state->comm = nullptr;
      fail<Error>(state->who, ": ncclCommInitRankConfig failed on cuda:", state->device, ": ", detail,
                  " (set NCCL_DEBUG=INFO for NCCL's own account)");
    }
    state->settle("init (" + std::to_string(env.world_size) + " ranks on cuda:" + std::to_string(state->device) +
                  ")");
  }
  return std::make_unique<NcclCommunicator>(std::move(state));
}

}  // namespace strata::parallel

#endif  // STRATA_HAVE_NCCL && STRATA_WITH_CUDA
