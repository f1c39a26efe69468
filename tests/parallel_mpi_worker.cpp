// Started under mpirun by parallel_mpi_test.cpp: drives every collective of
// the mpi backend over every dtype (and every root and op) with inputs whose
// results are exact, then the error paths (argument checks, truncated
// receive, timeout). Prints one line per failure and exits non-zero if any;
// prints "rank R: all N checks passed" otherwise.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "framework/communicator.h"
#include "framework/dtype.h"
#include "framework/error.h"
#include "framework/tensor.h"
#include "parallel/rendezvous/env.h"
#include "parallel/backends/mpi_communicator.h"
#include "tests/parallel_bad_calls.h"

using namespace strata;
using strata::parallel::RankEnv;
using strata::parallel_test::bad_calls;
using strata::parallel_test::run_bad_calls;

namespace {

const DType kTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kU8};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax};
const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAverage: return "average";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
  }
  return "?";
}

int g_rank = 0;
int g_checks = 0;
int g_failures = 0;

void failure(const std::string& what) {
  ++g_failures;
  if (g_failures <= 30) std::printf("rank %d: FAIL %s\n", g_rank, what.c_str());
}

// Element access through double: every value used here is a small integer,
// exactly representable in every dtype, so the round trips are exact.
double get(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF32: return t.data<float>()[i];
    case DType::kF16: return f16_to_float(t.data<uint16_t>()[i]);
    case DType::kBF16: return bf16_to_float(t.data<uint16_t>()[i]);
    case DType::kI32: return t.data<int32_t>()[i];
    case DType::kU8: return t.data<uint8_t>()[i];
  }
  return 0;
}

void set(Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DType::kF32: t.data<float>()[i] = static_cast<float>(v); break;
    case DType::kF16: t.data<uint16_t>()[i] = float_to_f16(static_cast<float>(v)); break;
    case DType::kBF16: t.data<uint16_t>()[i] = float_to_bf16(static_cast<float>(v)); break;
    case DType::kI32: t.data<int32_t>()[i] = static_cast<int32_t>(v); break;
    case DType::kU8: t.data<uint8_t>()[i] = static_cast<uint8_t>(v); break;
  }
}

// Stores v in dtype t and reads it back (the rounding a result goes through).
double round_to(DType t, double v) {
  Tensor x({1}, t);
  set(x, 0, v);
  return get(x, 0);
}

