// The pipeline's schedules (parallel/model_parallel/pipeline_schedule.h) and
// the batched transfers of a GPU pipeline (pipeline_transfers.h): every
// stage's batches checked against three models of NCCL's point-to-point
// rules (a transfer moves once both sides posted it; a group's transfers with
// one peer run as pairs, one after the other; a group first connects to every
// peer it has not yet talked to, in NCCL's round order, and only then moves
// data), for P stages, M micro-batches and both schedules, and the setup's
// shape announcements, without any process or GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "parallel/model_parallel/pipeline_plan.h"
#include "parallel/model_parallel/pipeline_schedule.h"
#include "parallel/model_parallel/pipeline_transfers.h"

namespace strata::parallel {
namespace {

// ---- schedules ----

TEST(PipelineSchedule, GPipeRunsAllForwardsThenAllBackwards) {
  EXPECT_EQ(ops_str(pipeline_ops(PipelineSchedule::kGPipe, 3, 1, 3)), "F0 F1 F2 B0 B1 B2");
  EXPECT_EQ(max_in_flight(pipeline_ops(PipelineSchedule::kGPipe, 3, 1, 5)), 5);
}

TEST(PipelineSchedule, OneFOneBKeepsAtMostPMinusStageMicroBatches) {
  EXPECT_EQ(ops_str(pipeline_ops(PipelineSchedule::kOneFOneB, 3, 0, 4)), "F0 F1 F2 B0 F3 B1 B2 B3");
  EXPECT_EQ(ops_str(pipeline_ops(PipelineSchedule::kOneFOneB, 3, 2, 4)), "F0 B0 F1 B1 F2 B2 F3 B3");
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(max_in_flight(pipeline_ops(PipelineSchedule::kOneFOneB, 4, s, 8)), 4 - s);
    EXPECT_EQ(max_in_flight(pipeline_ops(PipelineSchedule::kOneFOneB, 4, s, 2)), std::min(2, 4 - s));
  }
  EXPECT_DOUBLE_EQ(theoretical_bubble(4, 4), 3.0 / 7.0);
}

// ---- batched transfers (StageTransfers::kBatched, the GPU pipeline) ----

using Batches = std::vector<std::vector<StageTransfer>>;

// Runs every stage's batches under nccl's rules: a batch finishes once every
// transfer in it has been posted by the other side too, and between two
// stages each direction's transfers pair in posting order (no tags). ""
// when every stage gets through; else what is stuck. Fails the test when a
// pair carries different tensors (boundary, micro-batch or kind).
std::string simulate_rendezvous(const std::vector<Batches>& stages) {
  const int P = static_cast<int>(stages.size());
  // Per transfer: its sequence number on its (sender, receiver) channel.
  struct Posted {
    int batch;
    StageTransfer t;
  };
  std::map<std::tuple<int, int, int>, Posted> sends, recvs;  // (from, to, seq)
  std::vector<std::vector<std::vector<std::tuple<int, int, int>>>> keys(P);
  for (int s = 0; s < P; ++s) {
    std::map<std::pair<int, int>, int> count;
    keys[s].resize(stages[s].size());
    for (size_t b = 0; b < stages[s].size(); ++b) {
      for (const StageTransfer& t : stages[s][b]) {
        const bool send = t.kind == StageTransfer::Kind::kSend;
        const int from = send ? s : t.peer, to = send ? t.peer : s;
        const auto key = std::make_tuple(from, to, count[{from, to}]++);
        (send ? sends : recvs)[key] = Posted{static_cast<int>(b), t};
        keys[s][b].push_back(key);
      }
    }
  }
  for (const auto& [key, snd] : sends) {
    auto it = recvs.find(key);
    if (it == recvs.end()) {
      ADD_FAILURE() << "a send from stage " << std::get<0>(key) << " to " << std::get<1>(key) << " is never received";
      continue;
    }
    const StageTransfer& r = it->second.t;
    EXPECT_TRUE(r.boundary == snd.t.boundary && r.micro == snd.t.micro && r.gradient == snd.t.gradient)
        << "stage " << std::get<0>(key) << " -> " << std::get<1>(key) << " message " << std::get<2>(key)
        << ": sent boundary " << snd.t.boundary << " micro " << snd.t.micro << (snd.t.gradient ? " gradient" : "")
        << ", received as boundary " << r.boundary << " micro " << r.micro << (r.gradient ? " gradient" : "");
  }
  EXPECT_EQ(sends.size(), recvs.size());
  std::vector<size_t> at(P, 0);  // the batch each stage has posted and waits in
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < P; ++s) {
      if (at[s] == stages[s].size()) continue;
      bool done = true;
      for (const auto& key : keys[s][at[s]]) {
        const bool sending = std::get<0>(key) == s;
        const auto& other = sending ? recvs : sends;
        auto it = other.find(key);
        const int peer = sending ? std::get<1>(key) : std::get<0>(key);
        done = done && it != other.end() && static_cast<size_t>(it->second.batch) <= at[peer];
      }
      if (done) {
        ++at[s];
        progress = true;
      }
    }
  }
  std::string stuck;
  for (int s = 0; s < P; ++s) {
    if (at[s] < stages[s].size()) stuck += " stage " + std::to_string(s) + " in batch " + std::to_string(at[s]);
  }
  return stuck;
}

