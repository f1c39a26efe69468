#include "parallel/backends/mpi_communicator.h"

#include "framework/error.h"

#ifndef STRATA_HAVE_MPI

namespace strata::parallel {

bool mpi_backend_built() { return false; }

std::unique_ptr<Communicator> create_mpi_communicator(const RankEnv& env) {
  fail<ConfigError>(env.describe(), ": this strata was built without MPI, so the mpi backend is unavailable; "
                    "install an MPI (apt-get install libopenmpi-dev openmpi-bin, or run tools/install_deps.sh) "
                    "and re-run cmake, or use the tcp backend");
}

}  // namespace strata::parallel

#else  // STRATA_HAVE_MPI

// Only the C API is used; the deprecated C++ bindings' headers warn.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "parallel/collectives/reduce_kernels.h"

namespace strata::parallel {
namespace {

using Clock = std::chrono::steady_clock;

// Largest element count handed to one MPI call (counts are int). Element-wise
// operations are split into chunks of this size; block operations fail above it.
constexpr int64_t kMaxChunk = int64_t{1} << 30;

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error code " + std::to_string(code);
  return std::string(text, static_cast<size_t>(len));
}

// Throws when an MPI call did not return MPI_SUCCESS. `who` is "rank 1 of 2 on host".
void check_mpi(int rc, const char* call, const std::string& who) {
  if (rc != MPI_SUCCESS) fail<Error>(who, ": ", call, " failed: ", mpi_error_text(rc));
}

// ---- process-wide MPI state ------------------------------------------------------

struct MpiProcess {
  bool thread_multiple = false;
  std::mutex mu;  // serialises MPI calls when the library is not MPI_THREAD_MULTIPLE
  // User-defined reductions for the 16-bit float types, indexed [kind][op]:
  // kind 0 = f16, 1 = bf16; op 0 = sum, 1 = min, 2 = max.
  MPI_Op half_ops[2][3] = {{MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL}, {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL}};
};

MpiProcess& mpi_process() {
  static MpiProcess p;
  return p;
}

// Holds the MPI mutex for one call unless the library is thread-multiple.
class MpiLock {
 public:
  MpiLock() {
    if (!mpi_process().thread_multiple) lock_ = std::unique_lock<std::mutex>(mpi_process().mu);
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

void finalize_at_exit() {
  if (mpi_finalized()) return;
  MpiProcess& p = mpi_process();
  for (auto& kind : p.half_ops) {
    for (MPI_Op& op : kind) {
      if (op != MPI_OP_NULL) MPI_Op_free(&op);
    }
  }
  MPI_Finalize();
}

// MPI calls these with inout = in (op) inout; the ops are commutative.
template <DType kType, ReduceOp kOp>
void half_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_into(inout, in, static_cast<size_t>(*len), kType, kOp);
}

void init_mpi_once(const std::string& who) {
  static std::once_flag once;
  std::call_once(once, [&who] {
    MpiProcess& p = mpi_process();
    int initialised = 0;
    check_mpi(MPI_Initialized(&initialised), "MPI_Initialized", who);
    int provided = MPI_THREAD_SINGLE;
    if (initialised) {
      // The program owns MPI: it finalises it, and keeps its error handler on the world.
      check_mpi(MPI_Query_thread(&provided), "MPI_Query_thread", who);
    } else {
      // OpenMPI's non-blocking allreduce picks reduce-then-broadcast for
      // in-place calls (all of ours); its ring is about twice as fast for
      // large tensors on 2-4 ranks (measured with run_allreduce_bench.py).
      // Only a default: a value the user set is kept; other MPIs ignore it.
      setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "ring", /*overwrite=*/0);
      check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread", who);
      std::atexit(finalize_at_exit);
      check_mpi(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", who);
    }
    p.thread_multiple = provided >= MPI_THREAD_MULTIPLE;
    MPI_User_function* fns[2][3] = {
        {half_reduce<DType::kF16, ReduceOp::kSum>, half_reduce<DType::kF16, ReduceOp::kMin>,
         half_reduce<DType::kF16, ReduceOp::kMax>},
        {half_reduce<DType::kBF16, ReduceOp::kSum>, half_reduce<DType::kBF16, ReduceOp::kMin>,
         half_reduce<DType::kBF16, ReduceOp::kMax>}};
    for (int k = 0; k < 2; ++k) {
      for (int o = 0; o < 3; ++o) {
        check_mpi(MPI_Op_create(fns[k][o], /*commute=*/1, &p.half_ops[k][o]),
                  "MPI_Op_create", who);
      }
    }
  });
}

// ---- dtype and op mapping ------------------------------------------------------------

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::kF32: return MPI_FLOAT;
    case DType::kF16:
    case DType::kBF16: return MPI_UINT16_T;  // raw bits; reductions use the user ops
    case DType::kI32: return MPI_INT;
    case DType::kU8: return MPI_UNSIGNED_CHAR;
  }
  fail<Error>("unknown dtype ", static_cast<int>(t));
}

