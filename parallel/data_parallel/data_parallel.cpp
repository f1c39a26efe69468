#include "framework/timeline.h"
#include "parallel/data_parallel/data_parallel.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>

#include "framework/dtype.h"
#include "framework/error.h"
#include "framework/hash.h"
#include "framework/io/checkpoint.h"
#include "framework/io/wire_format.h"
#include "framework/solver/optimizer.h"
#include "framework/cpu/threads.h"
#include "parallel/data_parallel/weight_gathering.h"
#ifdef STRATA_WITH_CUDA
#include "framework/cuda/device_api.h"
#endif

namespace strata::parallel {

namespace {

// Consecutive groups of `ids` holding at most cap_bytes of f32 each (a larger
// parameter alone), for packing parameters into few collective calls.
std::vector<std::vector<int>> chunk_params(const std::vector<NetParam>& params, const std::vector<int>& ids,
                                           size_t cap_bytes) {
  std::vector<std::vector<int>> chunks;
  size_t bytes = 0;
  for (int id : ids) {
    const size_t b = static_cast<size_t>(params[id].blob->numel()) * sizeof(float);
    if (chunks.empty() || (bytes > 0 && bytes + b > cap_bytes)) {
      chunks.emplace_back();
      bytes = 0;
    }
    chunks.back().push_back(id);
    bytes += b;
  }
  return chunks;
}

int64_t total_numel(const std::vector<NetParam>& params, const std::vector<int>& ids) {
  int64_t n = 0;
  for (int id : ids) n += params[id].blob->numel();
  return n;
}

enum class Which { kData, kDiff };

Tensor& tensor_of(const NetParam& p, Which which) { return which == Which::kData ? p.blob->data : p.blob->diff; }

// The parameters `ids` one after another into `flat` and back; either may
// live on the host or on a CUDA device.
void pack(const std::vector<NetParam>& params, const std::vector<int>& ids, Which which, Tensor& flat) {
  int64_t offset = 0;
  for (int id : ids) {
    const Tensor& t = tensor_of(params[id], which);
    copy_elements(flat, offset, t, 0, t.numel());
    offset += t.numel();
  }
}

void unpack(const std::vector<NetParam>& params, const std::vector<int>& ids, Which which, const Tensor& flat) {
  int64_t offset = 0;
  for (int id : ids) {
    Tensor& t = tensor_of(params[id], which);
    copy_elements(t, 0, flat, offset, t.numel());
    offset += t.numel();
  }
}

// "fc1.weight [64, 32] learnable" per line: what must agree across ranks.
std::vector<std::string> param_signature(const Net& net) {
  std::vector<std::string> out;
  for (const NetParam& p : net.params()) {
    out.push_back("'" + p.name + "' " + shape_str(p.blob->shape()) +
                  (p.learnable == Learnable::kYes ? "" : " (buffer)"));
  }
  return out;
}

std::vector<std::string> split_lines(const char* p, size_t n) {
  std::vector<std::string> out;
  std::string cur;
  for (size_t i = 0; i < n; ++i) {
    if (p[i] == '\n') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += p[i];
    }
  }
  return out;
}

// Layer states as framework/io/wire_format.h fields (values may hold any byte).
void put_states(std::string& out, const std::map<std::string, std::string>& states) {
  size_t n = 0;
  for (const auto& kv : states) n += kv.first.empty() || kv.first[0] != '@';
  wire::put_bytes(out, std::to_string(n));
  for (const auto& [key, value] : states) {
    if (!key.empty() && key[0] == '@') continue;
    wire::put_bytes(out, key);
    wire::put_bytes(out, value);
  }
}

void get_states(wire::Reader& in, std::map<std::string, std::string>* states) {
  const long n = std::strtol(in.bytes().c_str(), nullptr, 10);
  for (long i = 0; i < n; ++i) {
    std::string key = in.bytes();
    (*states)[key] = in.bytes();
  }
}

}  // namespace

// ---- DataParallel ----

