#include "parallel/parameter_server/ps_server.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "framework/timeline.h"
#include "framework/byte_size.h"
#include "framework/error.h"
#include "framework/io/json.h"
#include "framework/solver/lr_policy.h"
#include "parallel/codec/gradient_codec.h"
#include "parallel/parameter_server/ps_protocol.h"

namespace strata::parallel {

namespace {

constexpr int kWorkerPeer = 1;  // the worker's rank in a pair transport

std::string seconds_text(std::chrono::milliseconds ms) {
  std::ostringstream o;
  o << static_cast<double>(ms.count()) / 1000.0 << " s";
  return o.str();
}

}  // namespace

ShardServer::ShardServer(const SolverConfig& config, const KeyLayout& layout, const ShardServerOptions& options)
    : config_(config), layout_(layout), o_(options), shard_(options.shard), count_(layout.count(options.shard)) {
  if (o_.mode == PsMode::kSync) o_.staleness = 0;
  if (o_.mode == PsMode::kSsp && o_.staleness == 0) o_.mode = PsMode::kSync;  // the same, by definition
  optimizer_ = make_optimizer(config_.optimizer);
  slots_ = static_cast<int>(optimizer_->slot_names().size());
  values_.assign(static_cast<size_t>(count_), 0.0f);
  if (shard_ == 0) statics_.assign(static_cast<size_t>(layout_.static_count()), 0.0f);
  for (const Segment& g : layout_.segments(shard_)) {
    const PsParam& p = layout_.params()[static_cast<size_t>(g.param)];
    NetParam np;
    np.name = p.name + "@" + std::to_string(g.begin);
    np.blob = std::make_shared<Blob>(Shape{g.size()});
    np.lr_mult = p.lr_mult;
    np.decay_mult = p.decay_mult;
    np.learnable = Learnable::kYes;
    seg_params_.push_back(std::move(np));
  }
  optimizer_->prepare(seg_params_);
  if (aggregates()) acc_.assign(static_cast<size_t>(count_), 0.0f);
  clock_.assign(static_cast<size_t>(o_.workers), 0);
  alive_.assign(static_cast<size_t>(o_.workers), 1);
  staleness_.assign(kStalenessBins, 0);
  scratch_.assign(static_cast<size_t>(count_), 0.0f);
}

uint64_t ShardServer::push_bytes() const {
  return static_cast<uint64_t>(count_) * (o_.compression == GradCompression::kNone ? 4 : 2);
}

uint64_t ShardServer::state_bytes() const {
  return static_cast<uint64_t>(count_) * 4 * static_cast<uint64_t>(1 + slots_) + statics_bytes();
}

void ShardServer::serve(int worker, Transport& t, const std::string& desc) {
  Timeline::name_this_thread(o_.who + " serving " + desc);
  std::vector<char> buf, out;  // this worker's message buffers, kept from one message to the next
  try {
    for (;;) {
      const PsHeader h = recv_ps_header(t, kWorkerPeer, o_.token, desc);
      if (h.op == static_cast<uint32_t>(PsOp::kBye)) {
        expect_ps_bytes(h, 0, desc);
        std::lock_guard<std::mutex> lock(mu_);
        alive_[static_cast<size_t>(worker)] = 0;
        complete_clocks();
        cv_.notify_all();
        return;
      }
      handle(worker, t, desc, h, buf, out);
    }
  } catch (const PsProtocolError& e) {
    lose(worker, desc, e.what());
    try {
      const std::string why = e.what();
      PsHeader err;
      err.op = kPsError;
      err.token = o_.token;
      err.bytes = std::min<uint64_t>(why.size(), kPsMaxText);
      send_ps_message(t, kWorkerPeer, err, why.data());
    } catch (const std::exception&) {
    }
  } catch (const std::exception& e) {
    // The pair transport names its ends rank 0 (this server) and rank 1 (the worker).
    lose(worker, desc, std::string("its connection failed (pair rank 1 is the worker): ") + e.what());
    // No answer: after a failed transfer the stream is out of step.
  }
}

void ShardServer::lose(int worker, const std::string& desc, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!alive_[static_cast<size_t>(worker)]) return;
  alive_[static_cast<size_t>(worker)] = 0;
  int left = 0;
  for (char a : alive_) left += a ? 1 : 0;
  lost_.push_back(desc + ": " + why);
  std::fprintf(stderr, "%s: lost %s: %s; going on with %d worker%s\n", o_.who.c_str(), desc.c_str(), why.c_str(),
               left, left == 1 ? "" : "s");
  std::fflush(stderr);
  complete_clocks();
  cv_.notify_all();
}

