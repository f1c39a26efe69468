// Exact-result checks of every Communicator collective, shared by the
// ranks-as-threads tests (parallel_collectives_test.cpp) and the
// multi-process worker (parallel_worker.cpp). Every rank of a world calls the
// same check_* function; each throws std::runtime_error describing the first
// wrong element.
//
// Inputs are small integers (|v| <= 16), so that sums over up to 4 ranks, and
// every partial sum on the way, are exact in f16 and bf16 as well; averages
// are checked against the same rounding the kernels promise (f32 division
// rounded to the dtype; truncating integer division for i32/u8).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "framework/communicator.h"
#include "framework/dtype.h"
#include "framework/tensor.h"
#include "parallel/rendezvous/store.h"
#include "parallel/backends/tcp_communicator.h"
#include "parallel/transport/tcp_transport.h"

namespace strata::parallel_test {

// ---- the ranks of a world as threads of this process ----

// Connects n transports concurrently (each rank waits for the others),
// rendezvousing through an in-memory store under `prefix`.
inline std::vector<std::unique_ptr<parallel::Transport>> connect_world(int n, std::chrono::milliseconds timeout,
                                                                       const std::string& prefix = "test") {
  auto store = parallel::make_memory_store(timeout);
  std::vector<std::unique_ptr<parallel::Transport>> transports(static_cast<size_t>(n));
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        parallel::TcpTransportOptions opts;
        opts.advertise_host = "127.0.0.1";
        opts.hostname = "host-" + std::to_string(r);
        transports[static_cast<size_t>(r)] = parallel::connect_tcp_transport(*store, r, n, prefix, timeout, opts);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    if (!e.empty()) throw std::runtime_error("connecting the world: " + e);
  }
  return transports;
}

// A tcp communicator per rank over connect_world's transports; rank r calls
// its host "host-<r>" in messages.
inline std::vector<std::unique_ptr<Communicator>> make_world(
    int n, const std::string& prefix,
    parallel::AllreduceAlgorithm algorithm = parallel::AllreduceAlgorithm::kAuto,
    std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto transports = connect_world(n, timeout, prefix);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < n; ++r) {
    parallel::TcpCommunicatorOptions opts;
    opts.algorithm = algorithm;
    opts.hostname = "host-" + std::to_string(r);
    comms.push_back(std::make_unique<parallel::TcpCommunicator>(std::move(transports[static_cast<size_t>(r)]), opts));
  }
  return comms;
}

// Each rank's error from run_ranks must be empty.
inline void expect_no_errors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Runs fn(rank) on one thread per rank; returns each rank's error ("" if none).
inline std::vector<std::string> run_ranks(int n, const std::function<void(int)>& fn) {
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// A small classification set for the strategy-equivalence tests: labels drawn
// uniformly, inputs standard normal with +1.5 on the features k whose
// k % classes is the label, from a seeded generator.
struct Classification {
  std::vector<float> x;      // [samples, inputs]
  std::vector<int32_t> y;    // [samples]
};
inline Classification make_classification(int samples, int inputs, int classes, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal;
  Classification c;
  c.x.resize(static_cast<size_t>(samples) * inputs);
  c.y.resize(static_cast<size_t>(samples));
  for (int i = 0; i < samples; ++i) {
    c.y[i] = static_cast<int32_t>(gen() % classes);
    for (int k = 0; k < inputs; ++k) {
      c.x[static_cast<size_t>(i) * inputs + k] = normal(gen) + (k % classes == c.y[i] ? 1.5f : 0.0f);
    }
  }
  return c;
}

inline const std::vector<DType>& all_dtypes() {
  static const std::vector<DType> d = {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kU8};
  return d;
}

inline const std::vector<ReduceOp>& all_ops() {
  static const std::vector<ReduceOp> o = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax};
  return o;
}

inline const char* op_str(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAverage:
      return "average";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
  }
  return "?";
}

// 0, 1, 7, world-1, a size not divisible by the world, ~1e5 (not divisible either).
inline std::vector<int64_t> test_sizes(int world, int64_t large = 100003) {
  std::vector<int64_t> s = {0, 1, 7, world - 1, 2 * world + 1, large};
  std::sort(s.begin(), s.end());
  s.erase(std::unique(s.begin(), s.end()), s.end());
  return s;
}

// The integer rank r holds at index i (u8: non-negative).
inline int64_t value(int64_t i, int r, DType d) {
  const int64_t v = (i * 7 + r * 13 + 3) % 17;
  return d == DType::kU8 ? v : v - 5;
}

