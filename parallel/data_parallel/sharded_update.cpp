#include "parallel/data_parallel/sharded_update.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>

#include "framework/byte_size.h"
#include "framework/dtype.h"
#include "framework/error.h"
#include "framework/timeline.h"
#include "parallel/data_parallel/weight_gathering.h"

namespace strata::parallel {

namespace {

// The buffers a bucket's exchange uses, in slots used in turn: stage 1 one
// slot per bucket, stage 2 two (slot k serves the buckets b with b % 2 == k).
// A slot holds the wire buffer (world x block values) and the reduced block.
struct SlotSizes {
  std::vector<int64_t> wire;   // per slot: world x the largest block it serves
  std::vector<int64_t> block;  // per slot: the largest block it serves
};

SlotSizes slot_sizes(ShardStage stage, const std::vector<GradBucket>& buckets, int world) {
  const size_t n = stage == ShardStage::kOptimizer ? buckets.size() : std::min<size_t>(2, buckets.size());
  SlotSizes s;
  s.wire.assign(n, 0);
  s.block.assign(n, 0);
  for (size_t b = 0; b < buckets.size(); ++b) {
    const int64_t block = shard_block(buckets[b].numel, world);
    s.block[b % n] = std::max(s.block[b % n], block);
    s.wire[b % n] = std::max(s.wire[b % n], world * block);
  }
  return s;
}

size_t f32_bytes(int64_t n) { return static_cast<size_t>(n) * sizeof(float); }

}  // namespace

size_t gathered_bytes(const std::vector<GradBucket>& buckets, const std::vector<int>& first_layer,
                      const std::vector<int>& last_layer, int world) {
  // In place a bucket is whole as world blocks (its padding included).
  auto bytes_of = [&](size_t b) {
    return f32_bytes(world > 0 ? world * shard_block(buckets[b].numel, world) : buckets[b].numel);
  };
  size_t peak = 0;
  int layers = 0;
  for (int l : last_layer) layers = std::max(layers, l + 1);
  for (int i = 0; i < layers; ++i) {
    size_t whole = 0, ahead = 0;
    for (size_t b = 0; b < buckets.size(); ++b) {
      if (first_layer[b] <= i && i <= last_layer[b]) {
        whole += bytes_of(b);
      } else if (world > 0) {
        ahead = std::max(ahead, bytes_of(b));  // at most one other bucket on its way
      }
    }
    peak = std::max(peak, whole + ahead);
  }
  return peak;
}

ShardMemory memory_of(ShardStage stage, const std::vector<GradBucket>& buckets, const std::vector<NetParam>& params,
                      int rank, int world, const ShardBuffers& how, int optimizer_slots) {
  ShardMemory m;
  for (const NetParam& p : params) m.parameters += f32_bytes(p.blob->numel());
  int64_t in_buckets = 0;
  for (const GradBucket& b : buckets) in_buckets += b.numel;
  for (const NetParam& p : params) {
    if (p.learnable == Learnable::kYes) m.net_gradients += f32_bytes(p.blob->numel());
  }
  const size_t wire_bytes = dtype_size(wire_dtype(how.compression));
  if (stage == ShardStage::kNone) {
    for (const GradBucket& b : buckets) {
      if (!how.in_place) m.reduce_buffers += static_cast<size_t>(b.numel) * wire_bytes;
      m.optimizer_state += static_cast<size_t>(optimizer_slots) * f32_bytes(b.numel);
    }
    return m;
  }
  // The bucketed gradients live in the slots; the others (learnable, not
  // updated) stay the net's own.
  m.net_gradients = m.net_gradients - f32_bytes(in_buckets) + f32_bytes(how.slots.total_numel());
  int64_t largest_block = 0;
  for (const GradBucket& b : buckets) {
    const int64_t block = shard_block(b.numel, world);
    largest_block = std::max(largest_block, block);
    // The slice's gradients; with PARAMETERS its weights are all this rank
    // keeps of the bucket's; else they are the net's own, or a copy where
    // the wire lives on another device.
    m.reduce_buffers += f32_bytes(block);
    if (stage == ShardStage::kParameters) {
      m.parameters = m.parameters - f32_bytes(b.numel) + f32_bytes(block);
    } else if (!how.same_device) {
      m.reduce_buffers += f32_bytes(block);
    }
    m.optimizer_state += static_cast<size_t>(optimizer_slots) * f32_bytes(shard_range(b.numel, rank, world).size());
  }
  if (!how.in_place) {
    const SlotSizes slots = slot_sizes(stage, buckets, world);
    for (size_t k = 0; k < slots.wire.size(); ++k) {
      m.reduce_buffers += static_cast<size_t>(slots.wire[k]) * wire_bytes;
      if (how.compression != GradCompression::kNone) m.reduce_buffers += static_cast<size_t>(slots.block[k]) * wire_bytes;
    }
  }
  // With 16-bit gradients the weights' allgather lands in f32 buffers of its
  // own; with PARAMETERS the gathers before the layers have theirs
  // (weight_gathering.h): one block out, world blocks in.
  if (how.compression != GradCompression::kNone) m.reduce_buffers += f32_bytes(largest_block * world);
  if (stage == ShardStage::kParameters) {
    // The gathers land in new tensors that become the weights (in place),
    // or in one buffer on the wire's device, copied to the net's.
    if (!how.same_device) m.reduce_buffers += f32_bytes(largest_block * world);
    // A bucket is whole from the first to the last layer owning one of its
    // parameters: the most whole weights at once, over the layers.
    std::vector<int> first(buckets.size(), -1), last(buckets.size(), -1);
    for (size_t b = 0; b < buckets.size(); ++b) {
      for (int id : buckets[b].params) {
        const int layer = params[static_cast<size_t>(id)].owner_layer;
        first[b] = first[b] < 0 ? layer : std::min(first[b], layer);
        last[b] = std::max(last[b], layer);
      }
    }
    m.gathered = gathered_bytes(buckets, first, last, how.same_device ? world : 0);
  }
  return m;
}

std::string memory_line(const ShardMemory& m) {
  return "parameters " + format_bytes(m.parameters) +
         (m.gathered > 0 ? " + up to " + format_bytes(m.gathered) + " gathered while layers run" : "") +
         ", gradients " + format_bytes(m.net_gradients) + " + " + format_bytes(m.reduce_buffers) +
         " reduce buffers, optimizer state " + format_bytes(m.optimizer_state);
}

ShardedUpdate::ShardedUpdate(Solver& solver, Communicator& comm, const DataParallelConfig& config,
                             const std::vector<GradBucket>& buckets, Device wire_device)
    : solver_(solver), comm_(comm), config_(config), buckets_(buckets), wire_device_(wire_device) {
  STRATA_CHECK(config_.shard != ShardStage::kNone, "ShardedUpdate needs a shard stage, got NONE");
  const int world = comm_.world_size();
  const int rank = comm_.rank();
  Net& net = solver_.net();
  const std::vector<NetParam>& params = net.params();
  const DType wire = wire_dtype(config_.compression);
  how_.compression = config_.compression;
  how_.same_device = wire_device_ == net.device();
  how_.in_place = config_.compression == GradCompression::kNone && how_.same_device;
  own_weights_ = config_.shard == ShardStage::kParameters || !how_.same_device;
  // Slots used in turn where a bucket's whole gradient is needed only until
  // it leaves: GRADIENTS and PARAMETERS, each step's gradients in one pass.
  const bool reuse = config_.shard != ShardStage::kOptimizer && solver_.config().iter_size == 1;
  how_.slots = plan_gradient_slots(net, buckets_, world, reuse);

  // This rank's slices: per bucket a block of gradients and one of weights;
  // the pieces are views of them.
  for (const GradBucket& bucket : buckets_) {
    shards_.push_back(shard_bucket(bucket, params, rank, world));
    const BucketShard& shard = shards_.back();
    slice_grads_.emplace_back(Shape{shard.block}, DType::kF32, wire_device_);
    slice_weights_.push_back(own_weights_ ? Tensor(Shape{shard.block}, DType::kF32, wire_device_) : Tensor());
    first_piece_.push_back(pieces_.size());
    for (const ShardPiece& piece : shard.pieces) {
      const NetParam& p = params[piece.param];
      const size_t at = static_cast<size_t>(piece.slice_offset) * sizeof(float);
      const size_t bytes = static_cast<size_t>(piece.count) * sizeof(float);
      NetParam q;
      q.name = p.name;
      q.blob = std::make_shared<Blob>();
      q.blob->diff = slice_grads_.back().view_bytes(at, bytes, {piece.count}, DType::kF32);
      if (own_weights_) {
        q.blob->data = slice_weights_.back().view_bytes(at, bytes, {piece.count}, DType::kF32);
        copy_elements(q.blob->data, 0, p.blob->data, piece.param_offset, piece.count);  // the weights, broadcast
      } else {
        q.blob->data = p.blob->data.view_bytes(static_cast<size_t>(piece.param_offset) * sizeof(float), bytes,
                                               {piece.count}, DType::kF32);
      }
      q.lr_mult = p.lr_mult;
      q.decay_mult = p.decay_mult;
      q.learnable = Learnable::kYes;
      q.owner_layer = p.owner_layer;
      q.last_backward_layer = p.last_backward_layer;
      pieces_.push_back(std::move(q));
    }
  }
  first_piece_.push_back(pieces_.size());
  works_.resize(buckets_.size());
  if (!how_.in_place) {
    const SlotSizes sizes = slot_sizes(config_.shard, buckets_, world);
    int64_t largest_block = 0;
    for (size_t k = 0; k < sizes.wire.size(); ++k) {
      wire_.emplace_back(Shape{sizes.wire[k]}, wire, wire_device_);
      if (config_.compression != GradCompression::kNone) received_.emplace_back(Shape{sizes.block[k]}, wire, wire_device_);
      largest_block = std::max(largest_block, sizes.block[k]);
    }
    if (config_.compression != GradCompression::kNone) {
      gathered_ = Tensor({largest_block * world}, DType::kF32, wire_device_);
    }
  }

  // The gradients move from the net's flat buffer into the slots.
  std::vector<int> ids;
  for (const GradBucket& bucket : buckets_) ids.insert(ids.end(), bucket.params.begin(), bucket.params.end());
  net.hand_over_gradients(ids);
  for (int64_t n : how_.slots.slot_numel) slots_.emplace_back(Shape{n}, DType::kF32, net.device());
  occupant_.assign(slots_.size(), -1);
  state_.assign(buckets_.size(), BucketState::kIdle);
  layer_buckets_.resize(static_cast<size_t>(net.num_layers()));
  const std::vector<std::vector<int>> writers = bucket_layers(net, buckets_);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (int i : writers[b]) layer_buckets_[static_cast<size_t>(i)].push_back(b);
  }
  if (!how_.slots.reuse) {
    for (size_t b = 0; b < buckets_.size(); ++b) open(b);  // each its own slot, for good
  }

