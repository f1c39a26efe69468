// Which server holds which parameters: the key space of a parameter server.
//
// The parameters the solver updates (learnable, lr_mult > 0), concatenated in
// the net's order, form the "updated space" of U floats; shard s of S holds
// the range [s*U/S, (s+1)*U/S) of it, so every shard moves the same bytes
// per step, and a large tensor is cut into ranges where a boundary falls:
//
//   updated space:  | conv1.weight | conv1.bias | ip1.weight ............ | ip1.bias |
//   shards (S=2):   |<------------ shard 0 ------------>|<------ shard 1 ------>|
//                                       ip1.weight[0:1800] ^ ip1.weight[1800:4000]
//
// The other parameters (frozen ones, BatchNorm statistics) never change on a
// server; shard 0 keeps them so that every worker starts from worker 0's
// values and snapshots hold them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/net.h"
#include "framework/tensor.h"

namespace strata::parallel {

struct PsParam {
  std::string name;
  Shape shape;
  bool updated = false;  // the solver updates it (optimizer::is_updated)
  float lr_mult = 1.0f;
  float decay_mult = 1.0f;
  int64_t numel() const;
};

// The net's parameters, in order.
std::vector<PsParam> ps_params_of(const Net& net);
// One line per parameter, and back (IoError on a malformed table).
std::string serialize_ps_params(const std::vector<PsParam>& params);
std::vector<PsParam> parse_ps_params(const std::string& text);
// "" when equal; else the first difference, for a worker whose net is not
// worker 0's: "parameter 3: conv2.weight [16 8 3 3] here, conv2.weight [16 8 5 5] on worker 0".
std::string first_ps_param_difference(const std::vector<PsParam>& mine, const std::vector<PsParam>& first);

// A stretch of one parameter's elements held by a shard.
struct Segment {
  int param = 0;        // index into params()
  int64_t begin = 0;    // element range within the parameter
  int64_t end = 0;
  int64_t offset = 0;   // where it starts in the shard's buffer
  int64_t size() const { return end - begin; }
};

class KeyLayout {
 public:
  KeyLayout(std::vector<PsParam> params, int shards);

  int shards() const { return static_cast<int>(updated_.size()); }
  const std::vector<PsParam>& params() const { return params_; }
  // The updated parameters' segments of a shard, in order, and their total.
  const std::vector<Segment>& segments(int shard) const { return updated_.at(shard); }
  int64_t count(int shard) const;
  // The parameters no server updates, whole, laid out one after another (shard 0 keeps them).
  const std::vector<Segment>& static_segments() const { return static_; }
  int64_t static_count() const;
  int64_t updated_total() const { return total_; }

  // "conv1.weight, conv1.bias, ip1.weight[0:1800] (7.2 KB)"
  std::string describe(int shard) const;

 private:
  std::vector<PsParam> params_;
  std::vector<std::vector<Segment>> updated_;
  std::vector<Segment> static_;
  int64_t total_ = 0;
};

// Which of a parameter's tensors to move.
enum class ParamPart { kValue, kGradient };

// Copies the segments' elements of the net's parameters (host or device)
// into a host f32 buffer (at each segment's offset), and back.
void gather_segments(Net& net, const std::vector<Segment>& segs, ParamPart part, Tensor& buffer);
void scatter_segments(const Tensor& buffer, const std::vector<Segment>& segs, ParamPart part, Net& net);

}  // namespace strata::parallel
