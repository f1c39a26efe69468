#include "parallel/parameter_server/key_layout.h"

#include <sstream>

#include "framework/byte_size.h"
#include "framework/error.h"
#include "framework/solver/optimizer.h"

namespace strata::parallel {

namespace {

std::string shape_text(const Shape& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? " " : "") + std::to_string(s[i]);
  return t + "]";
}

std::string param_text(const PsParam& p) {
  std::ostringstream o;
  o << p.name << ' ' << shape_text(p.shape);
  if (!p.updated) o << " (not updated)";
  else if (p.lr_mult != 1.0f || p.decay_mult != 1.0f) o << " lr_mult " << p.lr_mult << " decay_mult " << p.decay_mult;
  return o.str();
}

bool same(const PsParam& a, const PsParam& b) {
  return a.name == b.name && a.shape == b.shape && a.updated == b.updated && a.lr_mult == b.lr_mult &&
         a.decay_mult == b.decay_mult;
}

}  // namespace

int64_t PsParam::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<PsParam> ps_params_of(const Net& net) {
  std::vector<PsParam> out;
  for (const NetParam& p : net.params()) {
    PsParam q;
    q.name = p.name;
    q.shape = p.blob->shape();
    q.updated = is_updated(p);
    q.lr_mult = p.lr_mult;
    q.decay_mult = p.decay_mult;
    out.push_back(std::move(q));
  }
  return out;
}

// name <tab> updated <tab> lr_mult <tab> decay_mult <tab> dims...
std::string serialize_ps_params(const std::vector<PsParam>& params) {
  std::ostringstream o;
  o.precision(9);
  for (const PsParam& p : params) {
    o << p.name << '\t' << (p.updated ? 1 : 0) << '\t' << p.lr_mult << '\t' << p.decay_mult;
    for (int64_t d : p.shape) o << '\t' << d;
    o << '\n';
  }
  return o.str();
}

std::vector<PsParam> parse_ps_params(const std::string& text) {
  std::vector<PsParam> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    PsParam p;
    int updated = 0;
    if (!std::getline(f, p.name, '\t') || !(f >> updated >> p.lr_mult >> p.decay_mult)) {
      fail<IoError>("parameter server: malformed parameter table line ", out.size() + 1, ": '", line, "'");
    }
    p.updated = updated != 0;
    int64_t d;
    while (f >> d) {
      if (d < 0) fail<IoError>("parameter server: negative dimension in the parameter table: '", line, "'");
      p.shape.push_back(d);
    }
    out.push_back(std::move(p));
  }
  return out;
}

std::string first_ps_param_difference(const std::vector<PsParam>& mine, const std::vector<PsParam>& first) {
  const size_t n = std::min(mine.size(), first.size());
  for (size_t i = 0; i < n; ++i) {
    if (!same(mine[i], first[i])) {
      return "parameter " + std::to_string(i) + ": " + param_text(mine[i]) + " here, " + param_text(first[i]) +
             " on worker 0";
    }
  }
  if (mine.size() != first.size()) {
    return std::to_string(mine.size()) + " parameters here, " + std::to_string(first.size()) + " on worker 0" +
           (mine.size() > n ? " (first extra here: " + param_text(mine[n]) + ")"
                            : " (first missing here: " + param_text(first[n]) + ")");
  }
  return "";
}

KeyLayout::KeyLayout(std::vector<PsParam> params, int shards) : params_(std::move(params)) {
  if (shards < 1) fail<ConfigError>("parameter server: at least one shard is needed, got ", shards);
  updated_.resize(static_cast<size_t>(shards));
  for (const PsParam& p : params_) {
    if (p.updated) total_ += p.numel();
  }
  int64_t start = 0;       // this parameter's first element in the updated space
  int64_t static_off = 0;
  for (int i = 0; i < static_cast<int>(params_.size()); ++i) {
    const PsParam& p = params_[static_cast<size_t>(i)];
    const int64_t n = p.numel();
    if (!p.updated) {
      static_.push_back({i, 0, n, static_off});
      static_off += n;
      continue;
    }
    for (int s = 0; s < shards; ++s) {
      const int64_t lo = total_ * s / shards, hi = total_ * (s + 1) / shards;
      const int64_t b = std::max(lo, start), e = std::min(hi, start + n);
      if (b >= e) continue;
      updated_[static_cast<size_t>(s)].push_back({i, b - start, e - start, b - lo});
    }
    start += n;
  }
}

int64_t KeyLayout::count(int shard) const {
  const std::vector<Segment>& s = updated_.at(static_cast<size_t>(shard));
  return s.empty() ? 0 : s.back().offset + s.back().size();
}

int64_t KeyLayout::static_count() const { return static_.empty() ? 0 : static_.back().offset + static_.back().size(); }

std::string KeyLayout::describe(int shard) const {
  std::string s;
  for (const Segment& g : segments(shard)) {
    const PsParam& p = params_[static_cast<size_t>(g.param)];
    s += (s.empty() ? "" : ", ") + p.name;
    if (g.size() != p.numel()) s += "[" + std::to_string(g.begin) + ":" + std::to_string(g.end) + "]";
  }
  if (s.empty()) s = "nothing";
  s += " (" + format_bytes(static_cast<size_t>(count(shard)) * sizeof(float)) + ")";
  if (shard == 0 && !static_.empty()) {
    s += "; and " + std::to_string(static_.size()) + " parameter" + (static_.size() == 1 ? "" : "s") +
         " no server updates, for the start and snapshots";
  }
  return s;
}

void gather_segments(Net& net, const std::vector<Segment>& segs, ParamPart part, Tensor& buffer) {
  std::vector<NetParam>& params = net.params();
  for (const Segment& g : segs) {
    const Blob& b = *params.at(static_cast<size_t>(g.param)).blob;
    copy_elements(buffer, g.offset, part == ParamPart::kValue ? b.data : b.diff, g.begin, g.size());
  }
}

void scatter_segments(const Tensor& buffer, const std::vector<Segment>& segs, ParamPart part, Net& net) {
  std::vector<NetParam>& params = net.params();
  for (const Segment& g : segs) {
    Blob& b = *params.at(static_cast<size_t>(g.param)).blob;
    copy_elements(part == ParamPart::kValue ? b.data : b.diff, g.begin, buffer, g.offset, g.size());
  }
}

}  // namespace strata::parallel
