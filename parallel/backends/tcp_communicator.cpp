#include "parallel/backends/tcp_communicator.h"

#include <unistd.h>

#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "framework/error.h"
#include "framework/io/wire_format.h"
#include "parallel/collectives/collectives.h"
#include "parallel/collectives/reduce_kernels.h"
#include "parallel/backends/host_staging_communicator.h"
#include "parallel/socket/socket.h"
#include "parallel/transport/transport_select.h"

namespace strata::parallel {

AllreduceAlgorithm parse_allreduce_algorithm(const std::string& name) {
  if (name == "auto") return AllreduceAlgorithm::kAuto;
  if (name == "ring") return AllreduceAlgorithm::kRing;
  if (name == "tree") return AllreduceAlgorithm::kTree;
  fail<ConfigError>("unknown allreduce algorithm '", name, "'; known: auto, ring, tree");
}

const char* allreduce_algorithm_name(AllreduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllreduceAlgorithm::kAuto:
      return "auto";
    case AllreduceAlgorithm::kRing:
      return "ring";
    case AllreduceAlgorithm::kTree:
      return "tree";
  }
  return "?";
}

namespace {

enum class Kind : uint8_t {
  kBroadcast = 1,
  kAllreduce,
  kReduce,
  kAllgather,
  kGather,
  kScatter,
  kReduceScatter,
  kBarrier,
};

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kBroadcast:
      return "broadcast";
    case Kind::kAllreduce:
      return "allreduce";
    case Kind::kReduce:
      return "reduce";
    case Kind::kAllgather:
      return "allgather";
    case Kind::kGather:
      return "gather";
    case Kind::kScatter:
      return "scatter";
    case Kind::kReduceScatter:
      return "reduce_scatter";
    case Kind::kBarrier:
      return "barrier";
  }
  return "unknown operation";
}

bool has_op(Kind k) { return k == Kind::kAllreduce || k == Kind::kReduce || k == Kind::kReduceScatter; }
bool has_root(Kind k) {
  return k == Kind::kBroadcast || k == Kind::kReduce || k == Kind::kGather || k == Kind::kScatter;
}

// What a rank is about to do; compared between ring neighbours.
struct Call {
  Kind kind = Kind::kBarrier;
  DType dtype = DType::kF32;
  ReduceOp op = ReduceOp::kSum;
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::kAuto;  // allreduce only
  int root = 0;
  uint64_t count = 0;  // elements per rank (allgather/gather/scatter/reduce_scatter: one block)
  uint64_t seq = 0;    // collective call number on this communicator, from 1

  bool operator==(const Call& o) const {
    return kind == o.kind && dtype == o.dtype && count == o.count && seq == o.seq && (!has_op(kind) || op == o.op) &&
           (!has_root(kind) || root == o.root) && (kind != Kind::kAllreduce || algorithm == o.algorithm);
  }

  std::string str() const {
    std::string s = std::string(kind_name(kind)) + "(";
    if (kind != Kind::kBarrier) s += std::to_string(count) + " x " + dtype_name(dtype);
    if (has_op(kind)) s += std::string(", ") + reduce_op_name(op);
    if (kind == Kind::kAllreduce) s += std::string(", ") + allreduce_algorithm_name(algorithm);
    if (has_root(kind)) s += ", root " + std::to_string(root);
    return s + ") [call #" + std::to_string(seq) + "]";
  }
};

// Wire headers, 32 bytes, little-endian.
//   collective:      "STRC" u8 kind, u8 dtype, u8 op, u8 algorithm, i32 root, u64 count, u64 seq, u32 0
//   point-to-point:  "STRP" u8 dtype, u8 0, u8 0, u8 0, i32 tag, u64 count, u64 0, u32 0
constexpr size_t kHeaderBytes = 32;
constexpr char kCollectiveMagic[4] = {'S', 'T', 'R', 'C'};
constexpr char kMessageMagic[4] = {'S', 'T', 'R', 'P'};

