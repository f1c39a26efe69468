// The argument checks of every Communicator call, written once. The
// Communicator base class runs them in front of every backend (its public
// calls check, then hand over to the backend's do_* functions), so a new
// backend or a new collective cannot skip them, and every backend answers
// the same mistake with the same exception type and message.
//
// One exception type per kind of mistake, by framework/error.h's rules:
//   root or peer not a rank of the world, peer == this rank,
//   tag out of range, a tensor without storage,
//   in and out sharing storage                      -> Error (a wrong
//       argument in the calling code; no configuration file names these)
//   dtypes or element counts that do not fit together
//       (out = world_size x in, ...)                -> ShapeError
//   a tensor on a device the backend cannot move
//       (a CPU tensor to nccl, a CUDA one to raw tcp) -> ConfigError (the
//       chosen backend and the tensors' device disagree; the remedy is
//       choosing another backend or device)
// Messages say where ("rank 1 of 2 on host-a", Communicator::describe()),
// which call and backend, what was expected and what was found.
//
// The checks are local: they throw on the calling rank before anything is
// sent, so the communicator stays usable. Agreement between ranks (the same
// call with the same sizes everywhere) is the backends' business.
#pragma once

#include "framework/communicator.h"

namespace strata::comm_checks {

// Lives where the backend can move it (Communicator::why_cannot_move) and has storage.
void check_tensor(const Communicator& c, const char* op, const Tensor& t, const char* name);
// 0 <= root < world_size.
void check_root(const Communicator& c, const char* op, int root);
// Another rank of the world.
void check_peer(const Communicator& c, const char* op, int peer);
// 0 <= tag <= Communicator::max_tag().
void check_tag(const Communicator& c, const char* op, int tag);
// `whole` holds world_size blocks of `block`'s size, in the same dtype, in
// separate storage (allgather, gather, scatter, reduce_scatter).
void check_blocks(const Communicator& c, const char* op, const Tensor& whole, const char* whole_name,
                  const Tensor& block, const char* block_name);

}  // namespace strata::comm_checks