DataParallel::DataParallel(Solver& solver, Communicator& comm, const DataParallelConfig& config)
    : solver_(solver), comm_(comm), config_(config), scalars_({2}) {
  const SolverOptions& so = solver.options();
  if (so.rank != comm.rank() || so.world_size != comm.world_size()) {
    fail<Error>("data parallel: the solver was built for rank ", so.rank, " of ", so.world_size,
                " but the communicator is rank ", comm.rank(), " of ", comm.world_size());
  }
  Net& net = solver_.net();
  // NCCL reduces device memory: the buckets live beside the gradients. The
  // tcp and mpi backends move host memory: gradients on a GPU are staged
  // through host buckets.
  wire_device_ = comm.backend() == CommBackend::kNccl ? net.device() : Device::cpu();
  if (!wire_device_.is_cpu() && config_.compression != GradCompression::kNone) {
    fail<ConfigError>("data parallel: compression ", grad_compression_name(config_.compression),
                      " is not available with the nccl backend yet (it reduces f32 gradients on the GPU); "
                      "use compression: NONE, or the tcp backend");
  }
  const bool sharded = config_.shard != ShardStage::kNone;
  buckets_ = assign_buckets(net, config_.bucket_bytes(), sharded ? BucketReach::kAllUpdated : BucketReach::kBackward);
  // Sharded with overlap off: one bucket, so each rank owns one contiguous slice of all the parameters.
  if (sharded && config_.overlap == Overlap::kOff && buckets_.size() > 1) buckets_ = {merge_buckets(buckets_)};
  bucket_of_.assign(net.params().size(), -1);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (int id : buckets_[b].params) bucket_of_[id] = static_cast<int>(b);
  }
  reported_.assign(net.params().size(), 0);
  pending_.resize(buckets_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) pending_[b] = static_cast<int>(buckets_[b].params.size());
  const DType wire = wire_dtype(config_.compression);
  if (sharded) {
    // ShardedUpdate lays out its own buffers (after the parameters agree and are broadcast, below).
  } else if (config_.overlap == Overlap::kOn) {
    // A bucket reduced in place needs no wire buffer (launch() makes one
    // should the net's gradients have moved since).
    for (const GradBucket& b : buckets_) {
      buffers_.push_back(in_place(b.params) ? Tensor() : Tensor(Shape{b.numel}, wire, wire_device_));
    }
    works_.resize(buckets_.size());
    views_.resize(buckets_.size());
    in_place_.assign(buckets_.size(), 0);
  } else {
    const GradBucket all = merge_buckets(buckets_);
    buffers_.push_back(in_place(all.params) ? Tensor() : Tensor(Shape{all.numel}, wire, wire_device_));
  }

  check_parameters_match();
  broadcast_parameters();
  if (sharded) sharded_ = std::make_unique<ShardedUpdate>(solver_, comm_, config_, buckets_, wire_device_);

  solver_.attach(*this);
}

DataParallel::~DataParallel() {
  solver_.detach(*this);
  // Operations still in flight (after an error) finish or fail inside their
  // own destructors, before the buffers they use go away.
  works_.clear();
}

double DataParallel::run_update(Net&) {
  const double lr = sharded_->update();
  comm_wait_ += sharded_->take_comm_seconds();
  return lr;
}

bool DataParallel::scale_check_gradients(float factor) {
  const bool finite = sharded_->scale_check(factor);
  comm_wait_ += sharded_->take_comm_seconds();
  return finite;
}

void DataParallel::before_test() {
  average_buffers();
  gather_parameters();  // the TEST net reads the TRAIN net's weights, whole
}

void DataParallel::gather_parameters() {
  if (sharded_ && sharded_->gathering()) sharded_->gathering()->gather_all();
}

void DataParallel::snapshot_state(SolverState& state) {
  average_buffers();
  gather_parameters();  // rank 0 writes the whole weights
  if (sharded_) {
    sharded_->gather_history(state);
    // In a grid the history is this tensor-parallel rank's blocks under
    // whole names: the writer's tp group joins them (every rank of a tp
    // group has the same dp rank, so all of it takes part or none).
    if (rank() == 0 && has_split_params(solver_.net())) gather_split_history(solver_.net(), state.history);
  }
  if (solver_.snapshot_assembler() == nullptr) gather_layer_states(state);
}

double DataParallel::take_comm_wait_seconds() {
  const double s = comm_wait_;
  comm_wait_ = 0.0;
  return s;
}