void encode_call(const Call& c, char* h) {
  std::memset(h, 0, kHeaderBytes);
  std::memcpy(h, kCollectiveMagic, 4);
  h[4] = static_cast<char>(c.kind);
  h[5] = static_cast<char>(c.dtype);
  h[6] = static_cast<char>(c.op);
  h[7] = static_cast<char>(c.algorithm);
  wire::store_u32(h + 8, static_cast<uint32_t>(c.root));
  wire::store_u64(h + 12, c.count);
  wire::store_u64(h + 20, c.seq);
}

Call decode_call(const char* h) {
  Call c;
  c.kind = static_cast<Kind>(static_cast<uint8_t>(h[4]));
  c.dtype = static_cast<DType>(static_cast<uint8_t>(h[5]));
  c.op = static_cast<ReduceOp>(static_cast<uint8_t>(h[6]));
  c.algorithm = static_cast<AllreduceAlgorithm>(static_cast<uint8_t>(h[7]));
  c.root = static_cast<int32_t>(wire::load_u32(h + 8));
  c.count = wire::load_u64(h + 12);
  c.seq = wire::load_u64(h + 20);
  return c;
}

struct Message {
  DType dtype = DType::kF32;
  int tag = 0;
  uint64_t count = 0;
};

void encode_message(const Message& m, char* h) {
  std::memset(h, 0, kHeaderBytes);
  std::memcpy(h, kMessageMagic, 4);
  h[4] = static_cast<char>(m.dtype);
  wire::store_u32(h + 8, static_cast<uint32_t>(m.tag));
  wire::store_u64(h + 12, m.count);
}

Message decode_message(const char* h) {
  Message m;
  m.dtype = static_cast<DType>(static_cast<uint8_t>(h[4]));
  m.tag = static_cast<int32_t>(wire::load_u32(h + 8));
  m.count = wire::load_u64(h + 12);
  return m;
}

const char* safe_dtype_name(DType d) {
  return static_cast<uint8_t>(d) <= static_cast<uint8_t>(DType::kU8) ? dtype_name(d) : "unknown dtype";
}

std::string this_hostname() {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) return "?";
  return host;
}

// How an operation failed. The waiting thread throws a fresh exception of
// the same type, so no exception object is shared between threads.
enum class ErrorKind { kNone, kError, kShape, kNetwork, kTimeout };

struct Failure {
  ErrorKind kind = ErrorKind::kNone;
  std::string message;
};

[[noreturn]] void throw_failure(const Failure& f) {
  switch (f.kind) {
    case ErrorKind::kTimeout:
      throw TimeoutError(f.message);
    case ErrorKind::kNetwork:
      throw NetworkError(f.message);
    case ErrorKind::kShape:
      throw ShapeError(f.message);
    case ErrorKind::kNone:
    case ErrorKind::kError:
      break;
  }
  throw Error(f.message);
}

// Completion state shared by a queued job and its CommWork handle.
struct WorkState {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  Failure failure;

  void finish(Failure f) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      failure = std::move(f);
      done = true;
    }
    cv.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return done; });
    if (failure.kind != ErrorKind::kNone) throw_failure(failure);
  }
};

class Work final : public CommWork {
 public:
  explicit Work(std::shared_ptr<WorkState> state) : state_(std::move(state)) {}
  void wait() override { state_->wait(); }
  bool is_done() override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return state_->done;
  }

 private:
  std::shared_ptr<WorkState> state_;
};

struct Job {
  std::string what;  // "allreduce(...)" for error messages
  std::function<void()> run;
  std::shared_ptr<WorkState> state;
};

}  // namespace

struct TcpCommunicator::Impl {
  // Declaration order is destruction order reversed: the worker stops
  // first, then the transport closes, then held resources (store, server) go.
  std::vector<std::shared_ptr<void>> held;
  std::unique_ptr<Transport> transport;  // null after an error (see close_transport)
  std::mutex transport_mutex;            // guards resetting it against set_timeout
  TcpCommunicatorOptions options;
  std::string self;  // "rank 1 on host-a"
  int rank = 0;
  int world = 1;