void ShardServer::handle(int worker, Transport& t, const std::string& desc, const PsHeader& h,
                         std::vector<char>& buf, std::vector<char>& out) {
  PsHeader reply;
  reply.op = h.op | kPsReply;
  reply.token = o_.token;
  out.clear();
  switch (static_cast<PsOp>(h.op)) {
    case PsOp::kInit: {
      if (worker != 0) fail<PsProtocolError>("parameter server: ", desc, " sent INIT, which only worker 0 may send");
      expect_ps_bytes(h, state_bytes(), desc);
      buf.resize(h.bytes);
      t.recv(kWorkerPeer, buf.data(), buf.size());
      std::lock_guard<std::mutex> lock(mu_);
      on_init(h, buf);
      bytes_in_ += h.bytes;
      cv_.notify_all();
      break;
    }
    case PsOp::kPull: {
      expect_ps_bytes(h, 0, desc);
      std::unique_lock<std::mutex> lock(mu_);
      wait_for_init(lock, desc);
      const bool statics = h.a != 0;
      out.resize(values_bytes() + (statics ? statics_bytes() : 0));
      std::memcpy(out.data(), values_.data(), values_bytes());
      if (statics) std::memcpy(out.data() + values_bytes(), statics_.data(), statics_bytes());
      reply.a = version_;
      reply.b = step();
      bytes_out_ += out.size();
      break;
    }
    case PsOp::kPush: {
      const TimelineScope event("ps", Timeline::on() ? "push of step " + std::to_string(h.a + 1) : std::string());
      expect_ps_bytes(h, push_bytes(), desc);
      buf.resize(h.bytes);
      const std::vector<Segment>& segs = layout_.segments(shard_);
      const size_t wire_bytes = o_.compression == GradCompression::kNone ? 4 : 2;
      recv_segments(t, kWorkerPeer, segs, wire_bytes,
                    [&](size_t k) { return buf.data() + static_cast<size_t>(segs[k].offset) * wire_bytes; });
      {
        std::unique_lock<std::mutex> lock(mu_);
        wait_for_init(lock, desc);
        bytes_in_ += h.bytes;
        on_push(worker, h, buf, desc, lock);
        out.resize(values_bytes());
        std::memcpy(out.data(), values_.data(), values_bytes());
        reply.a = version_;
        reply.b = step();
        bytes_out_ += out.size();
      }
      reply.bytes = out.size();
      send_ps_header(t, kWorkerPeer, reply);
      send_segments(t, kWorkerPeer, segs, 4,
                    [&](size_t k) { return out.data() + static_cast<size_t>(segs[k].offset) * 4; });
      return;
    }
    case PsOp::kFetch: {
      expect_ps_bytes(h, 0, desc);
      std::unique_lock<std::mutex> lock(mu_);
      wait_for_init(lock, desc);
      write_state(out);
      reply.a = step();
      reply.b = optimizer_->steps();
      break;
    }
    case PsOp::kStats: {
      expect_ps_bytes(h, 0, desc);
      const std::string s = stats_json();
      out.assign(s.begin(), s.end());
      break;
    }
    default:
      fail<PsProtocolError>("parameter server: ", desc, " sent a ", ps_op_name(h.op), " message, which a server "
                            "does not take");
  }
  reply.bytes = out.size();
  send_ps_message(t, kWorkerPeer, reply, out.data());
}

void ShardServer::wait_for_init(std::unique_lock<std::mutex>& lock, const std::string& desc) {
  if (!cv_.wait_for(lock, o_.timeout, [&] { return init_done_; })) {
    fail<TimeoutError>(o_.who, ": ", desc, " asked for weights, but worker 0 did not send the starting weights "
                       "within ", seconds_text(o_.timeout), " (STRATA_TIMEOUT_S); is worker 0 alive?");
  }
}