void DataParallel::check_parameters_match() {
  const std::vector<std::string> mine = param_signature(solver_.net());
  uint64_t h = kFnv1aOffset;
  for (const std::string& line : mine) h = fnv1a(line + "\n", h);
  Tensor digest({3}, DType::kI32);
  int32_t* d = digest.data<int32_t>();
  d[0] = static_cast<int32_t>(static_cast<uint32_t>(h));
  d[1] = static_cast<int32_t>(static_cast<uint32_t>(h >> 32));
  d[2] = static_cast<int32_t>(mine.size());
  const int ws = comm_.world_size();
  Tensor all({3 * ws}, DType::kI32);
  allgather_host(digest, all);
  const int32_t* a = all.data<int32_t>();
  int differing = -1;
  for (int r = 1; r < ws && differing < 0; ++r) {
    if (!std::equal(a, a + 3, a + 3 * r)) differing = r;
  }
  if (differing < 0) return;

  // Rare path: exchange the lists to name the first difference.
  std::string text;
  for (const std::string& line : mine) text += line + "\n";
  Tensor len({1}, DType::kI32);
  len.data<int32_t>()[0] = static_cast<int32_t>(text.size());
  Tensor lens({ws}, DType::kI32);
  allgather_host(len, lens);
  const int32_t longest = *std::max_element(lens.data<int32_t>(), lens.data<int32_t>() + ws);
  Tensor mine_bytes({std::max(1, longest)}, DType::kU8);
  std::memcpy(mine_bytes.raw_data(), text.data(), text.size());
  Tensor every({static_cast<int64_t>(ws) * std::max(1, longest)}, DType::kU8);
  allgather_host(mine_bytes, every);
  auto list_of = [&](int r) {
    const char* p = static_cast<const char*>(every.raw_data()) + static_cast<size_t>(r) * std::max(1, longest);
    return split_lines(p, static_cast<size_t>(lens.data<int32_t>()[r]));
  };
  const std::vector<std::string> first = list_of(0);
  const std::vector<std::string> other = list_of(differing);
  size_t i = 0;
  while (i < first.size() && i < other.size() && first[i] == other[i]) ++i;
  std::ostringstream msg;
  msg << "data parallel: rank 0 and rank " << differing << " built different nets, so their parameters "
      << "cannot be averaged; first difference at parameter #" << i << ": ";
  msg << "rank 0 has " << (i < first.size() ? first[i] : "no more parameters") << ", rank " << differing
      << " has " << (i < other.size() ? other[i] : "no more parameters")
      << " (every rank must run the same solver and net files)";
  throw ConfigError(msg.str());
}

void DataParallel::broadcast_parameters() {
  const std::vector<NetParam>& params = solver_.net().params();
  std::vector<int> ids(params.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int>(i);
  for (const std::vector<int>& chunk : chunk_params(params, ids, config_.bucket_bytes())) {
    Tensor flat({total_numel(params, chunk)}, DType::kF32, wire_device_);
    if (comm_.rank() == 0) pack(params, chunk, Which::kData, flat);
    comm_.broadcast(flat, 0);
    if (comm_.rank() != 0) unpack(params, chunk, Which::kData, flat);
  }
}

void DataParallel::average_buffers() {
  const std::vector<NetParam>& params = solver_.net().params();
  std::vector<int> ids;
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].learnable == Learnable::kNo) ids.push_back(static_cast<int>(i));
  }
  for (const std::vector<int>& chunk : chunk_params(params, ids, config_.bucket_bytes())) {
    Tensor flat({total_numel(params, chunk)}, DType::kF32, wire_device_);
    pack(params, chunk, Which::kData, flat);
    comm_.allreduce(flat, ReduceOp::kAverage);
    unpack(params, chunk, Which::kData, flat);
  }
}

void DataParallel::on_grad_ready(int id) {
  if (!solver_.in_last_pass()) return;  // gradients still accumulate over iter_size passes
  const int b = bucket_of_.at(id);
  if (b < 0 || reported_[id]) return;
  reported_[id] = 1;
  --pending_[b];
  // Start buckets in index order only: every rank issues the same sequence.
  while (next_launch_ < buckets_.size() && pending_[next_launch_] == 0) launch(next_launch_++);
  // Lets backends that progress only inside their calls (MPI) move on.
  if (sharded_) {
    if (next_launch_ > 0) sharded_->poke(next_launch_ - 1);
  } else if (next_launch_ > 0 && works_[next_launch_ - 1]) {
    works_[next_launch_ - 1]->is_done();
  }
}

