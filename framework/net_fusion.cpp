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
#include <sstream>

#include "framework/net.h"

namespace strata {

void Net::fuse_epilogues() {
  for (auto& l : layers_) l->set_epilogue({});
  fused_.clear();
  absorbed_.assign(layers_.size(), 0);
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
}

std::string Net::fusion_report() const {
  if (fused_.empty()) return "";
  std::ostringstream os;
  os << "fused " << fused_.size() << " activation(s) into the layer before them:";
  const size_t shown = fused_.size() < 4 ? fused_.size() : 3;
  for (size_t k = 0; k < shown; ++k) {
    os << (k ? ", " : " ") << layers_[static_cast<size_t>(fused_[k].second)]->name() << " into "
       << layers_[static_cast<size_t>(fused_[k].first)]->name();
  }
  if (shown < fused_.size()) os << " and " << fused_.size() - shown << " more";
  return os.str();
}

}  // namespace strata
