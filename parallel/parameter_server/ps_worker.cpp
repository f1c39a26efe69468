#include "framework/timeline.h"
#include "parallel/parameter_server/ps_worker.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "framework/error.h"
#include "framework/solver/lr_policy.h"
#include "parallel/codec/gradient_codec.h"
#include "parallel/transport/tcp_transport.h"
#include "parallel/transport/transport_select.h"

namespace strata::parallel {

namespace {

constexpr int kServerPeer = 0;
using Clock = std::chrono::steady_clock;

}  // namespace

std::unique_ptr<Transport> connect_ps_pair(Store& store, int shard, int worker, int pair_rank, const RankEnv& env,
                                           TransportChoice transport) {
  TransportSetup setup;
  setup.choice = transport;
  setup.hostname = env.hostname;
  // Toward the master, as the allreduce transport does; in one process (tests) on loopback.
  setup.advertise_host =
      env.master_host.empty() ? "127.0.0.1" : local_address_towards(env.master_host, env.master_port);
  setup.prefix = "strata/ps/" + std::to_string(shard) + "/" + std::to_string(worker);
  return connect_transport(store, pair_rank, 2, env.timeout, setup);
}

ParameterServerWorker::ParameterServerWorker(Solver& solver, Store& store, const ParameterServerConfig& config,
                                             const PsRoles& roles, int worker, const RankEnv& env)
    : solver_(solver), config_(config), roles_(roles), worker_(worker), env_(env), token_(ps_token_hash(env.token)) {
  if (solver_.config().iter_size < 1) fail<ConfigError>("parameter server: iter_size must be at least 1");
  if (config_.placement != PsPlacement::kCentral && solver_.config().clip_gradients > 0) {
    fail<ConfigError>("parameter server: clip_gradients needs the norm over all parameters, which no shard of a ",
                      ps_placement_name(config_.placement), " server sees; use --ps-placement CENTRAL (one "
                      "server) or remove clip_gradients");
  }
  const std::vector<PsParam> mine = ps_params_of(solver_.net());
  if (worker_ == 0) {
    store.set(kPsTableKey, serialize_ps_params(mine));
  } else {
    const std::vector<PsParam> first = parse_ps_params(store.get(kPsTableKey));
    const std::string diff = first_ps_param_difference(mine, first);
    if (!diff.empty()) {
      fail<ConfigError>("parameter server: worker ", worker_, " built a different net than worker 0 (", diff,
                        "); every worker must run the same net and solver");
    }
  }
  layout_ = std::make_unique<KeyLayout>(mine, roles_.shards);
  // Parameters in host memory are sent from and received into where they
  // are; a GPU's go through a host buffer per shard.
  in_place_ = true;
  for (const NetParam& p : solver_.net().params()) {
    in_place_ = in_place_ && p.blob->data.device().is_cpu() && p.blob->diff.device().is_cpu();
  }
  for (int s = 0; s < roles_.shards; ++s) {
    links_.push_back(connect_ps_pair(store, s, worker_, 1, env_, config_.transport));
    if (!in_place_) values_.emplace_back(Shape{std::max<int64_t>(1, layout_->count(s))});
    if (config_.compression != GradCompression::kNone) wire_.emplace_back(static_cast<size_t>(layout_->count(s)) * 2);
  }
  version_.assign(static_cast<size_t>(roles_.shards), 0);
  shards_of_param_.resize(layout_->params().size());
  params_in_shard_.assign(static_cast<size_t>(roles_.shards), 0);
  for (int s = 0; s < roles_.shards; ++s) {
    for (const Segment& g : layout_->segments(s)) {
      shards_of_param_[static_cast<size_t>(g.param)].push_back(s);
      params_in_shard_[static_cast<size_t>(s)] += 1;  // a parameter appears in a shard's segments once
    }
  }
  pending_ = params_in_shard_;
  pushed_.assign(static_cast<size_t>(roles_.shards), 0);
  early_push_ = solver_.config().iter_size == 1 && solver_.loss_scaler() == nullptr &&
                solver_.config().nonfinite == NonFiniteAction::kStop;
  try {
    if (worker_ == 0) send_init();
    pull_start();
  } catch (const NetworkError&) {
    broken_ = true;
    throw;
  }
  solver_.attach(*this);
}

ParameterServerWorker::~ParameterServerWorker() {
  solver_.detach(*this);
  if (broken_) return;
  for (size_t s = 0; s < links_.size(); ++s) {
    try {
      PsHeader bye;
      bye.op = static_cast<uint32_t>(PsOp::kBye);
      bye.token = token_;
      send_ps_message(*links_[s], kServerPeer, bye, nullptr);
    } catch (const std::exception&) {
    }
  }
}

std::string ParameterServerWorker::link_description() const {
  return links_.empty() ? std::string("no links") : describe_transport(*links_.front());
}

std::string ParameterServerWorker::shard_desc(int s) const {
  const int rank = roles_.rank_of_shard(s);
  return "server " + std::to_string(s) + " (rank " + std::to_string(rank) + ")";
}

std::string ParameterServerWorker::ownership_lines() const {
  std::string out;
  for (int s = 0; s < roles_.shards; ++s) {
    out += (s ? "\n" : "") + ("  " + shard_desc(s) + ": " + layout_->describe(s));
  }
  return out;
}

PsHeader ParameterServerWorker::recv_reply(int s, PsOp op, uint64_t bytes) {
  try {
    const PsHeader h = recv_ps_header(*links_[static_cast<size_t>(s)], kServerPeer, token_, shard_desc(s));
    if (h.op == kPsError) {
      if (h.bytes > kPsMaxText) fail<PsProtocolError>("parameter server: ", shard_desc(s), " sent an oversized error");
      std::string why(h.bytes, '\0');
      links_[static_cast<size_t>(s)]->recv(kServerPeer, why.data(), why.size());
      fail<PsProtocolError>(shard_desc(s), " refused worker ", worker_, ": ", why);
    }
    if (h.op != (static_cast<uint32_t>(op) | kPsReply)) {
      fail<PsProtocolError>("parameter server: ", shard_desc(s), " answered with ", ps_op_name(h.op), " where ",
                            ps_op_name(static_cast<uint32_t>(op) | kPsReply), " was due");
    }
    expect_ps_bytes(h, bytes, shard_desc(s));
    return h;
  } catch (const NetworkError& e) {
    broken_ = true;
    if (dynamic_cast<const PsProtocolError*>(&e)) throw;
    fail<NetworkError>("parameter server: worker ", worker_, " lost ", shard_desc(s), ": ", e.what());
  }
}

void ParameterServerWorker::send_init() {
  Net& net = solver_.net();
  const std::vector<std::string> slots = solver_.optimizer().slot_names();
  std::map<std::string, Tensor> history;
  for (auto& [name, t] : solver_.optimizer().state_tensors()) history[name] = t;
  for (int s = 0; s < roles_.shards; ++s) {
    const int64_t n = layout_->count(s);
    const int64_t statics = s == 0 ? layout_->static_count() : 0;
    Tensor payload(Shape{std::max<int64_t>(1, n * static_cast<int64_t>(1 + slots.size()) + statics)});
    gather_segments(net, layout_->segments(s), ParamPart::kValue, payload);
    for (size_t k = 0; k < slots.size(); ++k) {
      for (const Segment& g : layout_->segments(s)) {
        const std::string key = layout_->params()[static_cast<size_t>(g.param)].name + "." + slots[k];
        auto it = history.find(key);
        if (it == history.end()) fail<Error>("parameter server: no optimizer history '", key, "' on worker 0");
        copy_elements(payload, static_cast<int64_t>(k + 1) * n + g.offset, it->second, g.begin, g.size());
      }
    }
    if (statics > 0) {
      std::vector<Segment> st = layout_->static_segments();
      for (Segment& g : st) g.offset += n * static_cast<int64_t>(1 + slots.size());
      gather_segments(net, st, ParamPart::kValue, payload);
    }
    PsHeader h;
    h.op = static_cast<uint32_t>(PsOp::kInit);
    h.token = token_;
    h.a = solver_.iter();
    h.b = solver_.optimizer().steps();
    h.bytes = static_cast<uint64_t>(n * static_cast<int64_t>(1 + slots.size()) + statics) * 4;
    send_ps_message(*links_[static_cast<size_t>(s)], kServerPeer, h, payload.data<float>());
  }
  for (int s = 0; s < roles_.shards; ++s) recv_reply(s, PsOp::kInit, 0);
}

void ParameterServerWorker::pull_start() {
  Net& net = solver_.net();
  for (int s = 0; s < roles_.shards; ++s) {
    PsHeader h;
    h.op = static_cast<uint32_t>(PsOp::kPull);
    h.token = token_;
    h.a = 1;  // with the parameters no server updates (shard 0 has them)
    send_ps_message(*links_[static_cast<size_t>(s)], kServerPeer, h, nullptr);
  }
  for (int s = 0; s < roles_.shards; ++s) {
    const int64_t n = layout_->count(s);
    const int64_t statics = s == 0 ? layout_->static_count() : 0;
    const PsHeader h = recv_reply(s, PsOp::kPull, static_cast<uint64_t>(n + statics) * 4);
    Tensor buf(Shape{std::max<int64_t>(1, n + statics)});
    if (h.bytes > 0) links_[static_cast<size_t>(s)]->recv(kServerPeer, buf.data<float>(), h.bytes);
    scatter_segments(buf, layout_->segments(s), ParamPart::kValue, net);
    if (statics > 0) {
      std::vector<Segment> st = layout_->static_segments();
      for (Segment& g : st) g.offset += n;
      scatter_segments(buf, st, ParamPart::kValue, net);
    }
    version_[static_cast<size_t>(s)] = h.a;
    if (s == 0) server_step_ = h.b;
  }
}

void ParameterServerWorker::before_step() {
  pending_ = params_in_shard_;
  std::fill(pushed_.begin(), pushed_.end(), 0);
}

void ParameterServerWorker::on_grad_ready(int param_index) {
  if (!solver_.in_last_pass()) return;
  const auto t0 = Clock::now();
  for (int s : shards_of_param_.at(static_cast<size_t>(param_index))) {
    if (--pending_[static_cast<size_t>(s)] == 0) pushed_[static_cast<size_t>(s)] = push(s, true) ? 1 : 0;
  }
  comm_wait_ += std::chrono::duration<double>(Clock::now() - t0).count();
}

bool ParameterServerWorker::push(int s, bool only_if_finite) {
  const TimelineScope event("ps", Timeline::on() ? "push to server " + std::to_string(s) : std::string());
  const size_t i = static_cast<size_t>(s);
  const int64_t n = layout_->count(s);
  const std::vector<Segment>& segs = layout_->segments(s);
  if (!in_place_) gather_segments(solver_.net(), segs, ParamPart::kGradient, values_[i]);
  const auto grads = [&](size_t k) -> const float* {
    if (!in_place_) return values_[i].data<float>() + segs[k].offset;
    return solver_.net().params()[static_cast<size_t>(segs[k].param)].blob->diff.data<float>() + segs[k].begin;
  };
  if (only_if_finite) {
    for (size_t k = 0; k < segs.size(); ++k) {
      const float* g = grads(k);
      for (int64_t e = 0; e < segs[k].size(); ++e) {
        if (!std::isfinite(g[e])) return false;  // the Solver's check names it and stops
      }
    }
  }
  PsHeader h;
  h.op = static_cast<uint32_t>(PsOp::kPush);
  h.token = token_;
  h.a = clock_;
  h.b = version_[i];
  const bool compressed = config_.compression != GradCompression::kNone;
  const size_t wire_bytes = compressed ? 2 : 4;
  h.bytes = static_cast<uint64_t>(n) * wire_bytes;
  if (compressed) {
    for (size_t k = 0; k < segs.size(); ++k) {
      encode_gradients(grads(k), segs[k].size(), 1.0f, config_.compression,
                       wire_[i].data() + static_cast<size_t>(segs[k].offset) * 2);
    }
  }
  try {
    send_ps_header(*links_[i], kServerPeer, h);
    send_segments(*links_[i], kServerPeer, segs, wire_bytes, [&](size_t k) -> const void* {
      return compressed ? static_cast<const void*>(wire_[i].data() + static_cast<size_t>(segs[k].offset) * 2)
                        : static_cast<const void*>(grads(k));
    });
  } catch (const NetworkError& e) {
    broken_ = true;
    fail<NetworkError>("parameter server: worker ", worker_, " lost ", shard_desc(s), " during step ",
                       solver_.iter() + 1, ": ", e.what());
  }
  return true;
}

double ParameterServerWorker::run_update(Net& net) {
  const auto t0 = Clock::now();
  const double lr = learning_rate(solver_.config().lr, config_.mode == PsMode::kAsync ? server_step_ : solver_.iter());
  // Shards whose gradients did not leave during backward go now.
  for (int s = 0; s < roles_.shards; ++s) {
    if (!pushed_[static_cast<size_t>(s)]) push(s, false);
  }
  try {
    for (int s = 0; s < roles_.shards; ++s) {
      const size_t i = static_cast<size_t>(s);
      const int64_t n = layout_->count(s);
      const TimelineScope event("ps", Timeline::on() ? "pull from server " + std::to_string(s) : std::string());
      const PsHeader h = recv_reply(s, PsOp::kPush, static_cast<uint64_t>(n) * 4);
      const std::vector<Segment>& segs = layout_->segments(s);
      recv_segments(*links_[i], kServerPeer, segs, 4, [&](size_t k) -> void* {
        if (!in_place_) return values_[i].data<float>() + segs[k].offset;
        return net.params()[static_cast<size_t>(segs[k].param)].blob->data.data<float>() + segs[k].begin;
      });
      if (!in_place_) scatter_segments(values_[i], segs, ParamPart::kValue, net);
      version_[i] = h.a;
      if (s == 0) server_step_ = h.b;
    }
  } catch (const PsProtocolError&) {
    broken_ = true;
    throw;
  } catch (const NetworkError& e) {
    broken_ = true;
    if (std::string(e.what()).find("parameter server: worker") == 0) throw;
    fail<NetworkError>("parameter server: worker ", worker_, " lost a server during step ", solver_.iter() + 1,
                       ": ", e.what());
  }
  ++clock_;
  comm_wait_ += std::chrono::duration<double>(Clock::now() - t0).count();
  return lr;
}

int64_t ParameterServerWorker::next_iteration(int64_t iter) {
  return config_.mode == PsMode::kAsync ? server_step_ : iter + 1;
}

void ParameterServerWorker::snapshot_state(SolverState& state) {
  if (worker_ != 0) return;
  Net& net = solver_.net();
  const std::vector<std::string> slots = solver_.optimizer().slot_names();
  // Whole tensors, as one process's optimizer keeps them, assembled from the shards.
  std::vector<std::pair<std::string, Tensor>> history;
  std::map<std::string, size_t> index;
  for (const PsParam& p : layout_->params()) {
    if (!p.updated) continue;
    for (const std::string& slot : slots) {
      index[p.name + "." + slot] = history.size();
      history.emplace_back(p.name + "." + slot, Tensor(p.shape));
    }
  }
  for (int s = 0; s < roles_.shards; ++s) {
    PsHeader h;
    h.op = static_cast<uint32_t>(PsOp::kFetch);
    h.token = token_;
    send_ps_message(*links_[static_cast<size_t>(s)], kServerPeer, h, nullptr);
  }
  int64_t steps = 0;
  for (int s = 0; s < roles_.shards; ++s) {
    const int64_t n = layout_->count(s);
    const int64_t statics = s == 0 ? layout_->static_count() : 0;
    const int64_t total = n * static_cast<int64_t>(1 + slots.size()) + statics;
    const PsHeader h = recv_reply(s, PsOp::kFetch, static_cast<uint64_t>(total) * 4);
    Tensor buf(Shape{std::max<int64_t>(1, total)});
    if (total > 0) links_[static_cast<size_t>(s)]->recv(kServerPeer, buf.data<float>(), static_cast<size_t>(total) * 4);
    scatter_segments(buf, layout_->segments(s), ParamPart::kValue, net);
    for (size_t k = 0; k < slots.size(); ++k) {
      for (const Segment& g : layout_->segments(s)) {
        Tensor& dst = history[index.at(layout_->params()[static_cast<size_t>(g.param)].name + "." + slots[k])].second;
        copy_elements(dst, g.begin, buf, static_cast<int64_t>(k + 1) * n + g.offset, g.size());
      }
    }
    // The statics on shard 0 are worker 0's values at the start; its own
    // (BatchNorm statistics kept up to date) go into the file.
    if (s == 0) steps = h.b;
  }
  state.history = std::move(history);
  state.optimizer_steps = steps;
}

std::string ParameterServerWorker::stats_fields() {
  std::string out = "\"iter\":" + std::to_string(solver_.iter()) + ",\"shards\":[";
  for (int s = 0; s < roles_.shards; ++s) {
    PsHeader h;
    h.op = static_cast<uint32_t>(PsOp::kStats);
    h.token = token_;
    send_ps_message(*links_[static_cast<size_t>(s)], kServerPeer, h, nullptr);
    const PsHeader r = recv_ps_header(*links_[static_cast<size_t>(s)], kServerPeer, token_, shard_desc(s));
    if (r.op != (static_cast<uint32_t>(PsOp::kStats) | kPsReply) || r.bytes > kPsMaxText) {
      fail<PsProtocolError>("parameter server: ", shard_desc(s), " answered STATS with ", ps_op_name(r.op), " of ",
                            r.bytes, " bytes");
    }
    std::string text(r.bytes, '\0');
    links_[static_cast<size_t>(s)]->recv(kServerPeer, text.data(), text.size());
    out += (s ? ",{" : "{") + text + "}";
  }
  return out + "]";
}

double ParameterServerWorker::take_comm_wait_seconds() {
  const double w = comm_wait_;
  comm_wait_ = 0.0;
  return w;
}

}  // namespace strata::parallel
