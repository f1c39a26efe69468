#include "parallel/model_parallel/pipeline.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "framework/error.h"
#include "framework/config/net_spec.h"

#include "parallel/model_parallel/pipeline_internal.h"

namespace strata::parallel {

using namespace pipeline_internal;

namespace {

// The scalar outputs of a net, in output order (as the Solver reports them).
NamedValues net_scalar_outputs(Net& net) {
  NamedValues out;
  for (const std::string& name : net.output_names()) {
    const Blob& b = net.blob(name);
    if (b.numel() == 1) out.emplace_back(name, b.data.to(Device::cpu()).data<float>()[0]);
  }
  return out;
}

}  // namespace

// TEST phase: stages build in order, as in exchange_setup, from the TEST
// plan; forward only, so no gradient flags.
void PipelineParallel::setup_test(const SolverConfig& config, const NetOptions& train_options) {
  ConfigNode root;
  std::string base_dir;
  if (!test_net_config(config, root, base_dir)) return;
  test_plan_ = plan_test_pipeline(root, plan_);
  NetOptions o = train_options;
  o.phase = Phase::kTest;
  o.base_dir = base_dir;
  std::map<std::string, Shape> shapes;
  if (!test_plan_.sources(stage_).empty()) {
    test_feeder_ = std::make_unique<Net>(stage_feeder_config(test_plan_, stage_), o);
    for (int i : test_plan_.sources(stage_)) {
      for (const auto& t : test_plan_.layers[i].tops) shapes[t] = test_feeder_->blob(t).shape();
    }
  }
  std::string received;
  const std::vector<int> incoming = test_plan_.incoming(stage_);
  std::vector<Tensor> announced(incoming.size());
  std::vector<PeerTransfer> recvs;
  for (size_t k = 0; k < incoming.size(); ++k) {
    announced[k] = Tensor({4 + kMaxDims}, DType::kI32);
    recvs.push_back({PeerTransfer::Kind::kRecv, &announced[k], test_plan_.boundaries[incoming[k]].from, kTestSetupTag});
  }
  if (!recvs.empty()) {  // one exchange per sender, as exchange_setup
    const auto what = [] { return std::string("TEST-phase setup: receive the shapes of the incoming blobs"); };
    waiting_for(what, [&] { exchange_one_peer_at_a_time(act_, recvs, PeerOrder::kAscending); });
  }
  for (size_t k = 0; k < incoming.size(); ++k) {
    const int b = incoming[k];
    PipelineBoundary& pb = test_plan_.boundaries[b];
    const int32_t* v = announced[k].data<int32_t>();
    if (v[0] != name_hash(pb.blob)) {
      fail<ConfigError>("pipeline stage ", stage_, ": TEST boundary #", b, " should carry blob '", pb.blob,
                        "' from stage ", pb.from, ", but stage ", pb.from, " sent a different blob");
    }
    pb.shape.assign(v + 2, v + 2 + v[1]);
    pb.carries_grad = false;
    shapes[pb.blob] = pb.shape;
    received += std::string(received.empty() ? "" : "; ") + "'" + pb.blob + "' " + shape_str(pb.shape) +
                " from stage " + std::to_string(pb.from);
  }
  try {
    test_net_ = std::make_unique<Net>(stage_compute_config(test_plan_, stage_, shapes), o);
  } catch (const ShapeError& e) {
    if (received.empty()) throw;
    throw ShapeError(std::string(e.what()) + "\n  (TEST net of pipeline stage " + std::to_string(stage_) + ", receiving " +
                     received + "; the stages disagree on the shape at this boundary)");
  }
  test_net_->share_params_from(solver_->net());
  const std::vector<int> outgoing = test_plan_.outgoing(stage_);
  std::vector<Tensor> announcements;
  announcements.reserve(outgoing.size());
  std::vector<PeerTransfer> sends;
  for (int b : outgoing) {
    PipelineBoundary& pb = test_plan_.boundaries[b];
    pb.shape = test_net_->blob(pb.blob).shape();
    pb.carries_grad = false;
    if (static_cast<int>(pb.shape.size()) > kMaxDims) {
      fail<ShapeError>("pipeline TEST boundary '", pb.blob, "' has ", pb.shape.size(), " dimensions; at most ",
                       kMaxDims);
    }
    Tensor d({4 + kMaxDims}, DType::kI32);
    d.zero();
    int32_t* v = d.data<int32_t>();
    v[0] = name_hash(pb.blob);
    v[1] = static_cast<int32_t>(pb.shape.size());
    for (size_t k = 0; k < pb.shape.size(); ++k) v[2 + k] = static_cast<int32_t>(pb.shape[k]);
    announcements.push_back(d);
    sends.push_back({PeerTransfer::Kind::kSend, &announcements.back(), pb.to, kTestSetupTag});
  }
  if (!sends.empty()) {
    const auto what = [] { return std::string("TEST-phase setup: send the shapes of the outgoing blobs"); };
    waiting_for(what, [&] { exchange_one_peer_at_a_time(act_, sends, PeerOrder::kAscending); });
  }
}

// kBatched: the TEST pass's sends of the batch just run and its receives
// for the next, in one exchange (pipeline_transfers.h; forward only).
void PipelineParallel::exchange_test_batch(const std::vector<StageTransfer>& batch) {
  std::vector<PeerTransfer> sends, recvs;
  for (const StageTransfer& t : batch) {
    const PipelineBoundary& pb = test_plan_.boundaries[static_cast<size_t>(t.boundary)];
    Blob& blob = test_net_->blob(pb.blob);
    if (t.kind == StageTransfer::Kind::kSend) {
      sends.push_back({PeerTransfer::Kind::kSend, &blob.data, t.peer, kTestTagBase + t.boundary});
      continue;
    }
    blob.resize(pb.shape);
    recvs.push_back({PeerTransfer::Kind::kRecv, &blob.data, t.peer, kTestTagBase + t.boundary});
  }
  if (sends.empty() && recvs.empty()) return;
  std::string peers;
  for (const StageTransfer& t : batch) peers += (peers.empty() ? "" : ", ") + std::to_string(t.peer);
  const auto what = [&] {
    return "TEST phase: the exchange of " + std::to_string(sends.size()) + " send(s) and " +
           std::to_string(recvs.size()) + " receive(s) with stage(s) " + peers;
  };
  waiting_for(what, [&] { exchange_batch_transfers(act_, std::move(sends), recvs); });
}

// test_iter batches through the stages, forward only; the last stage's
// scalar outputs, averaged, reach every stage (and are averaged over dp).
NamedValues PipelineParallel::run_test() {
  const int64_t batches = solver_->config().test_iter;
  const bool last = stage_ == plan_.stages - 1;
  NamedValues sums;
  std::vector<std::vector<StageTransfer>> transfers;
  if (batched_) {
    std::vector<PipeOp> passes;
    for (int64_t it = 0; it < batches; ++it) passes.push_back({PipeOpKind::kForward, static_cast<int>(it)});
    transfers = stage_transfer_batches(test_plan_, stage_, passes);
  }
  for (int64_t it = 0; it < batches; ++it) {
    // Before feeding: the batch sends the previous pass's blobs (labels
    // among them) before the feeder overwrites them.
    if (batched_) exchange_test_batch(transfers[static_cast<size_t>(it)]);
    if (test_feeder_) {
      test_feeder_->forward();
      for (int i : test_plan_.sources(stage_)) {
        for (const auto& top : test_plan_.layers[i].tops) {
          Blob& dst = test_net_->blob(top);
          const Blob& src = test_feeder_->blob(top);
          dst.resize(src.shape());
          dst.data.copy_from(src.data);
        }
      }
    }
    for (int b : batched_ ? std::vector<int>() : test_plan_.incoming(stage_)) {
      const PipelineBoundary& pb = test_plan_.boundaries[b];
      Blob& blob = test_net_->blob(pb.blob);
      blob.resize(pb.shape);
      const auto what = [&] {
        return "TEST phase: receive '" + pb.blob + "' of batch " + std::to_string(it) + " from stage " +
               std::to_string(pb.from);
      };
      waiting_for(what, [&] { act_.recv(blob.data, pb.from, kTestTagBase + b); });
    }
    test_net_->forward();
    for (int b : test_plan_.outgoing(stage_)) {
      const PipelineBoundary& pb = test_plan_.boundaries[b];
      const Blob& blob = test_net_->blob(pb.blob);
      if (blob.shape() != pb.shape) {
        fail<ShapeError>("pipeline TEST boundary '", pb.blob, "' (stage ", pb.from, " -> ", pb.to,
                         ") was set up as ", shape_str(pb.shape), " but batch ", it, " has ",
                         shape_str(blob.shape()), "; every TEST batch must have the same shape");
      }
      if (!batched_) act_sender_->send(blob.data.clone(), pb.to, kTestTagBase + b);
    }
    if (!last) continue;
    const NamedValues now = net_scalar_outputs(*test_net_);
    if (sums.empty()) {
      sums = now;
    } else {
      for (size_t k = 0; k < sums.size() && k < now.size(); ++k) sums[k].second += now[k].second;
    }
  }
  if (batched_) {
    exchange_test_batch(transfers.back());
  } else {
    const auto what = [] { return std::string("TEST phase: the queued sends to the next stages"); };
    waiting_for(what, [&] { act_sender_->flush(); });
  }
  // The last stage's results to every stage, as text ("name\tvalue\n"...).
  std::string text;
  if (last) {
    char buf[64];
    for (const auto& [name, sum] : sums) {
      std::snprintf(buf, sizeof buf, "%.17g", batches > 0 ? sum / static_cast<double>(batches) : 0.0);
      text += name + "\t" + buf + "\n";
    }
  }
  Tensor len({1}, DType::kI32);
  len.data<int32_t>()[0] = static_cast<int32_t>(text.size());
  Tensor body;
  const auto what = [&] {
    return "TEST phase: the results, broadcast from the last stage (" + std::to_string(plan_.stages - 1) + ")";
  };
  waiting_for(what, [&] {
    act_.broadcast(len, plan_.stages - 1);
    body = Tensor({std::max<int32_t>(1, len.data<int32_t>()[0])}, DType::kU8);
    if (last && !text.empty()) std::memcpy(body.raw_data(), text.data(), text.size());
    act_.broadcast(body, plan_.stages - 1);
  });
  text.assign(static_cast<const char*>(body.raw_data()), static_cast<size_t>(len.data<int32_t>()[0]));
  NamedValues out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t tab = text.find('\t', pos), nl = text.find('\n', pos);
    STRATA_CHECK(tab != std::string::npos && nl != std::string::npos && tab < nl, "bad pipeline test result");
    out.emplace_back(text.substr(pos, tab - pos), std::strtod(text.c_str() + tab + 1, nullptr));
    pos = nl + 1;
  }
  return out;  // averaged over the dp group by DataParallel::reduce_outputs
}

}  // namespace strata::parallel
