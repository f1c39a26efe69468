#include "framework/communicator.h"

#include <unistd.h>

#include <climits>

#include "framework/communicator_checks.h"
#include "framework/error.h"

namespace strata {

using namespace comm_checks;

namespace {

class DoneWork final : public CommWork {
 public:
  void wait() override {}
  bool is_done() override { return true; }
};

std::string this_hostname() {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) return "?";
  return host;
}

}  // namespace

// ---- the checking front: every call of every backend passes here ----

const char* comm_backend_name(CommBackend backend) {
  switch (backend) {
    case CommBackend::kLocal: return "local";
    case CommBackend::kTcp: return "tcp";
    case CommBackend::kNccl: return "nccl";
    case CommBackend::kMpi: return "mpi";
  }
  return "?";
}

std::string Communicator::describe() const {
  return "rank " + std::to_string(rank()) + " of " + std::to_string(world_size()) + " on " + this_hostname();
}

std::string Communicator::why_cannot_move(const Tensor&) const { return {}; }

int Communicator::max_tag() const { return INT_MAX; }

void Communicator::broadcast(Tensor& t, int root) {
  check_tensor(*this, "broadcast", t, "the tensor");
  check_root(*this, "broadcast", root);
  do_broadcast(t, root);
}

void Communicator::allreduce(Tensor& t, ReduceOp op) {
  check_tensor(*this, "allreduce", t, "the tensor");
  do_allreduce(t, op);
}

void Communicator::reduce(Tensor& t, ReduceOp op, int root) {
  check_tensor(*this, "reduce", t, "the tensor");
  check_root(*this, "reduce", root);
  do_reduce(t, op, root);
}

void Communicator::allgather(const Tensor& in, Tensor& out) {
  check_tensor(*this, "allgather", in, "in");
  check_tensor(*this, "allgather", out, "out");
  check_blocks(*this, "allgather", out, "out", in, "in");
  do_allgather(in, out);
}

void Communicator::gather(const Tensor& in, Tensor& out, int root) {
  check_tensor(*this, "gather", in, "in");
  check_root(*this, "gather", root);
  // Only the root's output is written, so only its size matters.
  if (rank() == root) {
    check_tensor(*this, "gather", out, "out");
    check_blocks(*this, "gather", out, "out", in, "in");
  }
  do_gather(in, out, root);
}

void Communicator::scatter(const Tensor& in, Tensor& out, int root) {
  check_tensor(*this, "scatter", out, "out");
  check_root(*this, "scatter", root);
  // Only the root's input is read, so only its size matters.
  if (rank() == root) {
    check_tensor(*this, "scatter", in, "in");
    check_blocks(*this, "scatter", in, "in", out, "out");
  }
  do_scatter(in, out, root);
}

void Communicator::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  check_tensor(*this, "reduce_scatter", in, "in");
  check_tensor(*this, "reduce_scatter", out, "out");
  check_blocks(*this, "reduce_scatter", in, "in", out, "out");
  do_reduce_scatter(in, out, op);
}

void Communicator::send(const Tensor& t, int dst, int tag) {
  check_tensor(*this, "send", t, "the tensor");
  check_peer(*this, "send", dst);
  check_tag(*this, "send", tag);
  do_send(t, dst, tag);
}

void Communicator::recv(Tensor& t, int src, int tag) {
  check_tensor(*this, "recv", t, "the tensor");
  check_peer(*this, "recv", src);
  check_tag(*this, "recv", tag);
  do_recv(t, src, tag);
}

void Communicator::exchange(const std::vector<PeerTransfer>& batch) {
  for (const PeerTransfer& t : batch) {
    const bool send = t.kind == PeerTransfer::Kind::kSend;
    const char* op = send ? "exchange (a send)" : "exchange (a receive)";
    if (!t.tensor) fail<Error>(describe(), ": ", op, " without a tensor");
    check_tensor(*this, op, *t.tensor, "the tensor");
    check_peer(*this, op, t.peer);
    check_tag(*this, op, t.tag);
  }
  if (!batch.empty()) do_exchange(batch);
}

void Communicator::do_exchange(const std::vector<PeerTransfer>& batch) {
  for (const PeerTransfer& t : batch) {
    if (t.kind == PeerTransfer::Kind::kSend) do_send(*t.tensor, t.peer, t.tag);
  }
  for (const PeerTransfer& t : batch) {
    if (t.kind == PeerTransfer::Kind::kRecv) do_recv(*t.tensor, t.peer, t.tag);
  }
}

void Communicator::barrier() { do_barrier(); }

std::unique_ptr<CommWork> Communicator::allreduce_async(Tensor& t, ReduceOp op) {
  check_tensor(*this, "allreduce_async", t, "the tensor");
  return do_allreduce_async(t, op);
}

std::unique_ptr<CommWork> Communicator::broadcast_async(Tensor& t, int root) {
  check_tensor(*this, "broadcast_async", t, "the tensor");
  check_root(*this, "broadcast_async", root);
  return do_broadcast_async(t, root);
}

std::unique_ptr<CommWork> Communicator::reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) {
  check_tensor(*this, "reduce_scatter_async", in, "in");
  check_tensor(*this, "reduce_scatter_async", out, "out");
  check_blocks(*this, "reduce_scatter_async", in, "in", out, "out");
  return do_reduce_scatter_async(in, out, op);
}

std::unique_ptr<CommWork> Communicator::do_reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) {
  do_reduce_scatter(in, out, op);
  return std::make_unique<DoneWork>();
}

std::unique_ptr<CommWork> Communicator::allgather_async(const Tensor& in, Tensor& out) {
  check_tensor(*this, "allgather_async", in, "in");
  check_tensor(*this, "allgather_async", out, "out");
  check_blocks(*this, "allgather_async", out, "out", in, "in");
  return do_allgather_async(in, out);
}

std::unique_ptr<CommWork> Communicator::do_allgather_async(const Tensor& in, Tensor& out) {
  do_allgather(in, out);
  return std::make_unique<DoneWork>();
}

// ---- a world of one rank ----

void LocalCommunicator::do_allgather(const Tensor& in, Tensor& out) { out.copy_from(in); }
void LocalCommunicator::do_gather(const Tensor& in, Tensor& out, int) { out.copy_from(in); }
void LocalCommunicator::do_scatter(const Tensor& in, Tensor& out, int) { out.copy_from(in); }
void LocalCommunicator::do_reduce_scatter(const Tensor& in, Tensor& out, ReduceOp) { out.copy_from(in); }
// Unreachable: check_peer finds no peer in a world of one rank.
void LocalCommunicator::do_send(const Tensor&, int dst, int) {
  fail<Error>("send to rank ", dst, ": a world of 1 rank has no peers");
}
void LocalCommunicator::do_recv(Tensor&, int src, int) {
  fail<Error>("recv from rank ", src, ": a world of 1 rank has no peers");
}
std::unique_ptr<CommWork> LocalCommunicator::do_allreduce_async(Tensor&, ReduceOp) {
  return std::make_unique<DoneWork>();
}
std::unique_ptr<CommWork> LocalCommunicator::do_broadcast_async(Tensor&, int) {
  return std::make_unique<DoneWork>();
}

}  // namespace strata