// P stages in a chain (two blobs on the link 0 -> 1), and labels from stage
// 0 straight to the last stage (no gradient back), listed first or last.
PipelinePlan chain_plan(int P, bool labels_first) {
  PipelinePlan plan;
  plan.stages = P;
  auto add = [&](int from, int to, bool grad) {
    PipelineBoundary b;
    b.from = from;
    b.to = to;
    b.carries_grad = grad;
    plan.boundaries.push_back(b);
  };
  if (labels_first && P > 2) add(0, P - 1, false);
  for (int s = 0; s + 1 < P; ++s) {
    add(s, s + 1, true);
    if (s == 0) add(0, 1, true);
  }
  if (!labels_first && P > 2) add(0, P - 1, false);
  return plan;
}

// A stricter model of nccl, the one that explains a hang on two GPUs: the
// transfers of one group run as pairs, one pair after the other. A group
// of stage s takes rounds d = 1 .. P-1, sending to (s + d) % P and
// receiving from (s - d) % P; within a round the k-th send and the k-th
// receive form a pair, whose halves progress independently; the next pair
// starts when both halves are done. A message moves while both of its ends
// are in their current pairs. `packed`: the messages of a batch to one peer
// travel as one (exchange_batch_transfers). "" when every stage gets
// through; else where each is stuck.
std::string simulate_nccl_pairs(const std::vector<Batches>& stages, bool packed) {
  const int P = static_cast<int>(stages.size());
  using Key = std::tuple<int, int, int>;  // (from, to, sequence number on that channel)
  struct Half {
    Key key;
    bool send;
  };
  // Per stage: its pairs in order, each with the batch it belongs to.
  std::vector<std::vector<std::vector<Half>>> pairs(P);
  for (int s = 0; s < P; ++s) {
    std::map<std::pair<int, int>, int> count;
    for (const auto& batch : stages[s]) {
      std::map<std::pair<bool, int>, std::vector<Key>> msgs;  // (send, peer) -> messages in order
      for (const StageTransfer& t : batch) {
        const bool send = t.kind == StageTransfer::Kind::kSend;
        auto& list = msgs[{send, t.peer}];
        if (packed && !list.empty()) continue;  // one message per peer and direction
        const int from = send ? s : t.peer, to = send ? t.peer : s;
        list.push_back(std::make_tuple(from, to, count[{from, to}]++));
      }
      for (int d = 1; d < P; ++d) {
        const auto& out = msgs[{true, (s + d) % P}];
        const auto& in = msgs[{false, (s - d + P) % P}];
        for (size_t k = 0; k < std::max(out.size(), in.size()); ++k) {
          std::vector<Half> pair;
          if (k < out.size()) pair.push_back({out[k], true});
          if (k < in.size()) pair.push_back({in[k], false});
          pairs[s].push_back(pair);
        }
      }
    }
  }
  std::vector<size_t> at(P, 0);
  std::set<Key> moved;
  auto active = [&](int s, const Key& key, bool send) {
    if (at[s] == pairs[s].size()) return false;
    for (const Half& h : pairs[s][at[s]]) {
      if (h.key == key && h.send == send) return true;
    }
    return false;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < P; ++s) {
      if (at[s] == pairs[s].size()) continue;
      for (const Half& h : pairs[s][at[s]]) {
        const int peer = h.send ? std::get<1>(h.key) : std::get<0>(h.key);
        if (!moved.count(h.key) && active(peer, h.key, !h.send)) moved.insert(h.key);
      }
      bool done = true;
      for (const Half& h : pairs[s][at[s]]) done = done && moved.count(h.key);
      if (done) {
        ++at[s];
        progress = true;
      }
    }
  }
  std::string stuck;
  for (int s = 0; s < P; ++s) {
    if (at[s] < pairs[s].size()) stuck += " stage " + std::to_string(s) + " at pair " + std::to_string(at[s]);
  }
  return stuck;
}