void ShardServer::on_init(const PsHeader& h, const std::vector<char>& payload) {
  const float* in = reinterpret_cast<const float*>(payload.data());
  std::memcpy(values_.data(), in, values_bytes());
  const std::vector<Segment>& segs = layout_.segments(shard_);
  for (size_t i = 0; i < segs.size(); ++i) {
    std::memcpy(seg_params_[i].blob->data.data<float>(), in + segs[i].offset, static_cast<size_t>(segs[i].size()) * 4);
  }
  const auto history = optimizer_->state_tensors();  // segment-major, then slot; shared storage
  for (size_t j = 0; j < history.size(); ++j) {
    const size_t i = j / static_cast<size_t>(slots_), k = j % static_cast<size_t>(slots_);
    Tensor slot = history[j].second;
    std::memcpy(slot.data<float>(), in + static_cast<int64_t>(k + 1) * count_ + segs[i].offset,
                static_cast<size_t>(segs[i].size()) * 4);
  }
  if (shard_ == 0) std::memcpy(statics_.data(), in + (1 + slots_) * count_, statics_bytes());
  optimizer_->set_steps(h.b);
  start_iter_ = h.a;
  init_done_ = true;
}

void ShardServer::write_state(std::vector<char>& out) const {
  out.resize(state_bytes());
  float* o = reinterpret_cast<float*>(out.data());
  std::memcpy(o, values_.data(), values_bytes());
  const std::vector<Segment>& segs = layout_.segments(shard_);
  const auto history = optimizer_->state_tensors();
  for (size_t j = 0; j < history.size(); ++j) {
    const size_t i = j / static_cast<size_t>(slots_), k = j % static_cast<size_t>(slots_);
    std::memcpy(o + static_cast<int64_t>(k + 1) * count_ + segs[i].offset, history[j].second.data<float>(),
                static_cast<size_t>(segs[i].size()) * 4);
  }
  if (shard_ == 0) std::memcpy(o + (1 + slots_) * count_, statics_.data(), statics_bytes());
}

void ShardServer::on_push(int worker, const PsHeader& h, const std::vector<char>& payload, const std::string& desc,
                          std::unique_lock<std::mutex>& lock) {
  const size_t w = static_cast<size_t>(worker);
  const int64_t c = h.a;
  if (c != clock_[w]) {
    fail<PsProtocolError>("parameter server: ", desc, " pushed the gradient of its step ", c + 1, " where step ",
                          clock_[w] + 1, " was due");
  }
  if (h.b < 0 || h.b > version_) {
    fail<PsProtocolError>("parameter server: ", desc, " pushed a gradient computed on weights of version ", h.b,
                          ", which this server has not served (it is at ", version_, ")");
  }
  if (o_.compression == GradCompression::kNone) {
    std::memcpy(scratch_.data(), payload.data(), values_bytes());
  } else {
    decode_gradients(payload.data(), count_, o_.compression, scratch_.data());
  }
  staleness_[static_cast<size_t>(std::min<int64_t>(version_ - h.b, kStalenessBins - 1))] += 1;
  clock_[w] = c + 1;
  ++pushes_;
  if (!aggregates()) {
    apply(scratch_.data(), 1.0 / o_.workers);
    if (o_.mode == PsMode::kAsync) return;
  } else {
    for (int64_t k = 0; k < count_; ++k) acc_[static_cast<size_t>(k)] += scratch_[static_cast<size_t>(k)];
    contributors_ += 1;
    complete_clocks();
  }
  cv_.notify_all();
  // SYNC: answer after this step is applied; SSP: once the slowest live
  // worker is at most τ steps behind this one.
  const int64_t tau = aggregates() ? 0 : o_.staleness;
  const auto ready = [&] {
    return !alive_[w] || (aggregates() ? completed_ >= c + 1 : slowest_clock() >= c + 1 - tau);
  };
  const auto limit = 2 * o_.timeout;
  if (!cv_.wait_for(lock, limit, ready)) {
    std::string waiting;
    const int64_t behind = aggregates() ? completed_ : c - tau;
    for (size_t v = 0; v < clock_.size(); ++v) {
      if (alive_[v] && clock_[v] <= behind) waiting += (waiting.empty() ? "" : ", ") + std::to_string(v);
    }
    fail<TimeoutError>(o_.who, ": ", desc, " waited ", seconds_text(limit), " for step ", behind + 1,
                       " of worker(s) ", waiting);
  }
  if (!alive_[w]) fail<PsProtocolError>(o_.who, ": ", desc, " was dropped while it waited");
}