inline void set_value(Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DType::kF32:
      t.data<float>()[i] = static_cast<float>(v);
      return;
    case DType::kF16:
      t.data<uint16_t>()[i] = float_to_f16(static_cast<float>(v));
      return;
    case DType::kBF16:
      t.data<uint16_t>()[i] = float_to_bf16(static_cast<float>(v));
      return;
    case DType::kI32:
      t.data<int32_t>()[i] = static_cast<int32_t>(v);
      return;
    case DType::kU8:
      t.data<uint8_t>()[i] = static_cast<uint8_t>(v);
      return;
  }
}

inline double get_value(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF32:
      return t.data<float>()[i];
    case DType::kF16:
      return f16_to_float(t.data<uint16_t>()[i]);
    case DType::kBF16:
      return bf16_to_float(t.data<uint16_t>()[i]);
    case DType::kI32:
      return t.data<int32_t>()[i];
    case DType::kU8:
      return t.data<uint8_t>()[i];
  }
  return 0;
}

// The exact result of op over value(i, 0..world-1), rounded like the kernels.
inline double expected_reduce(int64_t i, int world, DType d, ReduceOp op) {
  int64_t sum = 0, lo = value(i, 0, d), hi = lo;
  for (int r = 0; r < world; ++r) {
    const int64_t v = value(i, r, d);
    sum += v;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  switch (op) {
    case ReduceOp::kSum:
      return static_cast<double>(sum);
    case ReduceOp::kMin:
      return static_cast<double>(lo);
    case ReduceOp::kMax:
      return static_cast<double>(hi);
    case ReduceOp::kAverage:
      break;
  }
  const float q = static_cast<float>(sum) / static_cast<float>(world);
  switch (d) {
    case DType::kF32:
      return q;
    case DType::kF16:
      return f16_to_float(float_to_f16(q));
    case DType::kBF16:
      return bf16_to_float(float_to_bf16(q));
    case DType::kI32:
    case DType::kU8:
      return static_cast<double>(sum / world);
  }
  return 0;
}

inline Tensor filled(int64_t n, DType d, int r, int64_t index_offset = 0) {
  Tensor t({n}, d);
  for (int64_t i = 0; i < n; ++i) set_value(t, i, static_cast<double>(value(i + index_offset, r, d)));
  return t;
}

inline std::string where(const Communicator& c, const char* what, DType d, int64_t n) {
  return "rank " + std::to_string(c.rank()) + " of " + std::to_string(c.world_size()) + ": " + what + " " +
         dtype_name(d) + " n=" + std::to_string(n);
}

inline void expect_eq(double got, double want, const std::string& ctx, int64_t i) {
  if (got != want) {
    throw std::runtime_error(ctx + ": element " + std::to_string(i) + " is " + std::to_string(got) + ", expected " +
                             std::to_string(want));
  }
}

// allreduce: every dtype x op x size.
inline void check_allreduce(Communicator& c, const std::vector<int64_t>& sizes) {
  for (DType d : all_dtypes()) {
    for (ReduceOp op : all_ops()) {
      for (int64_t n : sizes) {
        Tensor t = filled(n, d, c.rank());
        c.allreduce(t, op);
        const std::string ctx = where(c, "allreduce", d, n) + " " + op_str(op);
        for (int64_t i = 0; i < n; ++i) expect_eq(get_value(t, i), expected_reduce(i, c.world_size(), d, op), ctx, i);
      }
    }
  }
}

// broadcast from every root.
inline void check_broadcast(Communicator& c, const std::vector<int64_t>& sizes) {
  for (DType d : all_dtypes()) {
    for (int64_t n : sizes) {
      for (int root = 0; root < c.world_size(); ++root) {
        Tensor t = filled(n, d, c.rank());
        c.broadcast(t, root);
        const std::string ctx = where(c, "broadcast", d, n) + " root " + std::to_string(root);
        for (int64_t i = 0; i < n; ++i) expect_eq(get_value(t, i), static_cast<double>(value(i, root, d)), ctx, i);
      }
    }
  }
}

// reduce to every root; non-roots keep their input.
inline void check_reduce(Communicator& c, const std::vector<int64_t>& sizes) {
  for (DType d : all_dtypes()) {
    for (ReduceOp op : all_ops()) {
      for (int64_t n : sizes) {
        for (int root = 0; root < c.world_size(); ++root) {
          Tensor t = filled(n, d, c.rank());
          c.reduce(t, op, root);
          const std::string ctx = where(c, "reduce", d, n) + " " + op_str(op) + " root " + std::to_string(root);
          for (int64_t i = 0; i < n; ++i) {
            const double want = c.rank() == root ? expected_reduce(i, c.world_size(), d, op)
                                                 : static_cast<double>(value(i, c.rank(), d));
            expect_eq(get_value(t, i), want, ctx, i);
          }
        }
      }
    }
  }
}

inline void check_allgather(Communicator& c, const std::vector<int64_t>& sizes) {
  const int w = c.world_size();
  for (DType d : all_dtypes()) {
    for (int64_t n : sizes) {
      Tensor in = filled(n, d, c.rank());
      Tensor out({w * n}, d);
      c.allgather(in, out);
      const std::string ctx = where(c, "allgather", d, n);
      for (int b = 0; b < w; ++b) {
        for (int64_t i = 0; i < n; ++i)
          expect_eq(get_value(out, b * n + i), static_cast<double>(value(i, b, d)), ctx, b * n + i);
      }
    }
  }
}

// gather to every root; non-roots' output stays untouched.
inline void check_gather(Communicator& c, const std::vector<int64_t>& sizes) {
  const int w = c.world_size();
  for (DType d : all_dtypes()) {
    for (int64_t n : sizes) {
      for (int root = 0; root < w; ++root) {
        Tensor in = filled(n, d, c.rank());
        Tensor out({w * n}, d);
        for (int64_t i = 0; i < w * n; ++i) set_value(out, i, 3);
        c.gather(in, out, root);
        const std::string ctx = where(c, "gather", d, n) + " root " + std::to_string(root);
        for (int b = 0; b < w; ++b) {
          for (int64_t i = 0; i < n; ++i) {
            const double want = c.rank() == root ? static_cast<double>(value(i, b, d)) : 3.0;
            expect_eq(get_value(out, b * n + i), want, ctx, b * n + i);
          }
        }
      }
    }
  }
}

// scatter from every root: block b of root's input is value(., b + root).
inline void check_scatter(Communicator& c, const std::vector<int64_t>& sizes) {
  const int w = c.world_size();
  for (DType d : all_dtypes()) {
    for (int64_t n : sizes) {
      for (int root = 0; root < w; ++root) {
        Tensor in({w * n}, d);
        for (int b = 0; b < w; ++b) {
          // Non-roots fill garbage (their input must be ignored).
          for (int64_t i = 0; i < n; ++i) {
            set_value(in, b * n + i, c.rank() == root ? static_cast<double>(value(i, b + root, d)) : 1.0);
          }
        }
        Tensor out({n}, d);
        c.scatter(in, out, root);
        const std::string ctx = where(c, "scatter", d, n) + " root " + std::to_string(root);
        for (int64_t i = 0; i < n; ++i)
          expect_eq(get_value(out, i), static_cast<double>(value(i, c.rank() + root, d)), ctx, i);
      }
    }
  }
}

// reduce_scatter: rank r's input block b holds value(b * n + i, r).
inline void check_reduce_scatter(Communicator& c, const std::vector<int64_t>& sizes) {
  const int w = c.world_size();
  for (DType d : all_dtypes()) {
    for (ReduceOp op : all_ops()) {
      for (int64_t n : sizes) {
        Tensor in = filled(w * n, d, c.rank());
        const Tensor before = in.clone();
        Tensor out({n}, d);
        c.reduce_scatter(in, out, op);
        const std::string ctx = where(c, "reduce_scatter", d, n) + " " + op_str(op);
        for (int64_t i = 0; i < n; ++i) {
          expect_eq(get_value(out, i), expected_reduce(c.rank() * n + i, w, d, op), ctx, i);
        }
        if (in.nbytes() && std::memcmp(in.raw_data(), before.raw_data(), in.nbytes()) != 0) {
          throw std::runtime_error(ctx + ": the input was modified");
        }
      }
    }
  }
}

// Each rank sends to the next and receives from the previous, several tags
// in a row; even ranks send first, odd ranks receive first.
inline void check_send_recv(Communicator& c, const std::vector<int64_t>& sizes) {
  const int w = c.world_size();
  const int r = c.rank();
  const int next = (r + 1) % w;
  const int prev = (r + w - 1) % w;
  for (DType d : all_dtypes()) {
    for (int64_t n : sizes) {
      for (int k = 0; k < 2; ++k) {
        const int send_tag = 100 * k + r;
        const int recv_tag = 100 * k + prev;
        Tensor out = filled(n, d, r + k);
        Tensor in({n}, d);
        if (r % 2 == 0) {
          c.send(out, next, send_tag);
          c.recv(in, prev, recv_tag);
        } else {
          c.recv(in, prev, recv_tag);
          c.send(out, next, send_tag);
        }
        const std::string ctx = where(c, "send/recv", d, n) + " tag " + std::to_string(recv_tag);
        for (int64_t i = 0; i < n; ++i) expect_eq(get_value(in, i), static_cast<double>(value(i, prev + k, d)), ctx, i);
      }
    }
  }
}

// Several async allreduces and broadcasts in flight at once, interleaved
// with a blocking call, all completing with the right results.
inline void check_async(Communicator& c, int64_t n) {
  const int w = c.world_size();
  std::vector<Tensor> sums;
  std::vector<std::unique_ptr<CommWork>> works;
  for (int k = 0; k < 4; ++k) {
    sums.push_back(filled(n + k, DType::kF32, c.rank()));
    works.push_back(c.allreduce_async(sums.back(), ReduceOp::kSum));
  }
  Tensor bc = filled(n, DType::kI32, c.rank());
  works.push_back(c.broadcast_async(bc, w - 1));
  Tensor sync = filled(5, DType::kI32, c.rank());
  c.allreduce(sync, ReduceOp::kMax);  // queued behind the async ones
  for (auto& wk : works) wk->wait();
  for (auto& wk : works) {
    if (!wk->is_done()) throw std::runtime_error("async work not done after wait()");
  }
  for (int k = 0; k < 4; ++k) {
    const std::string ctx = where(c, "allreduce_async", DType::kF32, n + k);
    for (int64_t i = 0; i < n + k; ++i)
      expect_eq(get_value(sums[k], i), expected_reduce(i, w, DType::kF32, ReduceOp::kSum), ctx, i);
  }
  for (int64_t i = 0; i < n; ++i) {
    expect_eq(get_value(bc, i), static_cast<double>(value(i, w - 1, DType::kI32)),
              where(c, "broadcast_async", DType::kI32, n), i);
  }
  for (int64_t i = 0; i < 5; ++i) {
    expect_eq(get_value(sync, i), expected_reduce(i, w, DType::kI32, ReduceOp::kMax),
              where(c, "allreduce", DType::kI32, 5), i);
  }
}

// Several async reduce-scatters in flight at once (sharded data parallel's
// buckets), interleaved with a blocking call, each result exact.
inline void check_reduce_scatter_async(Communicator& c, const std::vector<int64_t>& sizes) {
  const int w = c.world_size();
  std::vector<Tensor> ins, outs;
  std::vector<ReduceOp> ops;
  std::vector<std::unique_ptr<CommWork>> works;
  for (size_t k = 0; k < sizes.size(); ++k) {
    ins.push_back(filled(w * sizes[k], DType::kF32, c.rank()));
    outs.emplace_back(Shape{sizes[k]}, DType::kF32);
    ops.push_back(k % 2 ? ReduceOp::kAverage : ReduceOp::kSum);
  }
  for (size_t k = 0; k < sizes.size(); ++k) {
    works.push_back(c.reduce_scatter_async(ins[k], outs[k], ops[k]));
    if (k == 0) {
      Tensor between = filled(5, DType::kI32, c.rank());
      c.allreduce(between, ReduceOp::kMax);  // queued behind the first
      for (int64_t i = 0; i < 5; ++i) {
        expect_eq(get_value(between, i), expected_reduce(i, w, DType::kI32, ReduceOp::kMax),
                  where(c, "allreduce", DType::kI32, 5), i);
      }
    }
  }
  for (size_t k = 0; k < sizes.size(); ++k) {
    works[k]->wait();
    const std::string ctx = where(c, "reduce_scatter_async", DType::kF32, sizes[k]) + " " + op_str(ops[k]);
    for (int64_t i = 0; i < sizes[k]; ++i) {
      expect_eq(get_value(outs[k], i), expected_reduce(c.rank() * sizes[k] + i, w, DType::kF32, ops[k]), ctx, i);
    }
  }
}

// Everything above, as the multi-process worker runs it.
inline void check_everything(Communicator& c, int64_t large) {
  const std::vector<int64_t> sizes = test_sizes(c.world_size(), large);
  check_allreduce(c, sizes);
  check_broadcast(c, sizes);
  check_reduce(c, sizes);
  check_allgather(c, sizes);
  check_gather(c, sizes);
  check_scatter(c, sizes);
  check_reduce_scatter(c, sizes);
  check_send_recv(c, sizes);
  check_async(c, 1000);
  check_reduce_scatter_async(c, sizes);
  c.barrier();
}

}  // namespace strata::parallel_test