  // Worker-thread state.
  Workspace workspace;
  uint64_t seq = 0;
  std::string broken;  // first transport/protocol error; later calls fail with it

  std::mutex mutex;
  std::condition_variable cv;
  std::deque<Job> queue;
  bool stop = false;
  std::thread worker;

  void worker_loop() {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mutex);
        cv.wait(lock, [&] { return stop || !queue.empty(); });
        if (queue.empty()) return;
        job = std::move(queue.front());
        queue.pop_front();
      }
      const Failure f = execute(job);
      // The call's tensors (its closure's copies) go before anyone is told
      // it is done: a caller that lets its own go after wait() frees them.
      job.run = nullptr;
      job.state->finish(f);
    }
  }

  Failure execute(Job& job) {
    if (!broken.empty()) {
      return Failure{
          ErrorKind::kError,
          self + ": " + job.what + " cannot run: this communicator is unusable after an earlier error: " + broken};
    }
    Failure f;
    try {
      job.run();
      return f;
    } catch (const TimeoutError& e) {
      f = Failure{ErrorKind::kTimeout, e.what()};
    } catch (const NetworkError& e) {
      f = Failure{ErrorKind::kNetwork, e.what()};
    } catch (const ShapeError& e) {
      f = Failure{ErrorKind::kShape, e.what()};
    } catch (const std::exception& e) {
      f = Failure{ErrorKind::kError, e.what()};
    } catch (...) {
      f = Failure{ErrorKind::kError, "unknown exception"};
    }
    if (f.message.rfind(self, 0) != 0) f.message = self + ": " + f.message;
    f.message += " [in " + job.what + "]";
    broken = f.message;
    close_transport();
    return f;
  }

  // After an error the byte streams are out of step. Closing the
  // connections makes the peers fail at once ("closed the connection")
  // instead of each waiting out its timeout.
  void close_transport() {
    std::lock_guard<std::mutex> lock(transport_mutex);
    transport.reset();
  }

  std::shared_ptr<WorkState> enqueue(std::string what, std::function<void()> run) {
    auto state = std::make_shared<WorkState>();
    {
      std::lock_guard<std::mutex> lock(mutex);
      queue.push_back(Job{std::move(what), std::move(run), state});
    }
    cv.notify_one();
    return state;
  }

  // Runs on the worker: numbers the call and, with CallCheck::kOn, checks
  // that the previous rank in the ring is making the same call.
  void check_call(Call& call) {
    call.seq = ++seq;
    if (options.check == CallCheck::kOff || world == 1) return;
    const int next = (rank + 1) % world;
    const int prev = (rank + world - 1) % world;
    char mine[kHeaderBytes];
    char theirs[kHeaderBytes];
    encode_call(call, mine);
    transport->send_recv(next, mine, kHeaderBytes, prev, theirs, kHeaderBytes, nullptr);
    if (std::memcmp(theirs, kMessageMagic, 4) == 0) {
      const Message m = decode_message(theirs);
      fail<Error>(self, ": this rank called ", call.str(), " but ", transport->peer_name(prev),
                  " sent a point-to-point message (tag ", m.tag, ", ", m.count, " x ", safe_dtype_name(m.dtype),
                  "): the ranks are not issuing the same operations in the same order");
    }
    if (std::memcmp(theirs, kCollectiveMagic, 4) != 0) {
      fail<Error>(self, ": ", transport->peer_name(prev), " sent bytes that are not a call header during ", call.str(),
                  ": the ranks are out of step (mismatched sizes in an earlier call?)");
    }
    const Call other = decode_call(theirs);
    if (!(other == call)) {
      fail<Error>(self, ": collective mismatch: this rank called ", call.str(), ", ", transport->peer_name(prev),
                  " called ", other.str(), "; every rank must make the same collective calls in the same order");
    }
  }

  AllreduceAlgorithm algorithm_for(size_t bytes) const {
    if (options.algorithm != AllreduceAlgorithm::kAuto) return options.algorithm;
    return bytes < options.tree_threshold_bytes ? AllreduceAlgorithm::kTree : AllreduceAlgorithm::kRing;
  }

  void run_blocking(std::string what, std::function<void()> run) { enqueue(std::move(what), std::move(run))->wait(); }

  // Queues an allreduce of t (kept alive by the copy) and returns its state.
  std::shared_ptr<WorkState> queue_allreduce(Tensor t, ReduceOp op) {
    Call call;
    call.kind = Kind::kAllreduce;
    call.dtype = t.dtype();
    call.op = op;
    call.count = static_cast<uint64_t>(t.numel());
    call.algorithm = algorithm_for(t.nbytes());
    const std::string what = call.str().substr(0, call.str().find(" [call"));
    return enqueue(what, [this, t, call]() mutable {
      check_call(call);
      if (call.algorithm == AllreduceAlgorithm::kTree) {
        allreduce_tree(*transport, workspace, t.raw_data(), call.count, call.dtype, call.op);
      } else {
        allreduce_ring(*transport, workspace, t.raw_data(), call.count, call.dtype, call.op);
      }
    });
  }

  // Queues a reduce-scatter (in and out kept alive by the copies).
  std::shared_ptr<WorkState> queue_reduce_scatter(Tensor in, Tensor out, ReduceOp op) {
    Call call;
    call.kind = Kind::kReduceScatter;
    call.dtype = out.dtype();
    call.op = op;
    call.count = static_cast<uint64_t>(out.numel());
    const std::string what = call.str().substr(0, call.str().find(" [call"));
    return enqueue(what, [this, in, out, call]() mutable {
      check_call(call);
      reduce_scatter_ring(*transport, workspace, in.raw_data(), out.raw_data(), call.count, call.dtype, call.op);
    });
  }

  std::shared_ptr<WorkState> queue_allgather(Tensor in, Tensor out) {
    Call call;
    call.kind = Kind::kAllgather;
    call.dtype = in.dtype();
    call.count = static_cast<uint64_t>(in.numel());
    const std::string what = call.str().substr(0, call.str().find(" [call"));
    return enqueue(what, [this, in, out, call]() mutable {
      check_call(call);
      allgather_ring(*transport, in.raw_data(), out.raw_data(), in.nbytes());
    });
  }

  std::shared_ptr<WorkState> queue_broadcast(Tensor t, int root) {
    Call call;
    call.kind = Kind::kBroadcast;
    call.dtype = t.dtype();
    call.root = root;
    call.count = static_cast<uint64_t>(t.numel());
    const std::string what = call.str().substr(0, call.str().find(" [call"));
    return enqueue(what, [this, t, call]() mutable {
      check_call(call);
      broadcast_tree(*transport, t.raw_data(), t.nbytes(), call.root);
    });
  }
};