  // This rank's slices of the Solver's history: zero at the start, or what
  // restore() read from a snapshot of any layout.
  optimizer_ = make_optimizer(solver_.config().optimizer);
  optimizer_->prepare(pieces_);
  Optimizer& whole = solver_.optimizer();
  optimizer_->set_steps(whole.steps());
  std::map<std::string, Tensor> whole_history;
  for (auto& [name, t] : whole.state_tensors()) whole_history[name] = t;
  std::vector<const ShardPiece*> piece_list;  // parallel to pieces_
  for (const BucketShard& s : shards_) {
    for (const ShardPiece& pc : s.pieces) piece_list.push_back(&pc);
  }
  // state_tensors(): pieces in order, each with its slots in order.
  const size_t slots = optimizer_->slot_names().size();
  size_t i = 0;
  for (auto& [name, t] : optimizer_->state_tensors()) {
    const ShardPiece& piece = *piece_list.at(i++ / slots);
    auto it = whole_history.find(name);
    if (it == whole_history.end()) {
      fail<Error>("sharded data parallel: the solver's optimizer has no history '", name,
                  "' to take this rank's slice from (restore a snapshot before data parallel is set up, "
                  "and set it up once per solver)");
    }
    copy_elements(t, 0, it->second, piece.param_offset, piece.count);
  }
  // The whole-size history is no longer used: each rank keeps its slices only.
  whole.prepare({});
  // PARAMETERS: the slices hold the weights from now on; the net's whole
  // weights go until a layer needs them.
  if (config_.shard == ShardStage::kParameters) {
    gathering_ = std::make_unique<WeightGathering>(net, comm_, buckets_, shards_, slice_weights_, wire_device_);
  }
  install_hooks();
}