bool is_float(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

// Rank r's element i: small integers, negative ones only for signed types.
double value(DType t, int r, int64_t i) {
  const double v = static_cast<double>((r + 1) * (i % 7 + 1) + (i % 3));
  return t == DType::kU8 ? v : v - 9;
}

Tensor make(DType t, int64_t n, const std::function<double(int64_t)>& f) {
  Tensor x({n}, t);
  for (int64_t i = 0; i < n; ++i) set(x, i, f(i));
  return x;
}

// The exact reduction of value(t, r, i) over ranks 0..world-1.
double reduced(DType t, ReduceOp op, int world, int64_t i) {
  double sum = 0, lo = value(t, 0, i), hi = lo;
  for (int r = 0; r < world; ++r) {
    const double v = value(t, r, i);
    sum += v;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  switch (op) {
    case ReduceOp::kSum: return sum;
    case ReduceOp::kMin: return lo;
    case ReduceOp::kMax: return hi;
    case ReduceOp::kAverage:
      // Sum, then one division: in f32 for the float types, truncating for the integers.
      if (is_float(t)) return round_to(t, static_cast<float>(sum) / static_cast<float>(world));
      return std::trunc(sum / world);
  }
  return 0;
}

void expect_equal(const Tensor& got, const std::function<double(int64_t)>& want, const std::string& what) {
  ++g_checks;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double w = round_to(got.dtype(), want(i));
    if (get(got, i) != w) {
      failure(what + ": element " + std::to_string(i) + " is " + std::to_string(get(got, i)) + ", expected " +
              std::to_string(w));
      return;
    }
  }
}

template <typename Fn>
void expect_error(const Fn& fn, const std::string& must_contain, const std::string& what) {
  ++g_checks;
  try {
    fn();
    failure(what + ": no error");
  } catch (const Error& e) {
    if (std::string(e.what()).find(must_contain) == std::string::npos) {
      failure(what + ": error lacks '" + must_contain + "': " + e.what());
    }
  }
}

std::string label(const char* coll, DType t, int64_t n, const std::string& extra = "") {
  return std::string(coll) + " " + dtype_name(t) + " n=" + std::to_string(n) + (extra.empty() ? "" : " " + extra);
}

void check_collectives(Communicator& comm) {
  const int world = comm.world_size();
  const int rank = comm.rank();
  const int64_t sizes[] = {0, 1, 1000, 70001};

  for (DType t : kTypes) {
    for (int64_t n : sizes) {
      for (ReduceOp op : kOps) {
        Tensor x = make(t, n, [&](int64_t i) { return value(t, rank, i); });
        comm.allreduce(x, op);
        expect_equal(x, [&](int64_t i) { return reduced(t, op, world, i); }, label("allreduce", t, n, op_name(op)));
      }
    }
    for (ReduceOp op : kOps) {
      const int64_t n = 1000;
      Tensor x = make(t, n, [&](int64_t i) { return value(t, rank, i); });
      auto work = comm.allreduce_async(x, op);
      while (!work->is_done()) std::this_thread::yield();
      work->wait();
      expect_equal(x, [&](int64_t i) { return reduced(t, op, world, i); }, label("allreduce_async", t, n, op_name(op)));
    }
    for (int root = 0; root < world; ++root) {
      for (int64_t n : {int64_t{0}, int64_t{1000}, int64_t{70001}}) {
        Tensor x = make(t, n, [&](int64_t i) { return value(t, rank, i); });
        comm.broadcast(x, root);
        expect_equal(x, [&](int64_t i) { return value(t, root, i); }, label("broadcast", t, n, "root " + std::to_string(root)));
      }
      Tensor y = make(t, 333, [&](int64_t i) { return value(t, rank, i); });
      comm.broadcast_async(y, root)->wait();
      expect_equal(y, [&](int64_t i) { return value(t, root, i); }, label("broadcast_async", t, 333, "root " + std::to_string(root)));

      for (ReduceOp op : kOps) {
        Tensor x = make(t, 1000, [&](int64_t i) { return value(t, rank, i); });
        comm.reduce(x, op, root);
        expect_equal(x,
                     [&](int64_t i) { return rank == root ? reduced(t, op, world, i) : value(t, rank, i); },
                     label("reduce", t, 1000, std::string(op_name(op)) + " root " + std::to_string(root)));
      }
      // gather: block r of out holds rank r's input; only the root's out is written.
      {
        const int64_t n = 257;
        Tensor in = make(t, n, [&](int64_t i) { return value(t, rank, i); });
        Tensor out = rank == root ? Tensor({world * n}, t) : Tensor();
        comm.gather(in, out, root);
        if (rank == root) {
          expect_equal(out, [&](int64_t i) { return value(t, static_cast<int>(i / n), i % n); },
                       label("gather", t, n, "root " + std::to_string(root)));
        }
      }
      // scatter: rank r receives block r of the root's input.
      {
        const int64_t n = 257;
        Tensor in = rank == root ? make(t, world * n, [&](int64_t i) { return value(t, static_cast<int>(i / n), i % n); })
                                 : Tensor();
        Tensor out({n}, t);
        comm.scatter(in, out, root);
        expect_equal(out, [&](int64_t i) { return value(t, rank, i); }, label("scatter", t, n, "root " + std::to_string(root)));
      }
    }
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{4099}}) {
      Tensor in = make(t, n, [&](int64_t i) { return value(t, rank, i); });
      Tensor out({world * n}, t);
      comm.allgather(in, out);
      expect_equal(out, [&](int64_t i) { return value(t, static_cast<int>(i / n), i % n); }, label("allgather", t, n));
    }
    for (ReduceOp op : kOps) {
      // Element j of every rank's input is value(t, rank, j); rank r keeps block r of the reduction.
      const int64_t n = 513;
      Tensor in = make(t, world * n, [&](int64_t j) { return value(t, rank, j); });
      Tensor out({n}, t);
      comm.reduce_scatter(in, out, op);
      expect_equal(out, [&](int64_t i) { return reduced(t, op, world, rank * n + i); },
                   label("reduce_scatter", t, n, op_name(op)));
    }
    // The asynchronous form (sharded data parallel's buckets), averaged on completion.
    for (ReduceOp op : kOps) {
      const int64_t n = 1001;
      Tensor in = make(t, world * n, [&](int64_t j) { return value(t, rank, j); });
      Tensor out({n}, t);
      auto work = comm.reduce_scatter_async(in, out, op);
      work->wait();
      expect_equal(out, [&](int64_t i) { return reduced(t, op, world, rank * n + i); },
                   label("reduce_scatter_async", t, n, op_name(op)));
    }
    // send/recv between every pair, in the same order everywhere so it cannot deadlock.
    for (int a = 0; a < world; ++a) {
      for (int b = a + 1; b < world; ++b) {
        if (rank != a && rank != b) continue;
        const int peer = rank == a ? b : a;
        const int64_t n = 100003;
        Tensor mine = make(t, n, [&](int64_t i) { return value(t, rank, i); });
        Tensor theirs({n}, t);
        if (rank == a) {
          comm.send(mine, peer, 7);
          comm.recv(theirs, peer, 8);
        } else {
          comm.recv(theirs, peer, 7);
          comm.send(mine, peer, 8);
        }
        expect_equal(theirs, [&](int64_t i) { return value(t, peer, i); },
                     label("send/recv", t, n, "from rank " + std::to_string(peer)));
      }
    }
  }
  comm.barrier();
  ++g_checks;
}