std::optional<Tensor> DataParallel::in_place(const std::vector<int>& params) const {
  if (config_.compression != GradCompression::kNone || !(wire_device_ == solver_.net().device())) return std::nullopt;
  return solver_.net().gradient_view(params);
}

size_t DataParallel::wire_buffer_bytes() const {
  size_t bytes = 0;
  for (const Tensor& b : buffers_) bytes += b.nbytes();
  return bytes;
}

void DataParallel::launch(size_t b) {
  if (sharded_) return sharded_->launch(b);
  const std::vector<NetParam>& params = solver_.net().params();
  const GradBucket& bucket = buckets_[b];
  if (std::optional<Tensor> view = in_place(bucket.params)) {
    // The net's own gradients, averaged where they are: no copy in or out.
    views_[b] = *view;
    in_place_[b] = 1;
    works_[b] = comm_.allreduce_async(views_[b], ReduceOp::kAverage);
  } else {
    in_place_[b] = 0;
    Tensor& buf = buffers_[b];
    if (buf.numel() != bucket.numel) buf = Tensor(Shape{bucket.numel}, wire_dtype(config_.compression), wire_device_);
    const float scale =
        config_.compression == GradCompression::kNone ? 1.0f : 1.0f / static_cast<float>(world_size());
    for (size_t k = 0; k < bucket.params.size(); ++k) {
      encode_param(params[bucket.params[k]].blob->diff, scale, buf, bucket.offsets[k]);
    }
    const ReduceOp op = config_.compression == GradCompression::kNone ? ReduceOp::kAverage : ReduceOp::kSum;
    works_[b] = comm_.allreduce_async(buf, op);
  }
  if (launched_us_.size() < buckets_.size()) launched_us_.resize(buckets_.size());
  launched_us_[b] = Timeline::on() ? Timeline::now_us() : 0;
}