ShardedUpdate::~ShardedUpdate() {
  for (Net* n : hooked_) n->set_layer_pass_hooks({});
  // Operations still in flight (after an error) finish or fail inside their
  // own destructors, before the buffers they use go away.
  works_.clear();
  gathering_.reset();  // before pieces_, which it reads
}

void ShardedUpdate::install_hooks() {
  Net::LayerPassHooks hooks;
  if (how_.slots.reuse) {
    // A layer about to write a bucket's gradients: the bucket gets its slot.
    hooks.before_backward = [this](int layer) {
      for (size_t b : layer_buckets_[static_cast<size_t>(layer)]) {
        if (state_[b] == BucketState::kIdle) open(b);
      }
      if (gathering_) gathering_->before_backward(layer);
    };
  }
  if (gathering_) {
    WeightGathering* g = gathering_.get();
    hooks.before_forward = [g](int layer) { g->before_forward(layer); };
    hooks.after_forward = [g](int layer) { g->after_forward(layer); };
    hooks.after_backward = [g](int layer) { g->after_backward(layer); };
    if (!hooks.before_backward) hooks.before_backward = [g](int layer) { g->before_backward(layer); };
  }
  hooked_ = {&solver_.net()};
  solver_.net().set_layer_pass_hooks(std::move(hooks));
}