int64_t ShardServer::step() const {
  return start_iter_ + (aggregates() ? completed_ : pushes_ / o_.workers);
}

int64_t ShardServer::slowest_clock() const {
  int64_t m = INT64_MAX;
  for (size_t v = 0; v < clock_.size(); ++v) {
    if (alive_[v]) m = std::min(m, clock_[v]);
  }
  return m;
}

void ShardServer::complete_clocks() {
  if (!aggregates()) return;
  for (size_t v = 0; v < clock_.size(); ++v) {
    if (alive_[v] && clock_[v] <= completed_) return;  // worker v has not pushed this step yet
  }
  if (contributors_ == 0) return;
  apply(acc_.data(), 1.0 / contributors_);
  std::fill(acc_.begin(), acc_.end(), 0.0f);
  contributors_ = 0;
  ++completed_;
}

void ShardServer::apply(const float* grad, double scale) {
  const std::vector<Segment>& segs = layout_.segments(shard_);
  const float s = static_cast<float>(scale);
  for (size_t i = 0; i < segs.size(); ++i) {
    float* d = seg_params_[i].blob->diff.data<float>();
    const float* g = grad + segs[i].offset;
    for (int64_t k = 0; k < segs[i].size(); ++k) d[k] = g[k] * s;
  }
  // The step this update belongs to sets the rate, as in Solver::step.
  const int64_t iter = start_iter_ + (aggregates() ? completed_ : (pushes_ - 1) / o_.workers);
  clip_gradients(seg_params_, config_.clip_gradients);
  optimizer_->update(seg_params_, learning_rate(config_.lr, iter));
  for (size_t i = 0; i < segs.size(); ++i) {
    std::memcpy(values_.data() + segs[i].offset, seg_params_[i].blob->data.data<float>(),
                static_cast<size_t>(segs[i].size()) * 4);
  }
  ++version_;
}

int ShardServer::lost_workers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(lost_.size());
}

std::string ShardServer::summary() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::ostringstream o;
  o << o_.who << ": " << pushes_ << " gradient" << (pushes_ == 1 ? "" : "s") << " applied in " << version_
    << " update" << (version_ == 1 ? "" : "s") << ", received " << format_bytes(bytes_in_) << ", sent "
    << format_bytes(bytes_out_) << ", staleness";
  for (int b = 0; b < kStalenessBins; ++b) {
    if (staleness_[static_cast<size_t>(b)] == 0) continue;
    o << ' ' << b << (b == kStalenessBins - 1 ? "+" : "") << ':' << staleness_[static_cast<size_t>(b)];
  }
  if (!lost_.empty()) o << ", " << lost_.size() << " worker" << (lost_.size() == 1 ? "" : "s") << " lost";
  return o.str();
}

std::string ShardServer::stats_json() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string s = "\"shard\":" + std::to_string(shard_) + ",\"pushes\":" + std::to_string(pushes_) +
                  ",\"updates\":" + std::to_string(version_) + ",\"bytes_in\":" + std::to_string(bytes_in_) +
                  ",\"bytes_out\":" + std::to_string(bytes_out_) + ",\"staleness\":[";
  for (int b = 0; b < kStalenessBins; ++b) s += (b ? "," : "") + std::to_string(staleness_[static_cast<size_t>(b)]);
  s += "],\"lost\":[";
  for (size_t i = 0; i < lost_.size(); ++i) {
    if (i) s += ",";
    json_quote_to(lost_[i], &s);
  }
  return s + "]";
}

}  // namespace strata::parallel
