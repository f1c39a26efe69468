// The "mpi" backend: strata::Communicator over an MPI library (built when
// CMake finds one; STRATA_HAVE_MPI is then defined for everything that links
// strata_parallel). Ranks must be started by mpirun/mpiexec (or srun with PMI):
// the MPI world, not the strata store, decides who is who.
//
// Behaviour worth knowing:
// - MPI is initialised on the first call (MPI_THREAD_MULTIPLE when the library
//   offers it; otherwise every MPI call is serialised behind one mutex) and
//   finalised at process exit. If the program initialised MPI itself, it also
//   finalises it. Before initialising, OMPI_MCA_coll_libnbc_iallreduce_algorithm
//   defaults to "ring" (unless set): OpenMPI otherwise reduces in-place
//   non-blocking allreduces to one rank and broadcasts back, about half the
//   bandwidth for large tensors. Each communicator works on its own duplicate of
//   MPI_COMM_WORLD, so its traffic never mixes with the program's own.
// - dtypes: f32 -> MPI_FLOAT, i32 -> MPI_INT, u8 -> MPI_UNSIGNED_CHAR.
//   f16/bf16 travel as MPI_UINT16_T (2 bytes per element on the wire); their
//   reductions use user-defined MPI ops that widen both operands to f32,
//   combine, and round back to nearest even, so (as with NCCL) a sum over n
//   ranks may be rounded up to n-1 times.
// - kAverage is a sum followed by a division by world_size() on the ranks
//   that receive the result; for i32/u8 the division truncates toward zero,
//   and u8 sums wrap modulo 256 before it (MPI's MPI_SUM on unsigned char).
// - Every call is started non-blocking (MPI_I*) and completed by polling
//   MPI_Test, so set_timeout() holds: an operation that does not finish in
//   time throws an Error naming the call, the rank and the host. MPI cannot
//   cancel a collective, so after such an error the communicator is unusable.
//   Non-blocking MPI progresses inside MPI calls: an async allreduce (or
//   reduce-scatter) advances while the caller waits on it (or calls
//   is_done()), not in the background.
//   A CommWork must not outlive its communicator. The polling costs some
//   bandwidth against plain blocking MPI calls (libnbc's algorithms instead
//   of the tuned ones); tools/bench/run_allreduce_bench.py --impls
//   mpi,strata-mpi measures the difference.
// - Every MPI return code is checked; failures name the MPI call, the rank,
//   the host, and MPI_Error_string's text.
// - dtype/numel agreement across ranks cannot be checked without an extra
//   round trip and is not; local shape checks (out = world x in...) are.
#pragma once

#include <memory>

#include "framework/communicator.h"
#include "parallel/rendezvous/env.h"

namespace strata::parallel {

// env supplies the timeout and the host name used in messages. When env
// describes a launcher's world (launcher "strata", "mpirun", "srun"), its rank
// and world size must equal MPI's, else ConfigError (e.g. ranks started by
// `strata launch` instead of mpirun); a default RankEnv takes MPI's view.
// In a build without MPI this throws ConfigError saying how to get one.
std::unique_ptr<Communicator> create_mpi_communicator(const RankEnv& env);

// True when this build has the mpi backend.
bool mpi_backend_built();

}  // namespace strata::parallel
