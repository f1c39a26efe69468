// HostStagingCommunicator: host tensors go to the inner backend untouched
// (same storage); CUDA tensors reach it as host copies and the results come
// back to the device (async: at wait()). The inner backend here is a fake
// rank of a 2-rank world whose results are easy to predict.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "framework/communicator.h"
#include "framework/error.h"
#include "framework/tensor.h"
#include "parallel/backends/host_staging_communicator.h"
#include "tests/test_util.h"
#ifdef STRATA_WITH_CUDA
#include "framework/cuda/device_api.h"
#endif

namespace strata::parallel {
namespace {

class DoneWork final : public CommWork {
 public:
  void wait() override {}
  bool is_done() override { return true; }
};

// Rank `rank` of 2. Every operation checks it got host tensors and writes
// what the other rank would have contributed: +100 for sums, 7 for a
// broadcast from the other rank, blocks of (in + 100) for the other rank's part.
class FakeHostComm final : public Communicator {
 public:
  explicit FakeHostComm(int rank) : rank_(rank) {}
  std::vector<const void*> seen;  // the storage of every tensor handed in

  int rank() const override { return rank_; }
  int world_size() const override { return 2; }
  CommBackend backend() const override { return CommBackend::kMpi; }
  void set_timeout(std::chrono::milliseconds) override {}
  std::string why_cannot_move(const Tensor& t) const override {
    return t.device().is_cpu() ? "" : "the fake backend moves CPU tensors only";
  }