// What exchange_one_peer_at_a_time runs: one group per peer, the peers in
// ascending (or descending) stage order, the transfers with a peer in the
// order listed.
Batches one_peer_at_a_time(const std::vector<StageTransfer>& transfers, bool descending) {
  std::set<int> peers;
  for (const StageTransfer& t : transfers) peers.insert(t.peer);
  std::vector<int> ordered(peers.begin(), peers.end());
  if (descending) std::reverse(ordered.begin(), ordered.end());
  Batches out;
  for (int peer : ordered) {
    std::vector<StageTransfer> group;
    for (const StageTransfer& t : transfers) {
      if (t.peer == peer) group.push_back(t);
    }
    out.push_back(group);
  }
  return out;
}

// NCCL's connections (src/transport.cc, ncclTransportP2pSetup): the first
// group that holds a transfer from a to b connects that direction, and a
// group makes all its new connections before any of its data moves, in
// rounds d = 1 .. P-1 (the link to (s + d) % P and from (s - d) % P); in a
// round a rank posts its half of the handshake and waits for the peer's,
// which the peer posts when it reaches its own group that connects that
// link. Then the group's transfers move as in simulate_rendezvous. "" when
// every stage gets through; else where each is stuck.
std::string simulate_nccl_connect(const std::vector<Batches>& stages) {
  const int P = static_cast<int>(stages.size());
  using Key = std::tuple<int, int, int>;  // (from, to, sequence number on that link)
  using Link = std::pair<int, int>;       // (from, to)
  struct Step {
    std::vector<Link> connect;  // a handshake round: these links; else the group's data
    std::vector<Key> keys;
  };
  std::vector<std::vector<Step>> steps(P);
  std::vector<std::map<Link, size_t>> connects_at(P);  // stage -> link -> its step that connects it
  std::map<std::pair<int, Key>, size_t> posted_at;    // (stage, transfer) -> its step that posts it
  for (int s = 0; s < P; ++s) {
    std::map<Link, int> count;
    for (const auto& group : stages[s]) {
      std::map<int, std::vector<Link>> rounds;
      Step data;
      for (const StageTransfer& t : group) {
        const bool send = t.kind == StageTransfer::Kind::kSend;
        const Link link = send ? Link{s, t.peer} : Link{t.peer, s};
        if (!connects_at[s].count(link)) {
          auto& round = rounds[send ? (t.peer - s + P) % P : (s - t.peer + P) % P];
          if (std::find(round.begin(), round.end(), link) == round.end()) round.push_back(link);
        }
        data.keys.push_back(std::make_tuple(link.first, link.second, count[link]++));
      }
      for (const auto& [d, links] : rounds) {
        for (const Link& l : links) connects_at[s][l] = steps[s].size();
        steps[s].push_back({links, {}});
      }
      for (const Key& k : data.keys) posted_at[{s, k}] = steps[s].size();
      steps[s].push_back(data);
    }
  }
  std::vector<size_t> at(P, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < P; ++s) {
      if (at[s] == steps[s].size()) continue;
      const Step& step = steps[s][at[s]];
      bool done = true;
      for (const Link& l : step.connect) {
        const int peer = l.first == s ? l.second : l.first;
        const auto it = connects_at[peer].find(l);
        done = done && it != connects_at[peer].end() && at[peer] >= it->second;
      }
      for (const Key& k : step.keys) {
        const int peer = std::get<0>(k) == s ? std::get<1>(k) : std::get<0>(k);
        const auto it = posted_at.find({peer, k});
        done = done && it != posted_at.end() && at[peer] >= it->second;
      }
      if (done) {
        ++at[s];
        progress = true;
      }
    }
  }
  std::string stuck;
  for (int s = 0; s < P; ++s) {
    if (at[s] == steps[s].size()) continue;
    const Step& step = steps[s][at[s]];
    stuck += " stage " + std::to_string(s) + (step.connect.empty() ? " moving data" : " connecting");
  }
  return stuck;
}

