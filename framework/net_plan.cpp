// Net: the blobs' memory by lifetime (BlobMemory::kByLifetime).
//
// Steps (number_steps): the forwards in layer order, then the backwards from
// the last layer down, each recompute range's forwards again just before the
// backward of its last layer. A blob's value lives from the forward that
// writes it to its last read: the forwards that take it, the recomputes that
// take it, and the backwards of the layers that declare they read it
// (Layer::backward_reads). A value made inside a recompute range lives
// twice, each time in a place of its own: from its forward to its last read
// before the range's recompute, and from its recompute to its last read
// after (the range's own backwards); the blob is bound to the first place
// before its forward and to the second before its recompute. A gradient
// lives from the first backward that writes it (a consumer that propagates
// to it) to the backward of the last layer that reads it (its producer). The
// values and gradients are then placed in one arena by
// framework/plan/lifetime_placement.h, and each blob's tensors become views
// of their places.
//
// Scratch (what a layer needs inside one call: Layer::scratch_bytes) gets a
// place for each call of each layer, alive for that call's step alone, so a
// convolution's large workspace takes the bytes that are free at its step
// (early in forward or late in backward, most of the arena) instead of
// adding to the arena's peak. The Net hands a layer its place for the call
// only (Net::ScratchBinding); a call that needs more than its place (a
// reshape outside the net's) takes the shared buffer.
//
// Kept whole, as under kSeparate: the tops of layers without bottoms (data
// and Input, which code outside the net may write), the outputs (read after
// the step: losses, accuracies, a loss's probabilities), blobs named by
// keep_blobs(), and a gradient some layer reads that nothing writes (it must
// stay zero). Gradients nobody writes or reads share one place for the
// whole run: reshape() still sizes them.
#include <algorithm>
#include <array>
#include <climits>
#include <limits>
#include <memory>
#include <set>
#include <sstream>

#include "framework/byte_size.h"
#include "framework/error.h"
#include "framework/memory_plan.h"
#include "framework/net.h"
#include "framework/plan/lifetime_placement.h"