 protected:
  void do_broadcast(Tensor& t, int root) override {
    host(t);
    if (rank_ != root) t.fill(7.0f);
  }
  void do_allreduce(Tensor& t, ReduceOp) override { add(host(t), 100.0f); }
  void do_reduce(Tensor& t, ReduceOp, int root) override { add(host(t), rank_ == root ? 100.0f : -1000.0f); }
  void do_allgather(const Tensor& in, Tensor& out) override {
    host(in);
    blocks(in, host(out), true);
  }
  void do_gather(const Tensor& in, Tensor& out, int root) override {
    host(in);
    if (rank_ == root) blocks(in, host(out), true);
  }
  void do_scatter(const Tensor& in, Tensor& out, int root) override {
    host(out);
    const int64_t n = out.numel();
    for (int64_t i = 0; i < n; ++i) out.data<float>()[i] = rank_ == root ? host(in).data<float>()[rank_ * n + i] : 5.0f;
  }
  void do_reduce_scatter(const Tensor& in, Tensor& out, ReduceOp) override {
    const int64_t n = host(out).numel();
    for (int64_t i = 0; i < n; ++i) out.data<float>()[i] = host(in).data<float>()[rank_ * n + i] + 100.0f;
  }
  void do_send(const Tensor& t, int, int) override { sent = test::values(host(t)); }
  void do_recv(Tensor& t, int, int) override { host(t).fill(9.0f); }
  void do_barrier() override {}
  std::unique_ptr<CommWork> do_allreduce_async(Tensor& t, ReduceOp op) override {
    do_allreduce(t, op);
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<CommWork> do_broadcast_async(Tensor& t, int root) override {
    do_broadcast(t, root);
    return std::make_unique<DoneWork>();
  }

 public:
  std::vector<float> sent;

 private:
  const Tensor& host(const Tensor& t) {
    EXPECT_TRUE(t.device().is_cpu()) << "the inner backend got a tensor on " << t.device().str();
    seen.push_back(t.raw_data());
    return t;
  }
  Tensor& host(Tensor& t) {
    host(static_cast<const Tensor&>(t));
    return t;
  }
  static void add(Tensor& t, float v) {
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] += v;
  }
  void blocks(const Tensor& in, Tensor& out, bool) {
    const int64_t n = in.numel();
    for (int r = 0; r < 2; ++r) {
      for (int64_t i = 0; i < n; ++i) out.data<float>()[r * n + i] = in.data<float>()[i] + (r == rank_ ? 0.0f : 100.0f);
    }
  }
  int rank_;
};

Tensor iota(int64_t n, float start, Device device = Device::cpu()) {
  Tensor t({n});
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = start + static_cast<float>(i);
  return t.to(device);
}

std::vector<float> host_values(const Tensor& t) { return test::values(t.to(Device::cpu())); }

// The same expectations whatever the device: what each operation must leave.
void check_every_operation(Device device) {
  auto fake = std::make_unique<FakeHostComm>(1);
  FakeHostComm& inner = *fake;
  HostStagingCommunicator comm(std::move(fake));
  EXPECT_EQ(comm.rank(), 1);
  EXPECT_EQ(comm.world_size(), 2);
  EXPECT_EQ(comm.backend(), CommBackend::kMpi);  // the inner backend's
  EXPECT_EQ(comm.backend_name(), "mpi");

  Tensor t = iota(3, 1, device);
  comm.allreduce(t, ReduceOp::kSum);
  EXPECT_EQ(host_values(t), (std::vector<float>{101, 102, 103}));
  comm.broadcast(t, 0);
  EXPECT_EQ(host_values(t), (std::vector<float>{7, 7, 7}));
  Tensor r = iota(2, 1, device);
  comm.reduce(r, ReduceOp::kSum, 1);
  EXPECT_EQ(host_values(r), (std::vector<float>{101, 102}));
  comm.reduce(r, ReduceOp::kSum, 0);  // not the root
  if (device.is_cpu()) {
    EXPECT_EQ(host_values(r), (std::vector<float>{-899, -898})) << "host: whatever the backend leaves";
  } else {
    EXPECT_EQ(host_values(r), (std::vector<float>{101, 102})) << "device: not copied back off the root";
  }

  Tensor in = iota(2, 1, device);
  Tensor out({4}, DType::kF32, device);
  comm.allgather(in, out);
  EXPECT_EQ(host_values(out), (std::vector<float>{101, 102, 1, 2}));
  Tensor gathered({4}, DType::kF32, device);
  comm.gather(in, gathered, 1);
  EXPECT_EQ(host_values(gathered), (std::vector<float>{101, 102, 1, 2}));
  Tensor whole = iota(4, 10, device);
  Tensor part({2}, DType::kF32, device);
  comm.scatter(whole, part, 1);
  EXPECT_EQ(host_values(part), (std::vector<float>{12, 13}));
  comm.reduce_scatter(whole, part, ReduceOp::kSum);
  EXPECT_EQ(host_values(part), (std::vector<float>{112, 113}));
  comm.send(in, 0, 3);
  EXPECT_EQ(inner.sent, (std::vector<float>{1, 2}));
  comm.recv(part, 0, 3);
  EXPECT_EQ(host_values(part), (std::vector<float>{9, 9}));

  Tensor a = iota(2, 0, device);
  std::unique_ptr<CommWork> work = comm.allreduce_async(a, ReduceOp::kSum);
  if (!device.is_cpu()) {
    EXPECT_EQ(host_values(a), (std::vector<float>{0, 1})) << "copied back before wait()";
  }
  work->wait();
  EXPECT_EQ(host_values(a), (std::vector<float>{100, 101}));
  work->wait();  // a second wait copies nothing again
  EXPECT_EQ(host_values(a), (std::vector<float>{100, 101}));
  comm.broadcast_async(a, 0)->wait();
  EXPECT_EQ(host_values(a), (std::vector<float>{7, 7}));
}

TEST(HostStagingCommunicator, HostTensorsPassStraightThrough) {
  check_every_operation(Device::cpu());
  // Same storage: no copies for host tensors.
  auto fake = std::make_unique<FakeHostComm>(0);
  FakeHostComm& inner = *fake;
  HostStagingCommunicator comm(std::move(fake));
  Tensor t = iota(4, 0);
  Tensor out({8});
  comm.allreduce(t, ReduceOp::kSum);
  comm.allgather(t, out);
  ASSERT_EQ(inner.seen.size(), 3u);
  EXPECT_EQ(inner.seen[0], t.raw_data());
  EXPECT_EQ(inner.seen[1], t.raw_data());
  EXPECT_EQ(inner.seen[2], out.raw_data());
}

// A batch (Communicator::exchange): sends first, then receives, each
// tensor staged where it must be and the received values back in place.
void check_exchange(Device device) {
  auto fake = std::make_unique<FakeHostComm>(1);
  FakeHostComm& inner = *fake;
  HostStagingCommunicator comm(std::move(fake));
  Tensor out = iota(3, 1, device), in = iota(2, 0, device);
  comm.exchange({{PeerTransfer::Kind::kRecv, &in, 0, 1}, {PeerTransfer::Kind::kSend, &out, 0, 0}});
  EXPECT_EQ(inner.sent, (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(host_values(in), (std::vector<float>{9, 9}));
  ASSERT_EQ(inner.seen.size(), 2u);
  if (device.is_cpu()) {
    EXPECT_EQ(inner.seen[0], out.raw_data());  // the send went first, from the caller's tensor
    EXPECT_EQ(inner.seen[1], in.raw_data());
  }
}

TEST(Exchange, SendsThenReceivesThroughTheStagingFront) { check_exchange(Device::cpu()); }

TEST(Exchange, EveryTransferIsCheckedBeforeAnyRuns) {
  auto fake = std::make_unique<FakeHostComm>(1);
  FakeHostComm& inner = *fake;
  HostStagingCommunicator comm(std::move(fake));
  Tensor t = iota(2, 0);
  EXPECT_CONTAINS(test::error_of<Error>([&] {
                    comm.exchange({{PeerTransfer::Kind::kSend, &t, 0, 0}, {PeerTransfer::Kind::kRecv, &t, 1, 0}});
                  }),
                  "is this rank");
  EXPECT_CONTAINS(test::error_of<Error>([&] { comm.exchange({{PeerTransfer::Kind::kSend, nullptr, 0, 0}}); }),
                  "without a tensor");
  EXPECT_TRUE(inner.seen.empty());  // nothing was sent
  comm.exchange({});                // an empty batch is nothing to do
}

#ifdef STRATA_WITH_CUDA
TEST(Exchange, CudaTensorsAreStagedThroughTheHost) {
  STRATA_SKIP_WITHOUT_GPU("staging CUDA tensors in a batch is compile-tested only");
  check_exchange(Device::cuda(0));
}

TEST(HostStagingCommunicator, CudaTensorsAreStagedThroughTheHost) {
  STRATA_SKIP_WITHOUT_GPU("staging CUDA tensors is compile-tested only");
  check_every_operation(Device::cuda(0));
}
#endif

}  // namespace
}  // namespace strata::parallel
