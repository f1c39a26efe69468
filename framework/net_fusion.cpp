// Net: the fusion pass (NetOptions::fuse_epilogues). An activation that runs
// in place on the one top of the layer just before it (no layer between
// reads or writes that blob) and declares itself an epilogue
// (Layer::as_epilogue: ReLU) is applied by that layer as it writes its
// output, when it declares it can (Layer::takes_epilogue: InnerProduct and
// Convolution, on the CPU and in their GPU bias kernels); the activation's
// forward is then skipped, and its
// backward, which reads the output, runs as it is. Nothing keys on a type
// name: the layers say what they are and what they take.
//
// The fused forward gives the unfused bits: the producer computes its output
// in f32 and applies the activation's own formula before it stores it (on a
// GPU in the kernel that adds its bias, after the same GEMM). With
// the output stored in 16 bits that holds for max(x, 0) (rounding keeps the
// sign and rounds 0 to 0) but not for a leaky slope (round(a * round(x))
// is not round(a * x)), which is then not fused. Not fused either: a blob
// code outside the layers reads (keep_blobs, a loss), and a producer with
// several tops. A recomputation range cannot split such a pair (the Net
// refuses a range that starts or ends between a blob's producer and a layer
// that writes it in place), so both run again together.
//
// Residual sums: a sum of two blobs (Layer::as_residual_sum: an Eltwise SUM)
// read by the next layer, which declares it can compute its bottom as that
// sum (Layer::takes_residual_sum: LayerNorm), is computed by that reader: it
// reads the two blobs, writes the sum where the sum's layer would, and goes
// on from the values it wrote, so the sum is not read back from memory. The
// sum's forward is then skipped (its reshape still runs); its backward, and
// the reader's, run as they are. The reader may read the sum through a Split
// whose tops are the sum's own memory (Net::shared_tops): a residual stream
// read by the next block and by the next sum. Not fused: a sum kept or
// weighted as a loss, one written in place, blobs of different dtypes, and
// either layer in a recompute range. The memory plan reads the two blobs at
// the reader's step.
#include <algorithm>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "framework/net.h"