// The setup (PipelineParallel::exchange_setup): each stage receives the
// shapes from the stages below that feed it, builds, sends its shapes to
// the stages above; then one int goes down every link (from the stages
// above, then to those below, in descending order). `grouped`: the
// announcements in one group each way and nothing sent down, as when it
// hung on three GPUs.
std::vector<Batches> setup_batches(const PipelinePlan& plan, bool grouped) {
  std::vector<Batches> stages;
  for (int s = 0; s < plan.stages; ++s) {
    std::vector<StageTransfer> in, out, from_above, to_below;
    for (int b : plan.incoming(s)) {
      in.push_back({StageTransfer::Kind::kRecv, false, b, 0, plan.boundaries[b].from});
      to_below.push_back({StageTransfer::Kind::kSend, true, b, 0, plan.boundaries[b].from});
    }
    for (int b : plan.outgoing(s)) {
      out.push_back({StageTransfer::Kind::kSend, false, b, 0, plan.boundaries[b].to});
      from_above.push_back({StageTransfer::Kind::kRecv, true, b, 0, plan.boundaries[b].to});
    }
    if (grouped) {
      stages.push_back({in, out});
      continue;
    }
    Batches all;
    for (const auto& [list, descending] : {std::make_pair(in, false), std::make_pair(out, false),
                                          std::make_pair(from_above, true), std::make_pair(to_below, true)}) {
      // exchange_one_peer_at_a_time: one message per peer and direction
      for (auto group : one_peer_at_a_time(list, descending)) {
        group.resize(1);
        all.push_back(group);
      }
    }
    stages.push_back(all);
  }
  return stages;
}

// Setup then the batches of a step, on every stage.
std::vector<Batches> after_setup(const PipelinePlan& plan, const std::vector<Batches>& step) {
  std::vector<Batches> out = setup_batches(plan, false);
  for (size_t s = 0; s < out.size(); ++s) out[s].insert(out[s].end(), step[s].begin(), step[s].end());
  return out;
}

TEST(PipelineTransfers, SetupInOneGroupHangsConnectingAsOnThreeGpus) {
  // On an H200 (2026-11-27), pp 3 with the labels going from stage 0 to
  // stage 2: every rank timed out in setup. Stage 2's group {receive from 1,
  // receive from 0} connects to stage 1 first; stage 1 connects to stage 2
  // only when it sends, after receiving from stage 0, whose group {send to
  // 1, send to 2} waits to connect to stage 2.
  const PipelinePlan plan = chain_plan(3, false);
  EXPECT_EQ(simulate_rendezvous(setup_batches(plan, true)), "");  // the looser model misses it
  EXPECT_NE(simulate_nccl_connect(setup_batches(plan, true)), "");
  EXPECT_EQ(simulate_nccl_connect(setup_batches(plan, false)), "");
}

TEST(PipelineTransfers, TwoTensorsToOnePeerUnpackedHangUnderNcclPairsAsOnTwoGpus) {
  // What two stages on an H100 did in their first step (GPIPE, 4
  // micro-batches, an activation and the labels on the link 0 -> 1):
  // stage 0's batch {send act 3, send label 3, receive gradient 0} ran as
  // the pairs (act 3 | gradient 0), (label 3 | -), so the label waited for
  // a gradient that stage 1 computes only once it has the label.
  const PipelinePlan plan = chain_plan(2, false);
  std::vector<Batches> gpipe;
  for (int s = 0; s < 2; ++s) {
    gpipe.push_back(stage_transfer_batches(plan, s, pipeline_ops(PipelineSchedule::kGPipe, 2, s, 4)));
  }
  EXPECT_NE(simulate_nccl_pairs(gpipe, false), "");
  EXPECT_EQ(simulate_nccl_pairs(gpipe, true), "");
}