void ShardedUpdate::add_nets(const std::vector<Net*>& nets) {
  const Net::LayerPassHooks& hooks = solver_.net().layer_pass_hooks();
  for (Net* n : nets) {
    if (std::find(hooked_.begin(), hooked_.end(), n) != hooked_.end()) continue;
    STRATA_CHECK(n->num_layers() == solver_.net().num_layers(), "sharded data parallel: a net of ",
                 n->num_layers(), " layers runs the solver's ", solver_.net().num_layers());
    // Slots used in turn are bound from the solver's net's backward; copies
    // run only with several micro-batches, where every bucket keeps its slot.
    STRATA_CHECK(!how_.slots.reuse, "sharded data parallel: gradient slots used in turn need every backward "
                 "on the solver's net, but another net runs its layers (iter_size 1 with copies)");
    n->set_layer_pass_hooks(hooks);
    hooked_.push_back(n);
  }
}

Tensor ShardedUpdate::slot_view(size_t b) const {
  const int64_t n = comm_.world_size() * shards_[b].block;
  return slots_[static_cast<size_t>(how_.slots.slot_of[b])].view_bytes(0, static_cast<size_t>(n) * sizeof(float),
                                                                      {n}, DType::kF32);
}

void ShardedUpdate::open(size_t b) {
  const size_t s = static_cast<size_t>(how_.slots.slot_of[b]);
  const int before = occupant_[s];
  if (before >= 0 && static_cast<size_t>(before) != b) {
    const BucketState& other = state_[static_cast<size_t>(before)];
    STRATA_CHECK(other != BucketState::kFilling, "sharded data parallel: bucket ", b,
                 " needs gradient slot ", s, " while bucket ", before,
                 " still fills it (the slot plan expected that bucket to have left by now)");
    if (other == BucketState::kLaunched) complete(static_cast<size_t>(before));
  }
  Tensor whole = slot_view(b);
  whole.zero();  // the bucket's gradients and the padding up to world blocks
  std::vector<NetParam>& params = solver_.net().params();
  const GradBucket& bucket = buckets_[b];
  for (size_t k = 0; k < bucket.params.size(); ++k) {
    Tensor& diff = params[static_cast<size_t>(bucket.params[k])].blob->diff;
    diff = whole.view_bytes(static_cast<size_t>(bucket.offsets[k]) * sizeof(float), diff.nbytes(), diff.shape(),
                            DType::kF32);
  }
  occupant_[s] = static_cast<int>(b);
  state_[b] = BucketState::kFilling;
}

void ShardedUpdate::before_step() {
  if (how_.slots.reuse) return;  // each bucket's slot is zeroed when backward first reaches it
  for (Tensor& slot : slots_) slot.zero();
}

Tensor& ShardedUpdate::wire_buffer(size_t b) {
  // Stage 2: the slot's previous bucket must have arrived before its buffers are reused.
  if (b >= wire_.size() && works_[b - wire_.size()]) complete(b - wire_.size());
  Tensor& w = wire_[b % wire_.size()];
  w.resize({comm_.world_size() * shards_[b].block});  // within its capacity: no allocation
  if (!received_.empty()) received_[b % wire_.size()].resize({shards_[b].block});
  return w;
}

