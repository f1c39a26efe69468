// The messages between a parameter-server worker and a server, over one
// Transport of two ranks per (server, worker) pair (pair rank 0 the server,
// 1 the worker), so that each pair is served by a thread of its own.
//
//   header (40 bytes, little-endian): magic "SPS1" | op u32 | token u64 | a i64 | b i64 | payload bytes u64
//   payload: f32 values (gradients in the wire dtype), or text
//
//   worker                         server
//   INIT  (worker 0 only) ──────►  values, history, statics: the starting point
//   PULL  ──────────────────────►
//         ◄──────────────────────  PULL|REPLY  a = version, b = step; values (+ statics on shard 0)
//   PUSH  a = clock, b = version ►  (SYNC/SSP: held until the step's bound allows)
//         ◄──────────────────────  PUSH|REPLY  a = version, b = step; values
//         (both payloads in pieces, one transfer per segment of the shard:
//          see send_segments below)
//   FETCH (a snapshot) ─────────►
//         ◄──────────────────────  FETCH|REPLY a = step, b = optimizer steps; values, history, statics
//   STATS ──────────────────────►
//         ◄──────────────────────  STATS|REPLY JSON members
//   BYE   ──────────────────────►  (no reply; the worker is done)
//         ◄──────────────────────  ERROR  text: the server refused the last message
//
// Every length is checked against the one the layout gives before anything
// is allocated or read; a wrong magic, token, op or length is a
// PsProtocolError, and the server drops that worker (and only it).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "parallel/parameter_server/key_layout.h"
#include "parallel/socket/socket.h"
#include "parallel/transport/transport.h"

namespace strata::parallel {

class PsProtocolError : public NetworkError {
 public:
  using NetworkError::NetworkError;
};

enum class PsOp : uint32_t {
  kInit = 1,
  kPull = 2,
  kPush = 3,
  kFetch = 4,
  kStats = 5,
  kBye = 6,
};
inline constexpr uint32_t kPsReply = 0x100;  // or-ed into the op of a reply
inline constexpr uint32_t kPsError = 0x1ff;  // a server's refusal, with its reason
inline constexpr uint32_t kPsMagic = 0x31535053;  // "SPS1"
inline constexpr size_t kPsHeaderBytes = 40;
// No text payload (an error, statistics) is longer.
inline constexpr uint64_t kPsMaxText = 1 << 20;

const char* ps_op_name(uint32_t op);  // "PUSH", "PULL|REPLY", ...

struct PsHeader {
  uint32_t op = 0;
  uint64_t token = 0;
  int64_t a = 0;
  int64_t b = 0;
  uint64_t bytes = 0;
};

// The token every message carries: a hash of the run's STRATA_TOKEN.
uint64_t ps_token_hash(const std::string& token);

void send_ps_message(Transport& t, int peer, const PsHeader& h, const void* payload);
// The header alone, for a payload sent in pieces.
void send_ps_header(Transport& t, int peer, const PsHeader& h);

// A push's gradients and the weights of its reply travel as one transfer per
// segment of the shard, in the layout's order, of segment size x
// `element_bytes` (4 for f32, 2 for a compressed gradient). Both ends cut
// them so (a transport may match transfers by size: libfabric's), and a
// worker whose parameters live in host memory sends its gradients from, and
// takes the weights into, the parameters themselves (the flat gradient
// buffer's views), with no message buffer between. `at(k)` is where segment
// k's elements are.
void send_segments(Transport& t, int peer, const std::vector<Segment>& segs, size_t element_bytes,
                   const std::function<const void*(size_t k)>& at);
void recv_segments(Transport& t, int peer, const std::vector<Segment>& segs, size_t element_bytes,
                   const std::function<void*(size_t k)>& at);
// Receives a header and checks its magic and token. `peer_desc` ("worker 2
// (rank 2 on host-a)") names the sender in errors.
PsHeader recv_ps_header(Transport& t, int peer, uint64_t token, const std::string& peer_desc);
// Refuses a payload whose length is not the expected one, before reading it.
void expect_ps_bytes(const PsHeader& h, uint64_t expected, const std::string& peer_desc);

}  // namespace strata::parallel