void DataParallel::finish_gradients() {
  const Clock::time_point start = Clock::now();
  const std::vector<NetParam>& params = solver_.net().params();
  const bool compressed = config_.compression != GradCompression::kNone;
  const float scale = compressed ? 1.0f / static_cast<float>(world_size()) : 1.0f;
  const ReduceOp op = compressed ? ReduceOp::kSum : ReduceOp::kAverage;
  auto copy_back = [&](const GradBucket& bucket, const Tensor& buf, int64_t base) {
    for (size_t k = 0; k < bucket.params.size(); ++k) {
      decode_param(buf, base + bucket.offsets[k], params[bucket.params[k]].blob->diff);
    }
  };
  if (sharded_) {
    // Buckets not launched yet (overlap off, or never reported) start now, in index order.
    while (next_launch_ < buckets_.size()) launch(next_launch_++);
    const TimelineScope wait_event("wait", "wait reduce-scatter");
    sharded_->finish_gradients();
  } else if (config_.overlap == Overlap::kOn) {
    // Buckets whose parameters were never reported (no callback reached
    // them) start now, still in index order.
    while (next_launch_ < buckets_.size()) launch(next_launch_++);
    const TimelineScope wait_event("wait", "wait allreduce");
    for (size_t b = 0; b < buckets_.size(); ++b) {
      // On a device stream (nccl) the compute stream waits for the bucket and
      // the host goes on to queue the update; a timeline measures the wait
      // on the host instead.
      if (Timeline::on()) {
        works_[b]->wait();
      } else {
        works_[b]->order_on_compute_stream();
      }
      works_[b].reset();
      if (Timeline::on()) {
        Timeline::record("allreduce", "allreduce bucket " + std::to_string(b), launched_us_[b], Timeline::now_us(),
                         "allreduce");
      }
      if (!in_place_[b]) copy_back(buckets_[b], buffers_[b], 0);
      views_[b] = Tensor();
    }
  } else if (!buckets_.empty()) {
    if (std::optional<Tensor> all = in_place(merge_buckets(buckets_).params)) {
      const TimelineScope event("allreduce", "allreduce (all buckets)");
      comm_.allreduce(*all, op);
    } else {
      Tensor& buf = buffers_[0];
      int64_t total = 0;
      for (const GradBucket& bucket : buckets_) total += bucket.numel;
      if (buf.numel() != total) buf = Tensor(Shape{total}, wire_dtype(config_.compression), wire_device_);
      int64_t base = 0;
      for (const GradBucket& bucket : buckets_) {
        for (size_t k = 0; k < bucket.params.size(); ++k) {
          encode_param(params[bucket.params[k]].blob->diff, scale, buf, base + bucket.offsets[k]);
        }
        base += bucket.numel;
      }
      {
        const TimelineScope event("allreduce", "allreduce (all buckets)");
        comm_.allreduce(buf, op);
      }
      base = 0;
      for (const GradBucket& bucket : buckets_) {
        copy_back(bucket, buf, base);
        base += bucket.numel;
      }
    }
  }
  next_launch_ = 0;
  std::fill(reported_.begin(), reported_.end(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b) pending_[b] = static_cast<int>(buckets_[b].params.size());
  comm_wait_ += std::chrono::duration<double>(Clock::now() - start).count();
}

// ---- gradients in and out of the wire buffers ----

void DataParallel::encode_param(const Tensor& grad, float scale, Tensor& buf, int64_t offset) {
  encode_gradient(grad, scale, config_.compression, buf, offset, staging_);
}

void DataParallel::decode_param(const Tensor& buf, int64_t offset, Tensor& grad) {
  decode_gradient(buf, offset, config_.compression, grad, staging_);
}

// ---- small host-side collectives (loss, outputs, checks, layer states) ----
// The nccl backend reduces device memory only: these go through a device copy.

void DataParallel::allreduce_host(Tensor& t, ReduceOp op) {
  if (wire_device_.is_cpu()) return comm_.allreduce(t, op);
  Tensor d = t.to(wire_device_);
  comm_.allreduce(d, op);
  t.copy_from(d);
}

void DataParallel::allgather_host(const Tensor& in, Tensor& out) {
  if (wire_device_.is_cpu()) return comm_.allgather(in, out);
  Tensor d_out(out.shape(), out.dtype(), wire_device_);
  comm_.allgather(in.to(wire_device_), d_out);
  out.copy_from(d_out);
}

void DataParallel::gather_host(const Tensor& in, Tensor& out, int root) {
  if (wire_device_.is_cpu()) return comm_.gather(in, out, root);
  Tensor d_out(out.shape(), out.dtype(), wire_device_);
  comm_.gather(in.to(wire_device_), d_out, root);
  out.copy_from(d_out);
}

float DataParallel::reduce_loss(float loss) {
  const Clock::time_point start = Clock::now();
  float* v = scalars_.data<float>();
  v[0] = loss;
  const std::atomic<bool>* local_stop = solver_.stop_flag();
  v[1] = local_stop && local_stop->load() ? 1.0f : 0.0f;
  allreduce_host(scalars_, ReduceOp::kSum);
  if (v[1] > 0.0f) global_stop_ = true;
  comm_wait_ += std::chrono::duration<double>(Clock::now() - start).count();
  return v[0] / static_cast<float>(world_size());
}

void DataParallel::reduce_results(const StepSlots& slots) {
  const std::atomic<bool>* local_stop = solver_.stop_flag();
  const float stop = local_stop && local_stop->load() ? 1.0f : 0.0f;
  const float share = 1.0f / static_cast<float>(world_size());  // summed: the average
  const Device record = solver_.net().device();
#ifdef STRATA_WITH_CUDA
  if (!record.is_cpu() && wire_device_ == record) {
    // All on the device: packed, reduced in stream order, unpacked; nothing read back.
    if (results_.numel() != 2 || results_.device() != record) results_ = Tensor({2}, DType::kF32, record);
    cuda::pack_step_results(results_.device_data<float>(), slots.loss_sum, share, stop, record.index);
    comm_.allreduce_async(results_, ReduceOp::kSum)->order_on_compute_stream();
    cuda::unpack_step_results(slots.loss_sum, slots.stop, results_.device_data<float>(), record.index);
    return;
  }
#endif
  // The record on the host, or staged through it (a GPU net over tcp).
  double loss_sum = 0.0, stops = 0.0;
  copy_record_value(&loss_sum, slots.loss_sum, record, false);
  float* v = scalars_.data<float>();
  v[0] = static_cast<float>(loss_sum) * share;
  v[1] = stop;
  allreduce_host(scalars_, ReduceOp::kSum);
  loss_sum = v[0];
  stops = v[1];
  copy_record_value(slots.loss_sum, &loss_sum, record, true);
  copy_record_value(slots.stop, &stops, record, true);
}

// One double of a step's record, between where it lies and the host.
void DataParallel::copy_record_value(double* dst, const double* src, Device record, bool to_record) {
  if (record.is_cpu()) {
    *dst = *src;
    return;
  }
#ifdef STRATA_WITH_CUDA
  cuda::copy_bytes(dst, to_record ? record.index : -1, src, to_record ? -1 : record.index, sizeof(double));
#else
  (void)to_record;
#endif
}

void DataParallel::reduce_outputs(NamedValues& values) {
  if (values.empty()) return;
  Tensor t({static_cast<int64_t>(values.size())});
  float* v = t.data<float>();
  for (size_t i = 0; i < values.size(); ++i) v[i] = static_cast<float>(values[i].second);
  allreduce_host(t, ReduceOp::kAverage);
  for (size_t i = 0; i < values.size(); ++i) values[i].second = v[i];
}

void DataParallel::gather_layer_states(SolverState& state) {
  std::string mine;
  put_states(mine, state.layer_states);
  put_states(mine, state.test_layer_states);
  if (mine.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    fail<Error>("data parallel: the layer states of rank ", rank(), " take ", mine.size(),
                " bytes, too many to gather into a snapshot");
  }
  const int ws = world_size();
  Tensor len({1}, DType::kI32);
  len.data<int32_t>()[0] = static_cast<int32_t>(mine.size());
  Tensor lens({ws}, DType::kI32);
  allgather_host(len, lens);
  const int64_t longest = std::max<int64_t>(1, *std::max_element(lens.data<int32_t>(), lens.data<int32_t>() + ws));
  Tensor bytes({longest}, DType::kU8);
  std::memcpy(bytes.raw_data(), mine.data(), mine.size());
  Tensor all({ws * longest}, DType::kU8);
  gather_host(bytes, all, 0);
  if (rank() != 0) return;
  for (int r = 1; r < ws; ++r) {
    const std::string blob(static_cast<const char*>(all.raw_data()) + r * longest,
                           static_cast<size_t>(lens.data<int32_t>()[r]));
    std::map<std::string, std::string> train, test;
    wire::Reader in(blob, "data parallel: the layer states gathered from rank " + std::to_string(r));
    get_states(in, &train);
    get_states(in, &test);
    const std::string prefix = rank_state_prefix(r);
    for (auto& [key, value] : train) state.layer_states[prefix + key] = std::move(value);
    for (auto& [key, value] : test) state.test_layer_states[prefix + key] = std::move(value);
  }
}

// ---- console ----

DataParallelConsole::DataParallelConsole(std::ostream& out, DataParallel& dp)
    : out_(out), dp_(dp), inner_(out), last_(std::chrono::steady_clock::now()) {}

void DataParallelConsole::on_start(const StartInfo& info) {
  inner_.on_start(info);
  last_ = std::chrono::steady_clock::now();
  dp_.take_comm_wait_seconds();
}

void DataParallelConsole::on_iteration(const IterationInfo& info) {
  const auto now = std::chrono::steady_clock::now();
  const double interval = std::chrono::duration<double>(now - last_).count();
  const double wait = dp_.take_comm_wait_seconds();
  last_ = now;
  char buf[96];
  out_ << "iter " << info.iter << "/" << info.max_iter << "  loss " << format_number(info.loss) << "  lr "
       << format_number(info.lr);
  if (info.samples_per_second > 0) {
    std::snprintf(buf, sizeof buf, "  %.0f samples/s/rank  %.0f samples/s total (%d ranks)", info.samples_per_second,
                  info.samples_per_second * dp_.world_size(), dp_.world_size());
    out_ << buf;
  } else {
    out_ << "  " << dp_.world_size() << " ranks";
  }
  if (interval > 0) {
    std::snprintf(buf, sizeof buf, "  comm wait %.0f%%", 100.0 * std::min(1.0, wait / interval));
    out_ << buf;
  }
  out_ << "  ETA " << format_duration(info.eta_seconds);
  for (const auto& kv : info.outputs) {
    if (kv.first == "loss") continue;
    out_ << "  " << kv.first << " " << format_number(kv.second);
  }
  out_ << std::endl;
}

}  // namespace strata::parallel