TEST(PipelineTransfers, BatchesNeverDeadlockAndPairTheRightTensors) {
  for (PipelineSchedule schedule : {PipelineSchedule::kGPipe, PipelineSchedule::kOneFOneB}) {
    for (int P = 2; P <= 5; ++P) {
      for (int M = 1; M <= 8; ++M) {
        for (bool labels_first : {false, true}) {
          const PipelinePlan plan = chain_plan(P, labels_first);
          std::vector<Batches> train, test;
          for (int s = 0; s < P; ++s) {
            train.push_back(stage_transfer_batches(plan, s, pipeline_ops(schedule, P, s, M)));
            std::vector<PipeOp> forwards;
            for (int i = 0; i < M; ++i) forwards.push_back({PipeOpKind::kForward, i});
            test.push_back(stage_transfer_batches(plan, s, forwards));
          }
          SCOPED_TRACE("P " + std::to_string(P) + ", M " + std::to_string(M) + ", " +
                       (schedule == PipelineSchedule::kGPipe ? "GPIPE" : "ONE_F_ONE_B") +
                       (labels_first ? ", labels first" : ""));
          EXPECT_EQ(simulate_rendezvous(train), "");
          EXPECT_EQ(simulate_rendezvous(test), "");
          // And under nccl's pairs, as exchange_batch_transfers packs them.
          EXPECT_EQ(simulate_nccl_pairs(train, true), "");
          EXPECT_EQ(simulate_nccl_pairs(test, true), "");
          // And under nccl's connections, after the setup connected every link.
          EXPECT_EQ(simulate_nccl_connect(after_setup(plan, train)), "");
          EXPECT_EQ(simulate_nccl_connect(after_setup(plan, test)), "");
        }
      }
    }
  }
}

TEST(PipelineTransfers, OneTransferAtATimeWouldDeadlockUnder1F1B) {
  // What the batches avoid: each receive before its pass and each send
  // after it, one by one, as blocking calls. Stage 0 sends micro-batch 1's
  // activation while stage 1 sends micro-batch 0's gradient.
  const PipelinePlan plan = chain_plan(2, false);
  std::vector<Batches> one_by_one;
  for (int s = 0; s < 2; ++s) {
    Batches singles;
    for (const auto& batch : stage_transfer_batches(plan, s, pipeline_ops(PipelineSchedule::kOneFOneB, 2, s, 4))) {
      for (const StageTransfer& t : batch) singles.push_back({t});
    }
    one_by_one.push_back(singles);
  }
  EXPECT_NE(simulate_rendezvous(one_by_one), "");
}

TEST(PipelineTransfers, BatchesHoldTheLastPassesSendsAndTheNextPassesReceives) {
  const PipelinePlan plan = chain_plan(2, false);  // boundaries 0 and 1, both 0 -> 1
  const Batches b = stage_transfer_batches(plan, 0, pipeline_ops(PipelineSchedule::kOneFOneB, 2, 0, 2));
  // stage 0: F0 F1 B0 B1
  ASSERT_EQ(b.size(), 5u);
  EXPECT_TRUE(b[0].empty());  // F0 receives nothing
  ASSERT_EQ(b[2].size(), 4u);  // F1's two sends; B0's two gradients
  EXPECT_EQ(b[2][0].kind, StageTransfer::Kind::kSend);
  EXPECT_EQ(b[2][0].micro, 1);
  EXPECT_EQ(b[2][2].kind, StageTransfer::Kind::kRecv);
  EXPECT_TRUE(b[2][2].gradient);
  EXPECT_EQ(b[2][2].micro, 0);
  EXPECT_TRUE(b[4].empty());  // B1 sends nothing back on stage 0
}

}  // namespace
}  // namespace strata::parallel
