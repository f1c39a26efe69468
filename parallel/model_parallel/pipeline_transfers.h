// The transfers of a pipeline stage's step grouped into batches, for
// backends whose sends wait for the receiver (nccl on GPUs).
//
// With such sends, a stage cannot send and then receive one by one: under
// 1F1B, stage 0 sends micro-batch 1's activation while stage 1 sends
// micro-batch 0's gradient, and each waits for the other to receive. The
// CPU pipeline sends from a background thread instead; on a GPU the
// communicator runs one operation at a time, so the sends of one pass and
// the receives of the next go out together, as one batch
// (Communicator::exchange, one NCCL group), before that pass (Megatron's
// send_forward_recv_backward and its kin):
//
//   ops:      F0        F1        B0        B1
//   batches: [R0] F0 [S0 R1] F1 [S1 R0'] B0 [S0' R1'] B1 [S1']
//   (R/S: receive/send of an activation, ' a gradient)
//
// Batch i holds the sends of ops[i-1] and the receives of ops[i]; the last
// batch the sends of the last op. Within a batch, sends come first in op
// order and boundary order, then the receives, in the order the pipeline
// posts them; between two stages each direction carries only activations
// (lower -> higher) or only gradients, in micro-batch and boundary order on
// both sides, so the tag-less in-order matching of nccl pairs them right.
// A stage of the TEST phase (forward only) uses the same batches over its
// forward ops. tests/parallel_pipeline_schedule_test.cpp checks that the
// batches of every stage never deadlock under "a transfer finishes once both
// sides have posted it" nor under NCCL's pairs (exchange_batch_transfers
// below), and pair the same tensors, for both schedules.
#pragma once

#include <vector>

#include "framework/communicator.h"
#include "parallel/model_parallel/pipeline_plan.h"
#include "parallel/model_parallel/pipeline_schedule.h"

namespace strata::parallel {

struct StageTransfer {
  enum class Kind { kSend, kRecv };
  Kind kind = Kind::kSend;
  bool gradient = false;  // else an activation
  int boundary = 0;       // index into plan.boundaries
  int micro = 0;
  int peer = 0;           // the other stage
};

// batches.size() == ops.size() + 1. A boundary's gradient travels only when
// the boundary carries_grad (known after setup).
std::vector<std::vector<StageTransfer>> stage_transfer_batches(const PipelinePlan& plan, int stage,
                                                               const std::vector<PipeOp>& ops);

// Runs one batch as one exchange on `comm`: the sends first, then the
// receives, at most one message per peer and direction: the tensors a batch
// sends to one peer travel packed into one u8 buffer (in the order listed),
// and those it receives from one peer are unpacked from one. NCCL runs the
// sends and receives of a group with one peer as pairs, one pair after the
// other, so with two sends and a receive the second send would wait for the
// receive; when the peer can send that only after it got the second send
// (GPipe: stage 0 sends micro-batch 3's activation and label and receives
// micro-batch 0's gradient, which stage 1 computes from both), two stages
// on GPUs hung in the first step. One message each way is one pair, whose
// halves progress independently. A send whose tensor a receive of the same
// batch overwrites (a blob received and passed on) goes from a copy.
//
// A batch may hold several peers, so every link it uses must already be
// connected (see exchange_one_peer_at_a_time): PipelineParallel's setup
// connects every link both ways before the first step.
void exchange_batch_transfers(Communicator& comm, std::vector<PeerTransfer> sends,
                              const std::vector<PeerTransfer>& recvs);

// Runs `transfers` as one exchange per peer (exchange_batch_transfers of that
// peer's sends and receives), the peers in `order` of stage number.
//
// Why one peer at a time where stages wait on each other (setup): NCCL
// connects two ranks in a direction the first time a group holds a transfer
// that way, and a group makes all its new connections, peer after peer,
// before any of its data moves. With three stages on GPUs (labels from
// stage 0 straight to stage 2), stage 2's setup group {receive from 1,
// receive from 0} waited to connect to stage 1, which connects only when it
// sends, after it has received from stage 0, whose group {send to 1, send to
// 2} waited to connect to stage 2: every rank timed out in setup (H200,
// 2026-11-27). Receiving from the stages below in ascending order and then
// sending to those above in ascending order, every exchange between stages
// a < b can be ordered by (a, b) over the whole pipeline, so none waits in a
// cycle; the links downward are connected the mirrored way (descending).
// tests/parallel_pipeline_schedule_test.cpp checks setup and steps under a
// model of these connections.
enum class PeerOrder { kAscending, kDescending };
void exchange_one_peer_at_a_time(Communicator& comm, const std::vector<PeerTransfer>& transfers, PeerOrder order);

}  // namespace strata::parallel