MPI_Op mpi_op(DType t, ReduceOp op) {
  const int o = op == ReduceOp::kMin ? 1 : op == ReduceOp::kMax ? 2 : 0;  // kAverage sums first
  if (t == DType::kF16) return mpi_process().half_ops[0][o];
  if (t == DType::kBF16) return mpi_process().half_ops[1][o];
  static const MPI_Op builtin[3] = {MPI_SUM, MPI_MIN, MPI_MAX};
  return builtin[o];
}

// A dummy address for zero-element buffers (some MPI builds reject null buffers).
char g_empty_buffer[8];

void* data_or_dummy(Tensor& t) { return t.raw_data() ? t.raw_data() : g_empty_buffer; }
const void* data_or_dummy(const Tensor& t) { return t.raw_data() ? t.raw_data() : g_empty_buffer; }

// ---- the communicator ------------------------------------------------------------------

class MpiCommunicator;

class MpiWork final : public CommWork {
 public:
  // `input`: a second tensor MPI reads until done (a reduce-scatter's), kept alive likewise.
  MpiWork(MpiCommunicator* comm, Tensor t, std::vector<MPI_Request> reqs, std::string what, bool average,
          Tensor input = Tensor())
      : comm_(comm), t_(std::move(t)), input_(std::move(input)), reqs_(std::move(reqs)), what_(std::move(what)),
        average_(average) {}
  ~MpiWork() override;
  void wait() override;
  bool is_done() override;

 private:
  void finish();