void ShardedUpdate::launch(size_t b) {
  if (state_[b] == BucketState::kIdle) open(b);  // no backward wrote it: zeros
  const bool compressed = config_.compression != GradCompression::kNone;
  if (how_.in_place) {
    works_[b] = comm_.reduce_scatter_async(slot_view(b), slice_grads_[b], ReduceOp::kAverage);
  } else {
    const std::vector<NetParam>& params = solver_.net().params();
    const GradBucket& bucket = buckets_[b];
    Tensor& buf = wire_buffer(b);
    const float scale = compressed ? 1.0f / static_cast<float>(comm_.world_size()) : 1.0f;
    for (size_t k = 0; k < bucket.params.size(); ++k) {
      encode_gradient(params[bucket.params[k]].blob->diff, scale, config_.compression, buf, bucket.offsets[k],
                      staging_);
    }
    Tensor& out = compressed ? received_[b % wire_.size()] : slice_grads_[b];
    works_[b] = comm_.reduce_scatter_async(buf, out, compressed ? ReduceOp::kSum : ReduceOp::kAverage);
  }
  state_[b] = BucketState::kLaunched;
}

void ShardedUpdate::complete(size_t b) {
  works_[b]->wait();
  works_[b].reset();
  if (config_.compression != GradCompression::kNone) {
    decode_gradient(received_[b % wire_.size()], 0, config_.compression, slice_grads_[b], staging_);
  }
  state_[b] = BucketState::kArrived;
}

void ShardedUpdate::finish_gradients() {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (works_[b]) complete(b);
  }
  // Next step: slots used in turn are bound again as backward reaches each
  // bucket; a slot of its own stays bound.
  for (BucketState& s : state_) s = how_.slots.reuse ? BucketState::kIdle : BucketState::kFilling;
}

Tensor ShardedUpdate::f32_gathered(size_t b) {
  const int64_t n = comm_.world_size() * shards_[b].block;
  if (how_.in_place) return slot_view(b);  // every bucket has arrived: the slots are free
  Tensor& t = config_.compression == GradCompression::kNone ? wire_[b % wire_.size()] : gathered_;
  t.resize({n});
  return t;
}

ShardMemory ShardedUpdate::memory(int rank) const {
  const int slots = static_cast<int>(optimizer_->slot_names().size());
  return memory_of(config_.shard, buckets_, solver_.net().params(), rank, comm_.world_size(), how_, slots);
}

size_t ShardedUpdate::slot_bytes() const {
  size_t n = 0;
  for (const Tensor& t : slots_) n += t.nbytes();
  return n;
}

bool ShardedUpdate::scale_check(float factor) {
  // The sum of squares matters only with clipping: one more pass over this
  // rank's slice on the CPU, none on a GPU (the fused check sums them).
  const GradientStats mine_check = scale_gradients_check(pieces_, factor);
  const bool finite = mine_check.finite;
  const double sq = mine_check.sum_squares;
  // Every rank's (sum of squares, finite) as bytes, summed in rank order, so
  // that every rank gets the same norm and verdict, in double.
  const double mine_values[2] = {sq, finite ? 1.0 : 0.0};
  Tensor mine({static_cast<int64_t>(sizeof mine_values)}, DType::kU8);
  std::memcpy(mine.raw_data(), mine_values, sizeof mine_values);
  Tensor all({static_cast<int64_t>(sizeof mine_values) * comm_.world_size()}, DType::kU8);
  const auto start = std::chrono::steady_clock::now();
  allgather_small(mine, all);
  comm_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  bool all_finite = true;
  sum_squares_ = 0.0;
  for (int r = 0; r < comm_.world_size(); ++r) {
    double v[2];
    std::memcpy(v, static_cast<const char*>(all.raw_data()) + r * sizeof v, sizeof v);
    sum_squares_ += v[0];
    all_finite = all_finite && v[1] != 0.0;
  }
  return all_finite;
}

