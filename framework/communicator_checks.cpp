#include "framework/communicator_checks.h"

#include <string>

#include "framework/error.h"

namespace strata::comm_checks {

namespace {

// "rank 1 of 2 on host-a: allgather (tcp backend)"
std::string where(const Communicator& c, const char* op) {
  return c.describe() + ": " + op + " (" + c.backend_name() + " backend)";
}

std::string ranks(const Communicator& c) {
  return "0.." + std::to_string(c.world_size() - 1);
}

}  // namespace

void check_tensor(const Communicator& c, const char* op, const Tensor& t, const char* name) {
  const std::string why = c.why_cannot_move(t);
  if (!why.empty()) fail<ConfigError>(where(c, op), ": ", name, " is on ", t.device().str(), ": ", why);
  if (!t.defined()) {
    fail<Error>(where(c, op), ": ", name, " ", shape_str(t.shape()), " has no storage; allocate it before the call");
  }
}

void check_root(const Communicator& c, const char* op, int root) {
  if (root < 0 || root >= c.world_size()) {
    fail<Error>(where(c, op), ": root ", root, " is not a rank of this world (", ranks(c),
                "); every rank must pass the same root, one of ", ranks(c));
  }
}

void check_peer(const Communicator& c, const char* op, int peer) {
  if (peer < 0 || peer >= c.world_size()) {
    fail<Error>(where(c, op), ": peer rank ", peer, " is not a rank of this world (", ranks(c), ")");
  }
  if (peer == c.rank()) {
    fail<Error>(where(c, op), ": peer rank ", peer,
                " is this rank; a rank cannot send to or receive from itself (copy the tensor instead)");
  }
}

void check_tag(const Communicator& c, const char* op, int tag) {
  if (tag < 0 || tag > c.max_tag()) {
    fail<Error>(where(c, op), ": tag ", tag, " is outside 0..", c.max_tag(), " (the ", c.backend_name(),
                " backend's range); use a non-negative tag within it");
  }
}

void check_blocks(const Communicator& c, const char* op, const Tensor& whole, const char* whole_name,
                  const Tensor& block, const char* block_name) {
  const int world = c.world_size();
  if (whole.dtype() != block.dtype()) {
    fail<ShapeError>(where(c, op), ": ", whole_name, " is ", dtype_name(whole.dtype()), " but ", block_name, " is ",
                     dtype_name(block.dtype()), "; they must have the same dtype");
  }
  if (whole.numel() != block.numel() * world) {
    fail<ShapeError>(where(c, op), ": ", whole_name, " has ", whole.numel(), " elements ", shape_str(whole.shape()),
                     ", expected world_size (", world, ") x ", block_name, " (", block.numel(), " elements ",
                     shape_str(block.shape()), ") = ", block.numel() * world);
  }
  if (whole.numel() > 0 && block.numel() > 0 && whole.shares_storage_with(block)) {
    fail<Error>(where(c, op), ": ", whole_name, " and ", block_name,
                " share storage; pass separate tensors (the backends do not work in place here)");
  }
}

}  // namespace strata::comm_checks