namespace strata {

void Net::fuse_epilogues() {
  for (auto& l : layers_) {
    l->set_epilogue({});
    l->set_residual_sum({});
  }
  fused_.clear();
  fused_residuals_.clear();
  absorbed_.assign(layers_.size(), 0);
  residual_reader_.assign(layers_.size(), -1);
  if (!options_.fuse_epilogues) return;
  for (int j = 1; j < num_layers(); ++j) {
    const size_t uj = static_cast<size_t>(j);
    const Epilogue e = layers_[uj]->as_epilogue();
    if (e.none() || bottoms_[uj].size() != 1 || tops_[uj].size() != 1 || bottoms_[uj][0] != tops_[uj][0]) continue;
    const Blob* t = tops_[uj][0];
    if (kept_blobs_.count(top_names_[uj][0]) || loss_weights_[uj][0] != 0.0f) continue;
    // The last layer before j that touches t must be its producer, writing it alone.
    int i = j - 1;
    auto touches = [&](int k) {
      const size_t u = static_cast<size_t>(k);
      for (const Blob* b : bottoms_[u]) {
        if (b == t) return true;
      }
      for (const Blob* b : tops_[u]) {
        if (b == t) return true;
      }
      return false;
    };
    while (i >= 0 && !touches(i)) --i;
    if (i < 0) continue;
    const size_t ui = static_cast<size_t>(i);
    Layer& producer = *layers_[ui];
    if (tops_[ui].size() != 1 || tops_[ui][0] != t || loss_weights_[ui][0] != 0.0f) continue;
    bool reads_it = false;
    for (const Blob* b : bottoms_[ui]) reads_it = reads_it || b == t;
    if (reads_it || !producer.epilogue().none()) continue;
    if (storage_dtype_of(*t) != DType::kF32 && e.slope != 0.0f) continue;  // see above
    if (!producer.takes_epilogue(e)) continue;
    producer.set_epilogue(e);
    absorbed_[uj] = 1;
    fused_.emplace_back(i, j);
  }
  fuse_residual_sums();
}

void Net::fuse_residual_sums() {
  const auto range = [&](int i) { return range_of_.empty() ? -1 : range_of_[static_cast<size_t>(i)]; };
  for (int j = 1; j < num_layers(); ++j) {
    const size_t uj = static_cast<size_t>(j);
    Layer& reader = *layers_[uj];
    if (!reader.takes_residual_sum() || bottoms_[uj].size() != 1 || absorbed_[uj] || range(j) >= 0) continue;
    const Blob* x = bottoms_[uj][0];
    auto shared = shared_tops_.find(x);
    const Blob* s = shared == shared_tops_.end() ? x : shared->second;
    // The sum is the layer just before the reader, or just before the Split just before it.
    int i = j - 1;
    if (s != x) {
      const BlobVec& split_tops = tops_[static_cast<size_t>(i)];
      if (std::find(split_tops.begin(), split_tops.end(), x) == split_tops.end() || range(i) >= 0) continue;
      --i;
    }
    if (i < 0) continue;
    const size_t ui = static_cast<size_t>(i);
    if (!layers_[ui]->as_residual_sum() || absorbed_[ui] || range(i) >= 0) continue;
    if (tops_[ui].size() != 1 || tops_[ui][0] != s || bottoms_[ui].size() != 2 || loss_weights_[ui][0] != 0.0f) continue;
    if (kept_blobs_.count(top_names_[ui][0])) continue;
    const Blob* a = bottoms_[ui][0];
    const Blob* b = bottoms_[ui][1];
    if (a == s || b == s) continue;
    const DType dt = storage_dtype_of(*s);
    if (storage_dtype_of(*a) != dt || storage_dtype_of(*b) != dt || storage_dtype_of(*x) != dt) continue;
    if (reader.call_dtype() != dt) continue;  // the reader would take f32 copies
    // Likewise the layout: the reader reads the addends as they are stored.
    const Layout lt = reader.call_layout();
    if (layout_of(*a) != lt || layout_of(*b) != lt || layout_of(*s) != lt || layout_of(*x) != lt) continue;
    reader.set_residual_sum({a, b});
    absorbed_[ui] = 1;
    residual_reader_[ui] = j;
    fused_residuals_.emplace_back(i, j);
  }
}

namespace {

// " a into b, c into d and 3 more"
std::string pairs(const std::vector<std::pair<std::string, std::string>>& p) {
  std::ostringstream os;
  const size_t shown = p.size() < 4 ? p.size() : 3;
  for (size_t k = 0; k < shown; ++k) os << (k ? ", " : " ") << p[k].first << " into " << p[k].second;
  if (shown < p.size()) os << " and " << p.size() - shown << " more";
  return os.str();
}

}  // namespace

std::string Net::fusion_report() const {
  std::ostringstream os;
  if (!fused_.empty()) {
    std::vector<std::pair<std::string, std::string>> p;
    for (const auto& [producer, activation] : fused_) {
      p.emplace_back(layers_[static_cast<size_t>(activation)]->name(), layers_[static_cast<size_t>(producer)]->name());
    }
    os << "fused " << fused_.size() << " activation(s) into the layer before them:" << pairs(p);
  }
  if (!fused_residuals_.empty()) {
    std::vector<std::pair<std::string, std::string>> p;
    for (const auto& [sum, reader] : fused_residuals_) {
      p.emplace_back(layers_[static_cast<size_t>(sum)]->name(), layers_[static_cast<size_t>(reader)]->name());
    }
    os << (fused_.empty() ? "fused " : "; ") << fused_residuals_.size() << " residual sum(s) into the layer reading them:"
       << pairs(p);
  }
  return os.str();
}

}  // namespace strata