namespace {
std::string call_text(const char* op, const Tensor& t) {
  return std::string(op) + "(" + std::to_string(t.numel()) + " x " + dtype_name(t.dtype());
}
}  // namespace

TcpCommunicator::TcpCommunicator(std::unique_ptr<Transport> transport, TcpCommunicatorOptions options)
    : impl_(std::make_unique<Impl>()) {
  STRATA_CHECK(transport != nullptr, "TcpCommunicator needs a transport");
  impl_->transport = std::move(transport);
  impl_->options = std::move(options);
  impl_->rank = impl_->transport->rank();
  impl_->world = impl_->transport->world_size();
  const std::string host = impl_->options.hostname.empty() ? this_hostname() : impl_->options.hostname;
  impl_->self = "rank " + std::to_string(impl_->rank) + " on " + host;
  impl_->worker = std::thread([impl = impl_.get()] { impl->worker_loop(); });
}

TcpCommunicator::~TcpCommunicator() {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  if (impl_->worker.joinable()) impl_->worker.join();
}

void TcpCommunicator::hold(std::shared_ptr<void> resource) { impl_->held.push_back(std::move(resource)); }

AllreduceAlgorithm TcpCommunicator::allreduce_algorithm_for(size_t bytes) const { return impl_->algorithm_for(bytes); }