// Two threads drive two communicators at once (MPI_THREAD_MULTIPLE, or the
// backend's own serialisation when the library lacks it).
void check_threads(Communicator& c1, Communicator& c2) {
  const int world = c1.world_size();
  auto run = [&](Communicator& c, DType t, int* bad) {
    for (int iter = 0; iter < 20; ++iter) {
      Tensor x = make(t, 4096, [&](int64_t i) { return value(t, c.rank(), i); });
      c.allreduce(x, ReduceOp::kSum);
      for (int64_t i = 0; i < x.numel(); ++i) {
        if (get(x, i) != reduced(t, ReduceOp::kSum, world, i)) {
          ++*bad;
          break;
        }
      }
    }
  };
  int bad1 = 0, bad2 = 0;
  std::thread th([&] { run(c2, DType::kI32, &bad2); });
  run(c1, DType::kF32, &bad1);
  th.join();
  ++g_checks;
  if (bad1 || bad2) failure("concurrent allreduce on two communicators from two threads gave wrong sums");
}

void check_errors(Communicator& comm, const RankEnv& env) {
  const int world = comm.world_size();
  const int rank = comm.rank();
  // The wrong calls every backend must answer alike (tests/parallel_bad_calls.h).
  for (const std::string& problem : run_bad_calls(comm, bad_calls(world, rank, Device::cpu()))) failure(problem);
  ++g_checks;

  RankEnv bad = env;
  bad.launcher = "strata";
  bad.world_size = world + 3;
  expect_error([&] { parallel::create_mpi_communicator(bad); }, "mpirun", "world size disagreeing with MPI's");

  // A receive into a smaller tensor than was sent: MPI reports truncation,
  // after which that communicator is unusable. A receive of fewer elements
  // than expected is our own check. Each on a communicator of its own.
  {
    auto c = parallel::create_mpi_communicator(env);
    auto c2 = parallel::create_mpi_communicator(env);
    Tensor big({50}, DType::kF32);
    Tensor small({40}, DType::kF32);
    if (rank == 0) {
      c->send(big, 1, 3);
      c2->send(small, 1, 4);
    } else if (rank == 1) {
      expect_error([&] { c->recv(small, 0, 3); }, "MPI_Irecv", "receive truncated by MPI");
      expect_error([&] { c->recv(small, 0, 3); }, "earlier MPI operation", "use after failure");
      expect_error([&] { c2->recv(big, 0, 4); }, "sent 40 elements where 50 were expected", "short receive");
    }
  }
  comm.barrier();

  // Timeout: rank 0 allreduces alone and must give up quickly with a clear
  // message; the others join afterwards so the pending operation completes
  // before MPI_Finalize.
  {
    auto c = parallel::create_mpi_communicator(env);
    Tensor t({16}, DType::kF32);
    if (rank == 0) {
      c->set_timeout(std::chrono::milliseconds(300));
      expect_error([&] { c->allreduce(t, ReduceOp::kSum); }, "did not complete within 0.3 s", "timeout");
      comm.barrier();
      comm.barrier();  // progresses the abandoned allreduce while the others complete theirs
    } else {
      comm.barrier();
      c->allreduce(t, ReduceOp::kSum);
      comm.barrier();
    }
  }
}

}  // namespace

int main() {
  try {
    RankEnv env = parallel::detect_rank_env();
    env.timeout = std::chrono::seconds(60);
    auto comm = parallel::create_mpi_communicator(env);
    g_rank = comm->rank();
    if (comm->backend_name() != "mpi") failure("backend_name is " + comm->backend_name());
    if (comm->world_size() < 2) failure("needs at least 2 ranks, got " + std::to_string(comm->world_size()));
    check_collectives(*comm);
    {
      auto second = parallel::create_mpi_communicator(env);
      check_threads(*comm, *second);
    }
    check_errors(*comm, env);
    comm->barrier();
  } catch (const std::exception& e) {
    failure(std::string("unexpected error: ") + e.what());
  }
  if (g_failures) {
    std::printf("rank %d: %d of %d checks failed\n", g_rank, g_failures, g_checks);
    return 1;
  }
  std::printf("rank %d: all %d checks passed\n", g_rank, g_checks);
  return 0;
}
