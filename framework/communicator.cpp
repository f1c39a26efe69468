#include "framework/communicator.h"

#include "framework/error.h"

namespace strata {
namespace {
class DoneWork final : public CommWork {
 public:
  void wait() override {}
  bool is_done() override { return true; }
};

void check_root(int root) {
  if (root != 0) fail<Error>("collective root ", root, " does not exist in a world of 1 rank");
}
}  // namespace

void LocalCommunicator::broadcast(Tensor&, int root) { check_root(root); }
void LocalCommunicator::reduce(Tensor&, ReduceOp, int root) { check_root(root); }
void LocalCommunicator::allgather(const Tensor& in, Tensor& out) { out.copy_from(in); }
void LocalCommunicator::gather(const Tensor& in, Tensor& out, int root) {
  check_root(root);
  out.copy_from(in);
}
void LocalCommunicator::scatter(const Tensor& in, Tensor& out, int root) {
  check_root(root);
  out.copy_from(in);
}
void LocalCommunicator::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp) { out.copy_from(in); }
void LocalCommunicator::send(const Tensor&, int dst, int) {
  fail<Error>("send to rank ", dst, ": a world of 1 rank has no peers");
}
void LocalCommunicator::recv(Tensor&, int src, int) {
  fail<Error>("recv from rank ", src, ": a world of 1 rank has no peers");
}
std::unique_ptr<CommWork> LocalCommunicator::allreduce_async(Tensor&, ReduceOp) {
  return std::make_unique<DoneWork>();
}
std::unique_ptr<CommWork> LocalCommunicator::broadcast_async(Tensor&, int root) {
  check_root(root);
  return std::make_unique<DoneWork>();
}

}  // namespace strata