int TcpCommunicator::rank() const { return impl_->rank; }
int TcpCommunicator::world_size() const { return impl_->world; }
void TcpCommunicator::set_timeout(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(impl_->transport_mutex);
  if (impl_->transport) impl_->transport->set_timeout(timeout);
}

std::string TcpCommunicator::describe() const { return impl_->self; }

std::string TcpCommunicator::transport_name() const {
  std::lock_guard<std::mutex> lock(impl_->transport_mutex);
  return impl_->transport ? describe_transport(*impl_->transport) : "closed";
}

std::string communicator_transport_name(Communicator& c) {
  Communicator* inner = &c;
  if (auto* staging = dynamic_cast<HostStagingCommunicator*>(inner)) inner = &staging->inner();
  const auto* tcp = dynamic_cast<const TcpCommunicator*>(inner);
  return tcp ? tcp->transport_name() : "";
}

std::string TcpCommunicator::why_cannot_move(const Tensor& t) const {
  if (t.device().is_cpu()) return {};
  return "the tcp backend moves CPU tensors only; build it with create_communicator (which copies CUDA tensors "
         "through the host) or copy the tensor to the host";
}

void TcpCommunicator::do_broadcast(Tensor& t, int root) { impl_->queue_broadcast(t, root)->wait(); }

void TcpCommunicator::do_allreduce(Tensor& t, ReduceOp op) { impl_->queue_allreduce(t, op)->wait(); }

std::unique_ptr<CommWork> TcpCommunicator::do_allreduce_async(Tensor& t, ReduceOp op) {
  return std::make_unique<Work>(impl_->queue_allreduce(t, op));
}

std::unique_ptr<CommWork> TcpCommunicator::do_broadcast_async(Tensor& t, int root) {
  return std::make_unique<Work>(impl_->queue_broadcast(t, root));
}

void TcpCommunicator::do_reduce(Tensor& t, ReduceOp op, int root) {
  Impl& m = *impl_;
  Call call;
  call.kind = Kind::kReduce;
  call.dtype = t.dtype();
  call.op = op;
  call.root = root;
  call.count = static_cast<uint64_t>(t.numel());
  m.run_blocking(call_text("reduce", t) + ", " + reduce_op_name(op) + ", root " + std::to_string(root) + ")",
                 [&m, &t, call]() mutable {
                   m.check_call(call);
                   reduce_tree(*m.transport, m.workspace, t.raw_data(), call.count, call.dtype, call.op, call.root,
                               NonRootBuffer::kUnchanged);
                 });
}

void TcpCommunicator::do_allgather(const Tensor& in, Tensor& out) { impl_->queue_allgather(in, out)->wait(); }

std::unique_ptr<CommWork> TcpCommunicator::do_allgather_async(const Tensor& in, Tensor& out) {
  return std::make_unique<Work>(impl_->queue_allgather(in, out));
}

void TcpCommunicator::do_gather(const Tensor& in, Tensor& out, int root) {
  Impl& m = *impl_;
  Call call;
  call.kind = Kind::kGather;
  call.dtype = in.dtype();
  call.root = root;
  call.count = static_cast<uint64_t>(in.numel());
  m.run_blocking(call_text("gather", in) + " per rank, root " + std::to_string(root) + ")", [&m, &in, &out,
                                                                                            call]() mutable {
    m.check_call(call);
    gather_linear(*m.transport, in.raw_data(), m.rank == call.root ? out.raw_data() : nullptr, in.nbytes(), call.root);
  });
}