namespace strata {
namespace {

// Where cuDNN, cuBLAS and the widest SIMD loads want their operands.
constexpr size_t kArenaAlignment = 256;

struct PlannedTensor {
  Tensor* tensor = nullptr;
  Lifetime life;
  // A value made inside a recompute range has two places: kFirst is where
  // its producer's first forward writes it, kSecond where its recompute does.
  // kScratch: a layer call's scratch place (Net::scratch_places_).
  enum class Pass { kOnly, kFirst, kSecond, kScratch } pass = Pass::kOnly;
  int producer = -1;
  enum class Kind { kValue, kGradient, kKept, kScratch } kind = Kind::kValue;
};

// The step with the most bytes alive, and what they are, for the report.
void describe_peak_step(const std::vector<PlannedTensor>& planned, size_t idle_bytes, int num_steps,
                        const std::vector<std::string>& step_names, BlobPlanReport& r) {
  std::vector<std::array<size_t, 4>> alive(static_cast<size_t>(num_steps), std::array<size_t, 4>{0, 0, 0, 0});
  for (const PlannedTensor& p : planned) {
    for (int t = p.life.first; t <= p.life.last && t < num_steps; ++t) {
      alive[static_cast<size_t>(t)][static_cast<size_t>(p.kind)] += p.life.bytes;
    }
  }
  size_t best = 0;
  int best_step = -1;
  for (int t = 0; t < num_steps; ++t) {
    const auto& a = alive[static_cast<size_t>(t)];
    const size_t total = a[0] + a[1] + a[2] + a[3] + idle_bytes;
    if (best_step < 0 || total > best) {
      best = total;
      best_step = t;
    }
  }
  if (best_step < 0) return;
  const auto& a = alive[static_cast<size_t>(best_step)];
  r.peak_step = step_names.at(static_cast<size_t>(best_step));
  r.peak_values = a[0];
  r.peak_gradients = a[1] + idle_bytes;
  r.peak_kept = a[2];
  r.peak_scratch = a[3];
}

}  // namespace

std::string BlobPlanReport::str() const {
  std::ostringstream os;
  os << (forward_only ? "values by lifetime (forward only): "
                     : "values, gradients and what layers keep for backward, by lifetime: ")
     << format_bytes(arena_bytes) << " in one arena for " << planned << " of them (" << format_bytes(separate_bytes) << " each on its own, at most " << format_bytes(peak_bytes)
     << " alive at once); " << kept << " blob(s) kept whole";
  if (recomputed) os << "; " << recomputed << " value(s) recomputed in backward";
  if (scratch_calls) {
    os << "; the scratch of " << scratch_calls << " layer call(s) placed by step (the largest "
       << format_bytes(scratch_bytes) << ")";
  }
  if (!host.empty()) os << "; one arena with the " << host << " (the two run one after another)";
  if (!peak_step.empty()) {
    os << "; at the busiest step, " << peak_step << ": values " << format_bytes(peak_values);
    if (!forward_only) os << ", gradients " << format_bytes(peak_gradients);
    os << ", kept by layers " << format_bytes(peak_kept) << ", scratch " << format_bytes(peak_scratch);
  }
  return os.str();
}

void Net::keep_blobs(const std::vector<std::string>& names) {
  for (const std::string& n : names) {
    blob(n);  // ConfigError naming the blobs when there is no such blob
    kept_blobs_.insert(n);
  }
  plan_blob_memory();
}

void Net::number_steps() {
  const int L = num_layers();
  forward_step_.assign(static_cast<size_t>(L), 0);
  recompute_step_.assign(static_cast<size_t>(L), -1);
  backward_step_.assign(static_cast<size_t>(L), 0);
  int step = 0;
  for (int i = 0; i < L; ++i) forward_step_[static_cast<size_t>(i)] = step++;
  for (int i = L - 1; i >= 0; --i) {
    const int r = range_of_.empty() ? -1 : range_of_[static_cast<size_t>(i)];
    if (r >= 0 && recompute_[static_cast<size_t>(r)].last == i) {
      for (int j = recompute_[static_cast<size_t>(r)].first; j <= i; ++j) recompute_step_[static_cast<size_t>(j)] = step++;
    }
    backward_step_[static_cast<size_t>(i)] = step++;
  }
}

void Net::plan_blob_memory() {
  // Planned again (keep_blobs, and set_lr_mult once per parameter a policy
  // changes): memory is only sized here and taken on first use, so that only
  // the last of several plans in a row takes any (framework/memory_plan.h).
  // Under the Net's own plan (the constructor) the arena is counted there.
  std::unique_ptr<MemoryPlan> sized_only;
  if (!MemoryPlan::current()) sized_only = std::make_unique<MemoryPlan>();
  const std::vector<Tensor*> old_arena = std::move(in_arena_);
  in_arena_.clear();
  blob_plan_ = BlobPlanReport{};
  planned_values_.clear();
  poison_after_.clear();
  planned_forward_only_ = false;
  const int L = num_layers();
  number_steps();
  first_places_.assign(static_cast<size_t>(L), {});
  recompute_places_.assign(static_cast<size_t>(L), {});
  scratch_places_.assign(static_cast<size_t>(L), {});
  cast_places_.assign(static_cast<size_t>(L), {});
  ++plan_generation_;
  choose_storage();  // the dtypes first: the sizes below follow them
  share_tops();      // before the fusion pass, which looks through them
  fuse_epilogues();
  if (options_.blob_memory == BlobMemory::kSeparate) {
    for (Tensor* t : old_arena) *t = Tensor(t->shape(), t->dtype(), options_.device);
    blob_arena_ = Tensor();
    // What layers keep from forward to backward: each its own, for the run.
    for (const auto& l : layers_) {
      const size_t kept = l->kept_bytes();
      l->kept_place_ = kept ? Tensor(Shape{static_cast<int64_t>(kept)}, DType::kU8, options_.device) : Tensor();
    }
    plan_casts();
    return;
  }
  // Inference (a TEST net nobody runs backward on): values only. Every
  // gradient is idle and they share one buffer, which nothing writes.
  const bool forward_only = options_.phase == Phase::kTest && !force_backward_;
  const int num_steps = L > 0 ? backward_step_[0] + 1 : 0;
  std::set<std::string> read;
  for (const auto& names : bottom_names_) read.insert(names.begin(), names.end());

  std::vector<PlannedTensor> planned;
  std::vector<Tensor*> idle;  // gradients nobody writes or reads
  for (const std::string& name : blob_names_) {
    Blob* b = blobs_.at(name).get();
    const int producer = blob_producer_.at(name);
    if (bottoms_[producer].empty() || !read.count(name) || kept_blobs_.count(name) || b->numel() == 0) {
      ++blob_plan_.kept;
      continue;
    }
    // A top that is its bottom's memory is that bottom's value: its reads
    // are the bottom's (below), and only its gradient is its own.
    const bool shared = shared_tops_.count(b) > 0;
    const auto value_of = [&](const Blob* x) {
      auto it = shared_tops_.find(x);
      return it == shared_tops_.end() ? x : it->second;
    };
    std::vector<int> touches;  // every step that writes or reads the value
    int grad_first = INT_MAX, grad_last = -1;
    bool grad_read = false;
    for (int i = 0; i < L; ++i) {
      const size_t u = static_cast<size_t>(i);
      const BlobVec& bots = bottoms_[i];
      const bool as_bottom = std::find(bots.begin(), bots.end(), b) != bots.end();
      const bool as_top = std::find(tops_[i].begin(), tops_[i].end(), b) != tops_[i].end();
      bool value_bottom = false, value_top = false;
      for (const Blob* x : bots) value_bottom = value_bottom || value_of(x) == b;
      for (const Blob* x : tops_[i]) value_top = value_top || value_of(x) == b;
      if (!value_bottom && !value_top && !as_bottom && !as_top) continue;
      touches.push_back(forward_step_[u]);
      // A sum fused into its reader is read at the reader's forward.
      if (value_bottom && !residual_reader_.empty() && residual_reader_[u] >= 0) {
        touches.push_back(forward_step_[static_cast<size_t>(residual_reader_[u])]);
      }
      if (forward_only) continue;
      if (recompute_step_[u] >= 0) touches.push_back(recompute_step_[u]);  // every layer of a range runs again
      if (!layer_need_backward_[i]) continue;
      const int bwd = backward_step_[u];
      const Layer::BackwardReads reads = layers_[i]->backward_reads();
      if ((value_bottom && reads.bottoms) || (value_top && reads.tops)) touches.push_back(bwd);
      for (size_t k = 0; k < bots.size(); ++k) {
        if (bots[k] != b || !bottom_need_backward_[i][k]) continue;
        grad_first = std::min(grad_first, bwd);
        grad_last = std::max(grad_last, bwd);
      }
      if (as_top) {  // a backward reads its tops' gradients
        grad_read = true;
        grad_last = std::max(grad_last, bwd);
      }
    }
    const size_t bytes = b->data.nbytes();
    const int made = forward_step_[static_cast<size_t>(producer)];
    const int range = forward_only ? -1 : range_of_[static_cast<size_t>(producer)];
    if (shared) {
      // Bound to its bottom's memory below; only its gradient is placed.
    } else if (range >= 0) {
      // Made inside a recompute range: its uses before the recompute, then
      // from the recompute on.
      const int again = recompute_step_[static_cast<size_t>(recompute_[static_cast<size_t>(range)].first)];
      Lifetime first{bytes, made, made};
      Lifetime second{bytes, recompute_step_[static_cast<size_t>(producer)], recompute_step_[static_cast<size_t>(producer)]};
      for (int t : touches) {
        Lifetime& life = t < again ? first : second;
        life.last = std::max(life.last, t);
      }
      planned.push_back({&b->data, first, PlannedTensor::Pass::kFirst, producer, PlannedTensor::Kind::kValue});
      planned.push_back({&b->data, second, PlannedTensor::Pass::kSecond, producer, PlannedTensor::Kind::kValue});
    } else {
      Lifetime value{bytes, made, made};
      for (int t : touches) value.last = std::max(value.last, t);
      planned.push_back({&b->data, value});
    }
    if (!shared) planned_values_.insert(b);
    if (grad_first != INT_MAX) {
      planned.push_back({&b->diff, Lifetime{b->diff.nbytes(), grad_first, std::max(grad_first, grad_last)},
                         PlannedTensor::Pass::kOnly, -1, PlannedTensor::Kind::kGradient});
    } else if (!grad_read) {
      idle.push_back(&b->diff);
    }  // else read but never written: it keeps its own zeroed memory
  }
  // What layers keep from their forward for their backward (kept()): alive
  // from the forward to the backward (a forward-only net: the forward
  // alone); a layer in a recompute range keeps what its recompute made.
  for (int i = 0; i < L; ++i) {
    const size_t u = static_cast<size_t>(i);
    const size_t bytes = layers_[u]->kept_bytes();
    Tensor* t = &layers_[u]->kept_place_;
    if (bytes == 0) {
      *t = Tensor();
      continue;
    }
    *t = Tensor(Shape{static_cast<int64_t>(bytes)}, DType::kU8, options_.device);  // sized only: placed below
    const int f = forward_step_[u];
    const bool backward = !forward_only && layer_need_backward_[i];
    if (!forward_only && recompute_step_[u] >= 0) {
      const int r = recompute_step_[u];
      planned.push_back({t, Lifetime{bytes, f, f}, PlannedTensor::Pass::kFirst, i, PlannedTensor::Kind::kKept});
      planned.push_back({t, Lifetime{bytes, r, backward ? backward_step_[u] : r}, PlannedTensor::Pass::kSecond, i,
                         PlannedTensor::Kind::kKept});
    } else {
      planned.push_back({t, Lifetime{bytes, f, backward ? backward_step_[u] : f}, PlannedTensor::Pass::kOnly, -1,
                         PlannedTensor::Kind::kKept});
    }
  }
  // Each call's scratch, at its step alone.
  for (int i = 0; i < L; ++i) {
    const size_t u = static_cast<size_t>(i);
    const size_t bytes = layers_[u]->scratch_bytes();
    if (bytes == 0) continue;
    const bool backward = !forward_only && layer_need_backward_[i];
    blob_plan_.separate_bytes += bytes;  // on its own: one buffer for the layer's calls, as kSeparate keeps it
    const std::pair<Call, int> calls[] = {{Call::kForward, forward_step_[u]},
                                          {Call::kRecompute, forward_only ? -1 : recompute_step_[u]},
                                          {Call::kBackward, backward ? backward_step_[u] : -1}};
    for (const auto& [call, step] : calls) {
      if (step < 0) continue;
      Tensor* t = &scratch_places_[u][static_cast<size_t>(call)];
      *t = Tensor(Shape{static_cast<int64_t>(bytes)}, DType::kU8, options_.device);  // sized only: placed below
      planned.push_back({t, Lifetime{bytes, step, step}, PlannedTensor::Pass::kScratch, i,
                         PlannedTensor::Kind::kScratch});
      ++blob_plan_.scratch_calls;
      blob_plan_.scratch_bytes = std::max(blob_plan_.scratch_bytes, bytes);
    }
  }
  // Under a reduced storage dtype, each call's f32 copies of its blobs
  // (framework/net_storage.cpp), at its step alone, as its scratch.
  size_t largest_copies = 0;
  for (int i = 0; i < L && has_casts(); ++i) {
    const size_t u = static_cast<size_t>(i);
    const bool backward = !forward_only && layer_need_backward_[i];
    const std::pair<Call, int> calls[] = {{Call::kForward, forward_step_[u]},
                                          {Call::kRecompute, forward_only ? -1 : recompute_step_[u]},
                                          {Call::kBackward, backward ? backward_step_[u] : -1}};
    for (const auto& [call, step] : calls) {
      const size_t bytes = step < 0 ? 0 : cast_bytes(i, call);
      if (bytes == 0) continue;
      Tensor* t = &cast_places_[u][static_cast<size_t>(call)];
      *t = Tensor(Shape{static_cast<int64_t>(bytes)}, DType::kU8, options_.device);  // sized only: placed below
      planned.push_back({t, Lifetime{bytes, step, step}, PlannedTensor::Pass::kScratch, i,
                         PlannedTensor::Kind::kScratch});
      largest_copies = std::max(largest_copies, bytes);
    }
  }
  blob_plan_.separate_bytes += largest_copies;  // on their own: one buffer for every call's copies
  size_t idle_bytes = 0;
  for (const Tensor* t : idle) idle_bytes = std::max(idle_bytes, t->nbytes());
  // Checked: every buffer keeps its bytes for the whole step (placed as if
  // alive throughout) and is poisoned at the end of its real lifetime, so a
  // late read always finds NaN, never a later buffer's numbers.
  const bool poison = options_.blob_memory == BlobMemory::kByLifetimeChecked;
  const int last_step = std::max(0, num_steps - 1);
  std::vector<Lifetime> lives;
  for (const PlannedTensor& p : planned) lives.push_back(poison ? Lifetime{p.life.bytes, 0, last_step} : p.life);
  if (idle_bytes > 0) lives.push_back(Lifetime{idle_bytes, 0, last_step});
  // The greedy placement depends on the order it takes the buffers in, and
  // no one order is best: three are tried and the smallest arena kept.
  // Largest first; the calls' scratch after everything else, into the holes
  // left at their steps (better when a large workspace meets long-lived
  // values); and by first step, as a stack would (better for chains whose
  // buffers are alike). Checked mode places everything apart: one is enough.
  Placement place = place_lifetimes(lives, kArenaAlignment);
  if (!poison) {
    std::vector<Lifetime> scratch_last = lives, by_start = lives;
    for (size_t k = 0; k < planned.size(); ++k) scratch_last[k].group = planned[k].pass == PlannedTensor::Pass::kScratch;
    for (Lifetime& l : by_start) l.group = l.first;
    for (const auto* order : {&scratch_last, &by_start}) {
      Placement other = place_lifetimes(*order, kArenaAlignment);
      if (other.arena_bytes < place.arena_bytes) place = std::move(other);
    }
  }
  // What the last plan placed and this one does not (blobs now kept) gets
  // memory of its own, so that it stops sharing the old arena's bytes.
  std::set<const Tensor*> placed_again;
  for (const PlannedTensor& p : planned) placed_again.insert(p.tensor);
  if (idle_bytes > 0) placed_again.insert(idle.begin(), idle.end());
  for (Tensor* t : old_arena) {
    if (!placed_again.count(t)) *t = Tensor(t->shape(), t->dtype(), options_.device);
  }
  if (poison) {
    std::vector<Lifetime> real;
    for (const PlannedTensor& p : planned) real.push_back(p.life);
    place.peak_bytes = place_lifetimes(real, kArenaAlignment).peak_bytes;
  }

  // A TEST net and its TRAIN net share one arena, the larger: it holds
  // nothing between training steps, when the TEST net runs. The TEST net
  // lies in the TRAIN net's when it fits; otherwise the TRAIN net moves into
  // the TEST net's (planned again, below).
  Net* host = options_.arena_host;
  const bool shares = host && host != this && forward_only && host->options_.device == options_.device &&
                      host->options_.blob_memory != BlobMemory::kSeparate && host->blob_arena_.storage_id();
  const bool in_host = shares && host->blob_arena_.nbytes() >= place.arena_bytes;
  const bool in_guest = !shares && guest_arena_.storage_id() && guest_arena_.nbytes() >= place.arena_bytes;
  if (in_host) {
    blob_arena_ = host->blob_arena_;
    // An arena of ours the host had moved into, and left since, is let go.
    if (host->guest_arena_.storage_id() != host->blob_arena_.storage_id()) host->guest_arena_ = Tensor();
  } else if (in_guest) {
    blob_arena_ = guest_arena_;
  } else {
    blob_arena_ = Tensor(Shape{static_cast<int64_t>(place.arena_bytes)}, DType::kU8, options_.device);
  }
  host_arena_ = in_host ? host->blob_arena_.storage_id() : nullptr;
  blob_plan_.host = in_host ? host->shared_arena_name() : in_guest ? guest_name_ : std::string();
  if (poison) poison_after_.assign(static_cast<size_t>(num_steps), {});
  for (size_t k = 0; k < planned.size(); ++k) {
    const PlannedTensor& p = planned[k];
    Tensor& t = *p.tensor;
    const size_t bytes = p.life.bytes;
    const Tensor view = blob_arena_.view_bytes(place.offsets[k], bytes, t.shape(), t.dtype());
    if (p.pass == PlannedTensor::Pass::kScratch) {
      t = view;  // handed to the layer for its call (ScratchBinding); filled with NaN there when checked
      continue;
    }
    if (p.pass == PlannedTensor::Pass::kSecond) {
      recompute_places_[static_cast<size_t>(p.producer)].push_back({p.tensor, view});
    } else {
      if (p.pass == PlannedTensor::Pass::kFirst) first_places_[static_cast<size_t>(p.producer)].push_back({p.tensor, view});
      t = view;
      in_arena_.push_back(&t);
      blob_plan_.separate_bytes += bytes;
    }
    if (poison && bytes > 0) {  // NaN over whatever it holds, f32, bf16 or f16 (every byte 0xff)
      poison_after_.at(static_cast<size_t>(p.life.last))
          .push_back(blob_arena_.view_bytes(place.offsets[k], bytes, {static_cast<int64_t>(bytes)}, DType::kU8));
    }
  }
  // The tops that are their bottom's memory (share_tops).
  for (auto& entry : blobs_) {
    Blob* t = entry.second.get();
    auto shared = shared_tops_.find(t);
    if (shared == shared_tops_.end()) continue;
    const Blob* bottom = shared->second;
    t->data = bottom->data;
    if (planned_values_.count(bottom)) {
      planned_values_.insert(t);
      in_arena_.push_back(&t->data);
    }
  }
  for (Tensor* t : idle_bytes > 0 ? idle : std::vector<Tensor*>()) {
    *t = blob_arena_.view_bytes(place.offsets.back(), idle_bytes, t->shape(), t->dtype());
    in_arena_.push_back(t);
    blob_plan_.separate_bytes += t->nbytes();
  }
  blob_plan_.arena_bytes = place.arena_bytes;
  blob_plan_.peak_bytes = place.peak_bytes;
  for (const PlannedTensor& p : planned) {
    const bool blob_value = p.tensor->dtype() != DType::kU8;  // not a layer's kept block
    blob_plan_.recomputed += p.pass == PlannedTensor::Pass::kSecond && blob_value ? 1 : 0;
  }
  int placed = 0;  // each tensor once, though a recomputed one has two places; scratch is counted apart
  for (const PlannedTensor& p : planned) {
    placed += p.pass == PlannedTensor::Pass::kSecond || p.pass == PlannedTensor::Pass::kScratch ? 0 : 1;
  }
  std::vector<std::string> step_names(static_cast<size_t>(num_steps));
  for (int i = 0; i < L; ++i) {
    const size_t u = static_cast<size_t>(i);
    const std::string quoted = "'" + layers_[u]->name() + "'";
    step_names[static_cast<size_t>(forward_step_[u])] = "forward " + quoted;
    if (recompute_step_[u] >= 0) step_names[static_cast<size_t>(recompute_step_[u])] = "recompute " + quoted;
    step_names[static_cast<size_t>(backward_step_[u])] = "backward " + quoted;
  }
  describe_peak_step(planned, idle_bytes, forward_only ? L : num_steps, step_names, blob_plan_);
  plan_casts();  // the storage report's counts
  blob_plan_.planned = placed + static_cast<int>(idle_bytes > 0 ? idle.size() : 0);
  blob_plan_.forward_only = forward_only;
  planned_forward_only_ = forward_only;
  if (shares && !in_host) {
    // The host moves into this net's larger arena and lets its own go.
    host->guest_arena_ = blob_arena_;
    host->guest_name_ = shared_arena_name();
    host->plan_blob_memory();
    host_arena_ = blob_arena_.storage_id();
    blob_plan_.host = host->shared_arena_name();
  }
}

// Tops that may be their bottom's memory (Layer::tops_may_share_bottom: a
// Split) are, unless: a layer writes one of them, or the bottom after the
// layer, in place (the other readers would see it); one is kept whole (a
// kept blob, an output); their dtypes differ; or a recompute range holds the
// layer, the bottom's producer or a reader (a value recomputed has two
// places). Not under kSeparate, the reference where every blob has its own.
void Net::share_tops() {
  shared_tops_.clear();
  if (options_.blob_memory == BlobMemory::kSeparate) return;
  const int L = num_layers();
  const auto range = [&](int i) { return range_of_.empty() ? -1 : range_of_[static_cast<size_t>(i)]; };
  std::map<const Blob*, int> producer;
  for (const auto& [name, blob] : blobs_) producer[blob.get()] = blob_producer_.at(name);
  std::map<const Blob*, int> last_in_place;  // blob -> the last layer that writes it in place
  std::map<const Blob*, std::vector<int>> readers;
  for (int i = 0; i < L; ++i) {
    for (const Blob* b : bottoms_[i]) {
      readers[b].push_back(i);
      if (std::find(tops_[i].begin(), tops_[i].end(), b) != tops_[i].end()) last_in_place[b] = i;
    }
  }
  for (int i = 0; i < L; ++i) {
    if (!layers_[i]->tops_may_share_bottom() || bottoms_[i].size() != 1 || range(i) >= 0) continue;
    const Blob* bottom = bottoms_[i][0];
    if (auto it = shared_tops_.find(bottom); it != shared_tops_.end()) bottom = it->second;  // a split of a split
    if (range(producer.at(bottom)) >= 0) continue;
    if (auto w = last_in_place.find(bottom); w != last_in_place.end() && w->second > i) continue;
    bool ok = true;
    for (size_t k = 0; k < tops_[i].size() && ok; ++k) {
      const Blob* t = tops_[i][k];
      auto r = readers.find(t);
      ok = t != bottom && !last_in_place.count(t) && !kept_blobs_.count(top_names_[i][k]) && r != readers.end() &&
           storage_dtype_of(*t) == storage_dtype_of(*bottom) && layout_of(*t) == layout_of(*bottom);
      for (int reader : ok ? r->second : std::vector<int>()) ok = ok && range(reader) < 0;
    }
    if (!ok) continue;
    for (const Blob* t : tops_[i]) shared_tops_[t] = bottom;
  }
}

std::string Net::shared_arena_name() const { return std::string(phase_name(phase())) + " net '" + name_ + "'"; }

void Net::poison_after(int step) {
  if (poison_after_.empty()) return;
  for (Tensor& t : poison_after_.at(static_cast<size_t>(step))) t.fill_bytes(0xff);
}

}  // namespace strata