double ShardedUpdate::update() {
  const double lr = solver_.current_lr();
  const double max_norm = solver_.config().clip_gradients;
  if (max_norm > 0.0) {
    // clip_gradients' rule with the global norm.
    const double norm = std::sqrt(sum_squares_);
    if (norm > max_norm) scale_gradients(pieces_, static_cast<float>(max_norm / (norm + 1e-6)));
  }
  std::vector<NetParam>& params = solver_.net().params();
  if (gathering_) {
    // The slices are the weights: updated there, and the net's whole copies
    // (gathered for a test or a snapshot) are stale now.
    optimizer_->update(pieces_, lr);
    solver_.optimizer().set_steps(optimizer_->steps());
    gathering_->release_all();
    return lr;
  }
  // The net's weights are the truth (a restore or a weights file may have
  // set them): the pieces view them, or hold a copy taken now.
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (size_t i = first_piece_[b]; i < first_piece_[b + 1]; ++i) {
      const ShardPiece& piece = shards_[b].pieces[i - first_piece_[b]];
      const Tensor& w = params[piece.param].blob->data;
      Tensor& mine = pieces_[i].blob->data;
      if (own_weights_) {
        copy_elements(mine, 0, w, piece.param_offset, piece.count);
      } else if (!mine.shares_storage_with(w)) {  // the weight was given new storage since
        mine = w.view_bytes(static_cast<size_t>(piece.param_offset) * sizeof(float), mine.nbytes(), mine.shape(),
                            DType::kF32);
      }
    }
  }
  optimizer_->update(pieces_, lr);
  solver_.optimizer().set_steps(optimizer_->steps());
  // Every rank's updated slices into every rank's weights.
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Tensor& mine = slice_block(b);
    Tensor all = f32_gathered(b);
    {
      const TimelineScope event("allgather", Timeline::on() ? "allgather weights, bucket " + std::to_string(b) : "");
      const auto start = std::chrono::steady_clock::now();
      comm_.allgather(mine, all);
      comm_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    const GradBucket& bucket = buckets_[b];
    for (size_t k = 0; k < bucket.params.size(); ++k) {
      Tensor& w = params[bucket.params[k]].blob->data;
      copy_elements(w, 0, all, bucket.offsets[k], w.numel());
    }
  }
  return lr;
}

const Tensor& ShardedUpdate::slice_block(size_t b) {
  if (own_weights_) return slice_weights_[b];
  // The pieces view the net's weights: the updated slice, packed into the
  // block its gradients (spent by now) took.
  Tensor& block = slice_grads_[b];
  for (size_t i = first_piece_[b]; i < first_piece_[b + 1]; ++i) {
    copy_elements(block, shards_[b].pieces[i - first_piece_[b]].slice_offset, pieces_[i].blob->data, 0,
                  pieces_[i].blob->numel());
  }
  return block;
}

void ShardedUpdate::gather_history(SolverState& state) {
  const std::vector<NetParam>& params = solver_.net().params();
  const std::vector<std::string> slots = optimizer_->slot_names();
  const bool root = comm_.rank() == 0;
  std::map<std::string, Tensor> mine;
  for (auto& [name, t] : optimizer_->state_tensors()) mine[name] = t;
  std::map<std::string, Tensor> whole;  // rank 0: "<param>.<slot>" -> the whole tensor
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const BucketShard& shard = shards_[b];
    Tensor block({shard.block}, DType::kF32, wire_device_);  // at snapshot points only
    for (const std::string& slot : slots) {
      for (const ShardPiece& piece : shard.pieces) {
        copy_elements(block, piece.slice_offset, mine.at(params[piece.param].name + "." + slot), 0, piece.count);
      }
      Tensor all = f32_gathered(b);
      comm_.gather(block, all, 0);
      if (!root) continue;
      const GradBucket& bucket = buckets_[b];
      for (size_t k = 0; k < bucket.params.size(); ++k) {
        const NetParam& p = params[bucket.params[k]];
        Tensor t(p.blob->shape());
        copy_elements(t, 0, all, bucket.offsets[k], t.numel());
        whole[p.name + "." + slot] = std::move(t);
      }
    }
  }
  state.optimizer_steps = optimizer_->steps();
  if (!root) return;
  // Parameter order, then slot order, as Optimizer::state_tensors lists them.
  state.history.clear();
  for (const NetParam& p : params) {
    if (!is_updated(p)) continue;
    for (const std::string& slot : slots) {
      const std::string key = p.name + "." + slot;
      auto it = whole.find(key);
      STRATA_CHECK(it != whole.end(), "sharded data parallel: no history '", key, "' gathered for the snapshot");
      state.history.emplace_back(key, it->second);
    }
  }
}

void ShardedUpdate::allgather_small(const Tensor& in, Tensor& out) {
  if (wire_device_.is_cpu()) return comm_.allgather(in, out);
  Tensor d_out(out.shape(), out.dtype(), wire_device_);
  comm_.allgather(in.to(wire_device_), d_out);
  out.copy_from(d_out);
}

}  // namespace strata::parallel
