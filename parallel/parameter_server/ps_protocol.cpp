#include "parallel/parameter_server/ps_protocol.h"

#include "framework/hash.h"
#include "framework/io/wire_format.h"

namespace strata::parallel {

const char* ps_op_name(uint32_t op) {
  if (op == kPsError) return "ERROR";
  const bool reply = (op & kPsReply) != 0;
  switch (static_cast<PsOp>(op & ~kPsReply)) {
    case PsOp::kInit: return reply ? "INIT|REPLY" : "INIT";
    case PsOp::kPull: return reply ? "PULL|REPLY" : "PULL";
    case PsOp::kPush: return reply ? "PUSH|REPLY" : "PUSH";
    case PsOp::kFetch: return reply ? "FETCH|REPLY" : "FETCH";
    case PsOp::kStats: return reply ? "STATS|REPLY" : "STATS";
    case PsOp::kBye: return reply ? "BYE|REPLY" : "BYE";
  }
  return "unknown";
}

uint64_t ps_token_hash(const std::string& token) { return fnv1a("strata parameter server\n" + token); }

void send_ps_header(Transport& t, int peer, const PsHeader& h) {
  char head[kPsHeaderBytes];
  wire::store_u32(head, kPsMagic);
  wire::store_u32(head + 4, h.op);
  wire::store_u64(head + 8, h.token);
  wire::store_u64(head + 16, static_cast<uint64_t>(h.a));
  wire::store_u64(head + 24, static_cast<uint64_t>(h.b));
  wire::store_u64(head + 32, h.bytes);
  t.send(peer, head, sizeof head);
}

void send_ps_message(Transport& t, int peer, const PsHeader& h, const void* payload) {
  send_ps_header(t, peer, h);
  if (h.bytes > 0) t.send(peer, payload, h.bytes);
}

void send_segments(Transport& t, int peer, const std::vector<Segment>& segs, size_t element_bytes,
                   const std::function<const void*(size_t k)>& at) {
  for (size_t k = 0; k < segs.size(); ++k) t.send(peer, at(k), static_cast<size_t>(segs[k].size()) * element_bytes);
}

void recv_segments(Transport& t, int peer, const std::vector<Segment>& segs, size_t element_bytes,
                   const std::function<void*(size_t k)>& at) {
  for (size_t k = 0; k < segs.size(); ++k) t.recv(peer, at(k), static_cast<size_t>(segs[k].size()) * element_bytes);
}

PsHeader recv_ps_header(Transport& t, int peer, uint64_t token, const std::string& peer_desc) {
  char head[kPsHeaderBytes];
  t.recv(peer, head, sizeof head);
  if (wire::load_u32(head) != kPsMagic) {
    fail<PsProtocolError>("parameter server: ", peer_desc, " sent a message that does not start with the "
                          "parameter-server magic (not a strata parameter-server peer, or a stream out of step)");
  }
  PsHeader h;
  h.op = wire::load_u32(head + 4);
  h.token = wire::load_u64(head + 8);
  h.a = static_cast<int64_t>(wire::load_u64(head + 16));
  h.b = static_cast<int64_t>(wire::load_u64(head + 24));
  h.bytes = wire::load_u64(head + 32);
  if (h.token != token) {
    fail<PsProtocolError>("parameter server: ", peer_desc, " sent a ", ps_op_name(h.op),
                          " message with the wrong token (a process of another job?); refused");
  }
  const uint32_t base = h.op & ~kPsReply;
  if (h.op != kPsError && (base < static_cast<uint32_t>(PsOp::kInit) || base > static_cast<uint32_t>(PsOp::kBye))) {
    fail<PsProtocolError>("parameter server: ", peer_desc, " sent a message of unknown kind ", h.op);
  }
  return h;
}

void expect_ps_bytes(const PsHeader& h, uint64_t expected, const std::string& peer_desc) {
  if (h.bytes != expected) {
    fail<PsProtocolError>("parameter server: ", peer_desc, " sent a ", ps_op_name(h.op), " message of ", h.bytes,
                          " bytes where the parameter layout gives ", expected, "; refused (do all ranks run "
                          "the same net and solver?)");
  }
}

}  // namespace strata::parallel
