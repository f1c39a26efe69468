// One list of wrong Communicator calls, run against every backend this
// machine can build (parallel_comm_checks_test.cpp: local, tcp with ranks as
// threads, host staging; parallel_mpi_worker.cpp: mpi under mpirun;
// parallel_nccl_test.cpp: nccl where a GPU exists). Every backend must
// answer each call with the same exception type and a message holding the
// same parts (framework/communicator_checks.h says which type for which
// mistake). No gtest here: the mpi worker is a plain program.
//
// Every check is local (it throws before anything is sent), so one rank can
// run the list while the others do nothing; the communicator stays usable.
#pragma once

#include <functional>
#include <string>
#include <typeinfo>
#include <vector>

#include "framework/communicator.h"
#include "framework/error.h"
#include "framework/tensor.h"

namespace strata::parallel_test {

enum class Expected { kError, kShapeError, kConfigError };

inline const char* expected_name(Expected e) {
  switch (e) {
    case Expected::kError:
      return "strata::Error";
    case Expected::kShapeError:
      return "strata::ShapeError";
    case Expected::kConfigError:
      return "strata::ConfigError";
  }
  return "?";
}

struct BadCall {
  std::string name;  // "broadcast to root 2"
  Expected expected;
  std::vector<std::string> parts;  // each must appear in the message
  std::function<void(Communicator&)> call;
};

// The wrong calls for rank `rank` of a world of `world` ranks, with tensors
// on `device`. Calls whose check applies on the root only (gather's out,
// scatter's in) name this rank as the root.
inline std::vector<BadCall> bad_calls(int world, int rank, Device device) {
  const std::string w = std::to_string(world);
  const std::string range = "0.." + std::to_string(world - 1);
  const std::string me = "rank " + std::to_string(rank);
  auto f32 = [device](int64_t n) { return Tensor({n}, DType::kF32, device); };
  auto i32 = [device](int64_t n) { return Tensor({n}, DType::kI32, device); };
  // A tensor of n elements in `whole`'s storage (a view of its start).
  auto alias = [](const Tensor& whole, int64_t n) {
    Tensor t = whole;
    t.resize({n});
    return t;
  };
  const int64_t n = 2;
  std::vector<BadCall> calls;
  auto add = [&](std::string name, Expected e, std::vector<std::string> parts, std::function<void(Communicator&)> fn) {
    parts.push_back(me);
    calls.push_back(BadCall{std::move(name), e, std::move(parts), std::move(fn)});
  };

  // Roots outside the world.
  for (int root : {world, -1}) {
    const std::string r = "root " + std::to_string(root);
    add("broadcast to " + r, Expected::kError, {"broadcast", r, range},
        [=](Communicator& c) { Tensor t = f32(n); c.broadcast(t, root); });
    add("broadcast_async to " + r, Expected::kError, {"broadcast_async", r, range},
        [=](Communicator& c) { Tensor t = f32(n); c.broadcast_async(t, root)->wait(); });
    add("reduce to " + r, Expected::kError, {"reduce", r, range},
        [=](Communicator& c) { Tensor t = f32(n); c.reduce(t, ReduceOp::kSum, root); });
    add("gather to " + r, Expected::kError, {"gather", r, range}, [=](Communicator& c) {
      Tensor out = f32(n * world);
      c.gather(f32(n), out, root);
    });
    add("scatter from " + r, Expected::kError, {"scatter", r, range}, [=](Communicator& c) {
      Tensor out = f32(n);
      c.scatter(f32(n * world), out, root);
    });
  }

  // Peers: this rank itself, and ranks outside the world.
  add("send to itself", Expected::kError, {"send", "peer rank " + std::to_string(rank), "is this rank"},
      [=](Communicator& c) { c.send(f32(n), rank, 0); });
  add("recv from itself", Expected::kError, {"recv", "peer rank " + std::to_string(rank), "is this rank"},
      [=](Communicator& c) { Tensor t = f32(n); c.recv(t, rank, 0); });
  add("send to rank " + w, Expected::kError, {"send", "peer rank " + w, "not a rank of this world", range},
      [=](Communicator& c) { c.send(f32(n), world, 0); });
  add("recv from rank -1", Expected::kError, {"recv", "peer rank -1", "not a rank of this world", range},
      [=](Communicator& c) { Tensor t = f32(n); c.recv(t, -1, 0); });
  if (world > 1) {
    const int peer = (rank + 1) % world;
    add("send with tag -1", Expected::kError, {"send", "tag -1", "outside 0.."},
        [=](Communicator& c) { c.send(f32(n), peer, -1); });
    add("recv with tag -3", Expected::kError, {"recv", "tag -3", "outside 0.."},
        [=](Communicator& c) { Tensor t = f32(n); c.recv(t, peer, -3); });
  }

  // Sizes that do not fit: the whole must be world_size blocks.
  const std::string bad = std::to_string(n * world + 1);
  const std::string expect = "world_size (" + w + ") x ";
  add("allgather into a wrong size", Expected::kShapeError,
      {"allgather", "out has " + bad + " elements", expect + "in (2 elements"}, [=](Communicator& c) {
        Tensor out = f32(n * world + 1);
        c.allgather(f32(n), out);
      });
  add("gather into a wrong size", Expected::kShapeError,
      {"gather", "out has " + bad + " elements", expect + "in (2 elements"}, [=](Communicator& c) {
        Tensor out = f32(n * world + 1);
        c.gather(f32(n), out, rank);
      });
  add("scatter from a wrong size", Expected::kShapeError,
      {"scatter", "in has " + bad + " elements", expect + "out (2 elements"}, [=](Communicator& c) {
        Tensor out = f32(n);
        c.scatter(f32(n * world + 1), out, rank);
      });
  add("reduce_scatter from a wrong size", Expected::kShapeError,
      {"reduce_scatter", "in has " + bad + " elements", expect + "out (2 elements"}, [=](Communicator& c) {
        Tensor out = f32(n);
        c.reduce_scatter(f32(n * world + 1), out, ReduceOp::kSum);
      });

  // Dtypes that do not match.
  add("allgather f32 into i32", Expected::kShapeError, {"allgather", "out is i32 but in is f32", "same dtype"},
      [=](Communicator& c) {
        Tensor out = i32(n * world);
        c.allgather(f32(n), out);
      });
  add("gather f32 into i32", Expected::kShapeError, {"gather", "out is i32 but in is f32", "same dtype"},
      [=](Communicator& c) {
        Tensor out = i32(n * world);
        c.gather(f32(n), out, rank);
      });
  add("scatter i32 into f32", Expected::kShapeError, {"scatter", "in is i32 but out is f32", "same dtype"},
      [=](Communicator& c) {
        Tensor out = f32(n);
        c.scatter(i32(n * world), out, rank);
      });
  add("reduce_scatter i32 into f32", Expected::kShapeError,
      {"reduce_scatter", "in is i32 but out is f32", "same dtype"}, [=](Communicator& c) {
        Tensor out = f32(n);
        c.reduce_scatter(i32(n * world), out, ReduceOp::kSum);
      });

  // in and out in one storage.
  add("allgather in place", Expected::kError, {"allgather", "out and in share storage"}, [=](Communicator& c) {
    Tensor out = f32(n * world);
    c.allgather(alias(out, n), out);
  });
  add("gather in place", Expected::kError, {"gather", "out and in share storage"}, [=](Communicator& c) {
    Tensor out = f32(n * world);
    c.gather(alias(out, n), out, rank);
  });
  add("scatter in place", Expected::kError, {"scatter", "in and out share storage"}, [=](Communicator& c) {
    Tensor in = f32(n * world);
    Tensor out = alias(in, n);
    c.scatter(in, out, rank);
  });
  add("reduce_scatter in place", Expected::kError, {"reduce_scatter", "in and out share storage"},
      [=](Communicator& c) {
        Tensor in = f32(n * world);
        Tensor out = alias(in, n);
        c.reduce_scatter(in, out, ReduceOp::kSum);
      });
  return calls;
}

// Runs every call; returns one line per call that did not fail as expected
// (no error, another type, or a message lacking a part).
inline std::vector<std::string> run_bad_calls(Communicator& c, const std::vector<BadCall>& calls) {
  std::vector<std::string> problems;
  for (const BadCall& bc : calls) {
    const std::string where = c.backend_name() + " rank " + std::to_string(c.rank()) + ", " + bc.name + ": ";
    try {
      bc.call(c);
      problems.push_back(where + "no error (expected " + expected_name(bc.expected) + ")");
      continue;
    } catch (const Error& e) {
      const bool config = dynamic_cast<const ConfigError*>(&e) != nullptr;
      const bool shape = dynamic_cast<const ShapeError*>(&e) != nullptr;
      const Expected got = config ? Expected::kConfigError : shape ? Expected::kShapeError : Expected::kError;
      // Error itself, not a subclass such as a network error.
      const bool exact = got != Expected::kError || typeid(e) == typeid(Error);
      if (got != bc.expected || !exact) {
        problems.push_back(where + "threw " + typeid(e).name() + ", expected " + expected_name(bc.expected) + ": " +
                           e.what());
        continue;
      }
      for (const std::string& part : bc.parts) {
        if (std::string(e.what()).find(part) == std::string::npos) {
          problems.push_back(where + "the message lacks '" + part + "': " + e.what());
        }
      }
    } catch (const std::exception& e) {
      problems.push_back(where + "threw a non-strata exception (" + typeid(e).name() + "): " + e.what());
    }
  }
  return problems;
}

}  // namespace strata::parallel_test