void TcpCommunicator::do_scatter(const Tensor& in, Tensor& out, int root) {
  Impl& m = *impl_;
  Call call;
  call.kind = Kind::kScatter;
  call.dtype = out.dtype();
  call.root = root;
  call.count = static_cast<uint64_t>(out.numel());
  m.run_blocking(call_text("scatter", out) + " per rank, root " + std::to_string(root) + ")",
                 [&m, &in, &out, call]() mutable {
                   m.check_call(call);
                   scatter_linear(*m.transport, m.rank == call.root ? in.raw_data() : nullptr, out.raw_data(),
                                  out.nbytes(), call.root);
                 });
}

void TcpCommunicator::do_reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  impl_->queue_reduce_scatter(in, out, op)->wait();
}

std::unique_ptr<CommWork> TcpCommunicator::do_reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) {
  return std::make_unique<Work>(impl_->queue_reduce_scatter(in, out, op));
}

void TcpCommunicator::do_barrier() {
  Impl& m = *impl_;
  Call call;
  call.kind = Kind::kBarrier;
  m.run_blocking("barrier", [&m, call]() mutable {
    m.check_call(call);
    barrier_dissemination(*m.transport);
  });
}

void TcpCommunicator::do_send(const Tensor& t, int dst, int tag) {
  Impl& m = *impl_;
  m.run_blocking(call_text("send", t) + " to rank " + std::to_string(dst) + ", tag " + std::to_string(tag) + ")",
                 [&m, &t, dst, tag] {
                   Message msg;
                   msg.dtype = t.dtype();
                   msg.tag = tag;
                   msg.count = static_cast<uint64_t>(t.numel());
                   char header[kHeaderBytes];
                   encode_message(msg, header);
                   m.transport->send(dst, header, kHeaderBytes);
                   m.transport->send(dst, t.raw_data(), t.nbytes());
                 });
}

void TcpCommunicator::do_recv(Tensor& t, int src, int tag) {
  Impl& m = *impl_;
  m.run_blocking(call_text("recv", t) + " from rank " + std::to_string(src) + ", tag " + std::to_string(tag) + ")",
                 [&m, &t, src, tag] {
                   char header[kHeaderBytes];
                   m.transport->recv(src, header, kHeaderBytes);
                   const std::string from = m.transport->peer_name(src);
                   if (std::memcmp(header, kCollectiveMagic, 4) == 0) {
                     fail<Error>(m.self, ": this rank waits for a message (tag ", tag, ") but ", from,
                                 " started a collective, ", decode_call(header).str(),
                                 ": the ranks are not issuing the same operations in the same order");
                   }
                   if (std::memcmp(header, kMessageMagic, 4) != 0) {
                     fail<Error>(m.self, ": ", from,
                                 " sent bytes that are not a message header: the ranks are "
                                 "out of step (mismatched sizes in an earlier call?)");
                   }
                   const Message msg = decode_message(header);
                   if (msg.tag != tag) {
                     fail<Error>(m.self, ": recv from ", from, " expected tag ", tag,
                                 ", but the next message from "
                                 "that rank has tag ",
                                 msg.tag, " (", msg.count, " x ", safe_dtype_name(msg.dtype),
                                 "); messages between two ranks arrive in the order they were sent, so sends and "
                                 "recvs must be issued in the same order");
                   }
                   if (msg.dtype != t.dtype() || msg.count != static_cast<uint64_t>(t.numel())) {
                     fail<ShapeError>(m.self, ": recv from ", from, " (tag ", tag, "): the message holds ", msg.count,
                                      " x ", safe_dtype_name(msg.dtype), ", but the receiving tensor is ", t.numel(),
                                      " x ", dtype_name(t.dtype()), " ", shape_str(t.shape()));
                   }
                   m.transport->recv(src, t.raw_data(), t.nbytes());
                 });
}

}  // namespace strata::parallel