  MpiCommunicator* comm_;
  Tensor t_;  // shares the caller's storage, keeping it alive until MPI is done with it
  Tensor input_;
  std::vector<MPI_Request> reqs_;
  std::string what_;
  bool average_;
  bool done_ = false;
};

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(const RankEnv& env) {
    std::string host = env.hostname;
    if (host.empty()) {
      char buf[256] = {0};
      if (gethostname(buf, sizeof(buf) - 1) == 0) host = buf;
    }
    std::string who = env.describe();
    init_mpi_once(who);
    int rank = 0;
    int size = 1;
    {
      MpiLock lock;
      check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank", who);
      check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size", who);
    }
    const bool launched = env.launcher == "strata" || env.launcher == "mpirun" || env.launcher == "srun";
    if (launched && (rank != env.rank || size != env.world_size)) {
      fail<ConfigError>(who, " (started by ", env.launcher, "), but MPI says this process is rank ", rank, " of ",
                        size, ": the mpi backend needs every rank started by mpirun/mpiexec (e.g. `mpirun -np ",
                        env.world_size, " strata ...`); use the tcp backend with `strata launch`");
    }
    rank_ = rank;
    world_ = size;
    who_ = "rank " + std::to_string(rank_) + " of " + std::to_string(world_) + " on " + host;
    timeout_ms_ = env.timeout.count();
    MpiLock lock;
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup", who_);
    check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", who_);
    int flag = 0;
    int* tag_ub = nullptr;
    check_mpi(MPI_Comm_get_attr(comm_, MPI_TAG_UB, &tag_ub, &flag), "MPI_Comm_get_attr(MPI_TAG_UB)", who_);
    tag_ub_ = flag && tag_ub ? *tag_ub : 32767;
  }

  ~MpiCommunicator() override {
    if (comm_ == MPI_COMM_NULL || mpi_finalized()) return;
    MpiLock lock;
    MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  CommBackend backend() const override { return CommBackend::kMpi; }
  void set_timeout(std::chrono::milliseconds timeout) override { timeout_ms_ = timeout.count(); }
  std::string describe() const override { return who_; }
  std::string why_cannot_move(const Tensor& t) const override {
    if (t.device().is_cpu()) return {};
    return "the mpi backend moves CPU tensors only; build it with create_communicator (which copies CUDA tensors "
           "through the host) or copy the tensor to the host";
  }
  int max_tag() const override { return tag_ub_; }

 protected:

  void do_broadcast(Tensor& t, int root) override {
    check_usable();
    auto reqs = start_broadcast(t, root);
    complete(reqs, call_text("MPI_Ibcast", t, root));
  }

  void do_allreduce(Tensor& t, ReduceOp op) override {
    check_usable();
    auto reqs = start_allreduce(t, op);
    complete(reqs, call_text_op("MPI_Iallreduce", t, op));
    if (op == ReduceOp::kAverage) scale(t);
  }

  void do_reduce(Tensor& t, ReduceOp op, int root) override {
    check_usable();
    const MPI_Datatype type = mpi_type(t.dtype());
    const MPI_Op mop = mpi_op(t.dtype(), op);
    auto* base = static_cast<char*>(data_or_dummy(t));
    std::vector<MPI_Request> reqs;
    for_each_chunk(t, [&](int64_t offset, int count) {
      char* p = base + offset * static_cast<int64_t>(dtype_size(t.dtype()));
      MPI_Request r;
      MpiLock lock;
      // The root reduces in place; the other ranks only send (their tensor stays as it was).
      const int rc = rank_ == root ? MPI_Ireduce(MPI_IN_PLACE, p, count, type, mop, root, comm_, &r)
                                   : MPI_Ireduce(p, nullptr, count, type, mop, root, comm_, &r);
      check(rc, "MPI_Ireduce");
      reqs.push_back(r);
    });
    complete(reqs, call_text_op("MPI_Ireduce", t, op, root));
    if (op == ReduceOp::kAverage && rank_ == root) scale(t);
  }

  void do_allgather(const Tensor& in, Tensor& out) override {
    check_usable();
    const int count = block_count(in.numel(), "allgather");
    MPI_Request r;
    {
      MpiLock lock;
      check(MPI_Iallgather(data_or_dummy(in), count, mpi_type(in.dtype()), data_or_dummy(out), count,
                           mpi_type(in.dtype()), comm_, &r),
            "MPI_Iallgather");
    }
    std::vector<MPI_Request> reqs{r};
    complete(reqs, call_text("MPI_Iallgather", in));
  }

  void do_gather(const Tensor& in, Tensor& out, int root) override {
    check_usable();
    const int count = block_count(in.numel(), "gather");
    void* recv = rank_ == root ? data_or_dummy(out) : nullptr;
    MPI_Request r;
    {
      MpiLock lock;
      check(MPI_Igather(data_or_dummy(in), count, mpi_type(in.dtype()), recv, count, mpi_type(in.dtype()), root,
                        comm_, &r),
            "MPI_Igather");
    }
    std::vector<MPI_Request> reqs{r};
    complete(reqs, call_text("MPI_Igather", in, root));
  }

  void do_scatter(const Tensor& in, Tensor& out, int root) override {
    check_usable();
    const int count = block_count(out.numel(), "scatter");
    const void* send = rank_ == root ? data_or_dummy(in) : nullptr;
    MPI_Request r;
    {
      MpiLock lock;
      check(MPI_Iscatter(send, count, mpi_type(out.dtype()), data_or_dummy(out), count, mpi_type(out.dtype()), root,
                         comm_, &r),
            "MPI_Iscatter");
    }
    std::vector<MPI_Request> reqs{r};
    complete(reqs, call_text("MPI_Iscatter", out, root));
  }

  void do_reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override {
    check_usable();
    std::vector<MPI_Request> reqs{start_reduce_scatter(in, out, op)};
    complete(reqs, call_text_op("MPI_Ireduce_scatter_block", out, op));
    if (op == ReduceOp::kAverage) scale(out);
  }

  std::unique_ptr<CommWork> do_reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) override {
    check_usable();
    std::vector<MPI_Request> reqs{start_reduce_scatter(in, out, op)};
    return std::make_unique<MpiWork>(this, out, std::move(reqs), call_text_op("MPI_Ireduce_scatter_block", out, op),
                                     op == ReduceOp::kAverage, in);
  }

  void do_send(const Tensor& t, int dst, int tag) override {
    check_usable();
    const MPI_Datatype type = mpi_type(t.dtype());
    const auto* base = static_cast<const char*>(data_or_dummy(t));
    std::vector<MPI_Request> reqs;
    for_each_chunk(t, [&](int64_t offset, int count) {
      MPI_Request r;
      MpiLock lock;
      check(MPI_Isend(base + offset * static_cast<int64_t>(dtype_size(t.dtype())), count, type, dst, tag, comm_,
                      &r),
            "MPI_Isend");
      reqs.push_back(r);
    });
    complete(reqs, call_text("MPI_Isend", t, -1) + " to rank " + std::to_string(dst) + " (tag " +
                       std::to_string(tag) + ")");
  }

  void do_recv(Tensor& t, int src, int tag) override {
    check_usable();
    const MPI_Datatype type = mpi_type(t.dtype());
    auto* base = static_cast<char*>(data_or_dummy(t));
    std::vector<MPI_Request> reqs;
    std::vector<int> expected;
    for_each_chunk(t, [&](int64_t offset, int count) {
      MPI_Request r;
      MpiLock lock;
      check(MPI_Irecv(base + offset * static_cast<int64_t>(dtype_size(t.dtype())), count, type, src, tag, comm_,
                      &r),
            "MPI_Irecv");
      reqs.push_back(r);
      expected.push_back(count);
    });
    const std::string what =
        call_text("MPI_Irecv", t, -1) + " from rank " + std::to_string(src) + " (tag " + std::to_string(tag) + ")";
    const std::vector<MPI_Status> statuses = complete(reqs, what);
    for (size_t i = 0; i < statuses.size(); ++i) {
      int got = 0;
      MPI_Status st = statuses[i];
      check(MPI_Get_count(&st, type, &got), "MPI_Get_count");
      if (got != expected[i]) {
        fail<ShapeError>(who_, ": ", what, ": rank ", src, " sent ", got, " elements where ", expected[i],
                         " were expected; send and recv tensors must have the same numel and dtype");
      }
    }
  }

  void do_barrier() override {
    check_usable();
    MPI_Request r;
    {
      MpiLock lock;
      check(MPI_Ibarrier(comm_, &r), "MPI_Ibarrier");
    }
    std::vector<MPI_Request> reqs{r};
    complete(reqs, "MPI_Ibarrier");
  }

  std::unique_ptr<CommWork> do_allreduce_async(Tensor& t, ReduceOp op) override {
    check_usable();
    auto reqs = start_allreduce(t, op);
    return std::make_unique<MpiWork>(this, t, std::move(reqs), call_text_op("MPI_Iallreduce", t, op),
                                     op == ReduceOp::kAverage);
  }

  std::unique_ptr<CommWork> do_broadcast_async(Tensor& t, int root) override {
    check_usable();
    auto reqs = start_broadcast(t, root);
    return std::make_unique<MpiWork>(this, t, std::move(reqs), call_text("MPI_Ibcast", t, root), false);
  }

 public:
  // Polls the requests until all are done or the timeout passes. Returns their statuses.
  std::vector<MPI_Status> complete(std::vector<MPI_Request>& reqs, const std::string& what) {
    std::vector<MPI_Status> statuses(reqs.size());
    const auto timeout = std::chrono::milliseconds(timeout_ms_.load());
    const auto start = Clock::now();
    for (uint64_t spins = 0;; ++spins) {
      if (test(reqs, statuses, what)) return statuses;
      // Check the clock and yield the core now and then: ranks often share cores,
      // and a busy rank would starve the peer it is waiting for.
      if ((spins & 63) == 63) {
        if (Clock::now() - start > timeout) {
          broken_ = true;
          fail<Error>(who_, ": ", what, " did not complete within ", timeout.count() / 1000.0,
                      " s; another rank may have crashed, hung, or called a different collective. "
                      "MPI cannot cancel it, so this communicator is unusable now");
        }
        std::this_thread::yield();
      }
    }
  }

  // One non-blocking check of all the requests; true when all are complete.
  bool test(std::vector<MPI_Request>& reqs, std::vector<MPI_Status>& statuses, const std::string& what) {
    if (reqs.empty()) return true;
    int flag = 0;
    int rc;
    {
      MpiLock lock;
      rc = MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &flag, statuses.data());
    }
    if (rc == MPI_ERR_IN_STATUS) {
      for (const MPI_Status& s : statuses) {
        if (s.MPI_ERROR != MPI_SUCCESS && s.MPI_ERROR != MPI_ERR_PENDING) rc = s.MPI_ERROR;
      }
    }
    if (rc != MPI_SUCCESS) {
      broken_ = true;
      fail<Error>(who_, ": ", what, " failed: ", mpi_error_text(rc));
    }
    return flag != 0;
  }

  void scale(Tensor& t) const { scale_average(t.raw_data(), static_cast<size_t>(t.numel()), t.dtype(), world_); }
  const std::string& who() const { return who_; }

 private:
  void check(int rc, const char* call) {
    if (rc != MPI_SUCCESS) {
      broken_ = true;
      check_mpi(rc, call, who_);
    }
  }

  void check_usable() const {
    if (broken_) {
      fail<Error>(who_, ": an earlier MPI operation on this communicator failed or timed out, and MPI cannot "
                  "recover from that; restart the job");
    }
  }

  int block_count(int64_t n, const char* what) const {
    if (n > INT_MAX) {
      fail<Error>(who_, ": ", what, ": blocks of ", n, " elements exceed MPI's int count (", INT_MAX,
                  "); split the tensor");
    }
    return static_cast<int>(n);
  }

  // Calls fn(offset, count) for consecutive chunks covering the tensor (at least one call).
  template <typename Fn>
  void for_each_chunk(const Tensor& t, Fn&& fn) const {
    const int64_t n = t.numel();
    int64_t offset = 0;
    do {
      const int64_t count = std::min(kMaxChunk, n - offset);
      fn(offset, static_cast<int>(count));
      offset += count;
    } while (offset < n);
  }

  std::vector<MPI_Request> start_allreduce(Tensor& t, ReduceOp op) {
    const MPI_Datatype type = mpi_type(t.dtype());
    const MPI_Op mop = mpi_op(t.dtype(), op);
    auto* base = static_cast<char*>(data_or_dummy(t));
    std::vector<MPI_Request> reqs;
    for_each_chunk(t, [&](int64_t offset, int count) {
      MPI_Request r;
      MpiLock lock;
      check(MPI_Iallreduce(MPI_IN_PLACE, base + offset * static_cast<int64_t>(dtype_size(t.dtype())), count, type,
                           mop, comm_, &r),
            "MPI_Iallreduce");
      reqs.push_back(r);
    });
    return reqs;
  }

  MPI_Request start_reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
    const int count = block_count(out.numel(), "reduce_scatter");
    MPI_Request r;
    MpiLock lock;
    check(MPI_Ireduce_scatter_block(data_or_dummy(in), data_or_dummy(out), count, mpi_type(out.dtype()),
                                    mpi_op(out.dtype(), op), comm_, &r),
          "MPI_Ireduce_scatter_block");
    return r;
  }

  std::vector<MPI_Request> start_broadcast(Tensor& t, int root) {
    const MPI_Datatype type = mpi_type(t.dtype());
    auto* base = static_cast<char*>(data_or_dummy(t));
    std::vector<MPI_Request> reqs;
    for_each_chunk(t, [&](int64_t offset, int count) {
      MPI_Request r;
      MpiLock lock;
      check(MPI_Ibcast(base + offset * static_cast<int64_t>(dtype_size(t.dtype())), count, type, root, comm_, &r),
            "MPI_Ibcast");
      reqs.push_back(r);
    });
    return reqs;
  }

  // "MPI_Ibcast (1024 f32 elements, root 0)"
  std::string call_text(const char* call, const Tensor& t, int root = -1) const {
    std::string s = std::string(call) + " (" + std::to_string(t.numel()) + " " + dtype_name(t.dtype()) + " elements";
    if (root >= 0) s += ", root " + std::to_string(root);
    return s + ")";
  }
  // "MPI_Iallreduce (sum of 1024 f32 elements)"
  std::string call_text_op(const char* call, const Tensor& t, ReduceOp op, int root = -1) const {
    std::string s = std::string(call) + " (" + reduce_op_name(op) + " of " + std::to_string(t.numel()) + " " +
                    dtype_name(t.dtype()) + " elements";
    if (root >= 0) s += ", root " + std::to_string(root);
    return s + ")";
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int world_ = 1;
  int tag_ub_ = 32767;
  std::string who_;
  std::atomic<int64_t> timeout_ms_{300000};
  std::atomic<bool> broken_{false};
};

MpiWork::~MpiWork() {
  if (done_ || mpi_finalized()) return;
  // MPI forbids freeing a pending collective, so wait it out; errors were the
  // caller's to collect with wait().
  try {
    wait();
  } catch (const std::exception&) {
  }
}

void MpiWork::wait() {
  if (done_) return;
  comm_->complete(reqs_, what_);
  finish();
}

bool MpiWork::is_done() {
  if (done_) return true;
  std::vector<MPI_Status> statuses(reqs_.size());
  if (!comm_->test(reqs_, statuses, what_)) return false;
  finish();
  return true;
}

void MpiWork::finish() {
  done_ = true;
  if (average_) comm_->scale(t_);
}

}  // namespace

bool mpi_backend_built() { return true; }

std::unique_ptr<Communicator> create_mpi_communicator(const RankEnv& env) {
  return std::make_unique<MpiCommunicator>(env);
}

}  // namespace strata::parallel

#endif  // STRATA_HAVE_MPI
