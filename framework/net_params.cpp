// Net: its parameters. Registration (shared weights appear once), their
// place on the device, lr_mult changed by a fine-tuning policy, sharing with
// another net (a TEST net uses the TRAIN net's), and the gradients in one
// flat buffer (BlobMemory::kByLifetime and its checked mode).
//
// The gradients of the updated parameters (learnable, lr_mult != 0) are laid
// out one after another in the order backward finishes them (descending
// last_backward_layer, ties by index; those no backward reaches last), each
// at a 256-byte boundary, and each parameter's diff becomes a view of its
// place. That is data parallel's bucket order (parallel/data_parallel/
// grad_buckets.cpp), so a bucket is one range of the buffer and is reduced
// in place (gradient_view) instead of being copied into a buffer of its own
// and back; zero_param_diffs() zeroes the whole buffer in one pass.
#include <algorithm>

#include "framework/error.h"
#include "framework/memory_plan.h"
#include "framework/net.h"

namespace strata {
namespace {

constexpr int64_t kGradAlignment = 64;  // floats: 256 bytes, as the blob arena

int64_t align_up(int64_t v) { return (v + kGradAlignment - 1) / kGradAlignment * kGradAlignment; }

bool updated(const NetParam& p) { return p.learnable == Learnable::kYes && p.lr_mult != 0.0f; }

}  // namespace

void Net::move_params_to_device(int i) {
  if (!on_cuda()) return;
  // Fillers ran on the host in setup(); the values move once, here. The Blob
  // objects stay the same, so the layer's param(k) references remain valid.
  for (LayerParam& p : layers_[i]->params()) {
    if (p.blob->data.device() != options_.device) p.blob->data = p.blob->data.to(options_.device);
    // A gradient nothing wrote yet is zero: made on the device, not copied.
    if (p.blob->diff.device() != options_.device) {
      p.blob->diff = p.blob->diff.holds_memory() ? p.blob->diff.to(options_.device)
                                                 : Tensor(p.blob->diff.shape(), DType::kF32, options_.device);
    }
  }
}

void Net::register_params(int i) {
  Layer& layer = *layers_[i];
  const LayerSpec& spec = layer.spec();
  std::vector<LayerParam>& lp = layer.params();
  // Caffe files give BatchNorm three `param { lr_mult: 0 }` blocks (it had a
  // third blob); surplus blocks that only freeze are accepted as written.
  bool surplus_only_freezes = true;
  for (size_t k = lp.size(); k < spec.params.size(); ++k) {
    if (spec.params[k].lr_mult != 0.0f || !spec.params[k].share_name.empty()) surplus_only_freezes = false;
  }
  if (spec.params.size() > lp.size() && !surplus_only_freezes) {
    fail<ConfigError>("layer '", layer.name(), "' at ", spec.node.loc().str(), " has ", spec.params.size(),
                      " param blocks but ", layer.type(), " has only ", lp.size(), " parameters");
  }
  std::vector<int> ids;
  for (size_t k = 0; k < lp.size(); ++k) {
    const ParamSpec ps = k < spec.params.size() ? spec.params[k] : ParamSpec{};
    const std::string name = ps.share_name.empty() ? layer.name() + "." + lp[k].name : ps.share_name;
    const int existing = param_index(name);
    if (existing >= 0) {
      NetParam& owner = params_[existing];
      if (ps.share_name.empty()) {
        fail<ConfigError>("parameter name '", name, "' of layer '", layer.name(), "' clashes with a shared parameter");
      }
      if (owner.blob->shape() != lp[k].blob->shape()) {
        fail<ShapeError>("layer '", layer.name(), "' shares parameter '", name, "' with layer '",
                         layers_[owner.owner_layer]->name(), "' but its shape ", shape_str(lp[k].blob->shape()),
                         " differs from ", shape_str(owner.blob->shape()));
      }
      lp[k].blob = owner.blob;
      ids.push_back(existing);
      continue;
    }
    NetParam p;
    p.name = name;
    p.blob = lp[k].blob;
    p.lr_mult = lp[k].learnable == Learnable::kYes ? ps.lr_mult : 0.0f;
    p.decay_mult = ps.decay_mult;
    p.learnable = lp[k].learnable;
    p.owner_layer = i;
    params_.push_back(p);
    ids.push_back(static_cast<int>(params_.size()) - 1);
  }
  layer_param_ids_.push_back(ids);
}

void Net::set_lr_mult(int param_index, float lr_mult) {
  STRATA_CHECK(param_index >= 0 && param_index < static_cast<int>(params_.size()), "param index ", param_index,
               " out of range (the net has ", params_.size(), " parameters)");
  if (std::find(handed_over_.begin(), handed_over_.end(), 1) != handed_over_.end()) {
    fail<ConfigError>("net '", name_, "': lr_mult of '", params_[static_cast<size_t>(param_index)].name,
                      "' cannot change once sharded data parallel keeps the gradients (its buckets and slices "
                      "are laid out for the parameters updated then); apply fine-tuning policies and freezing "
                      "before data parallel is set up");
  }
  NetParam& p = params_[static_cast<size_t>(param_index)];
  p.lr_mult = p.learnable == Learnable::kYes ? lr_mult : 0.0f;
  compute_backward_needs(force_backward_);
  plan_blob_memory();  // which backwards run, and so the lifetimes, changed
  plan_gradients();    // and which gradients are updated, and in what order
}

int Net::param_index(const std::string& name) const {
  for (int i = 0; i < static_cast<int>(params_.size()); ++i) {
    if (params_[i].name == name) return i;
  }
  return -1;
}

void Net::zero_param_diffs() {
  if (flat_grads_.numel() > 0) flat_grads_.zero();  // one pass; the padding stays zero
  for (size_t id = 0; id < params_.size(); ++id) {
    if (gradient_handed_over(static_cast<int>(id))) continue;  // its keeper zeroes it
    if (grad_offsets_.empty() || grad_offsets_[id] < 0) params_[id].blob->diff.zero();
  }
}

void Net::hand_over_gradients(const std::vector<int>& ids) {
  handed_over_.resize(params_.size(), 0);
  for (int id : ids) {
    STRATA_CHECK(id >= 0 && id < static_cast<int>(params_.size()), "param index ", id, " out of range");
    STRATA_CHECK(updated(params_[static_cast<size_t>(id)]), "net '", name_, "': the gradient of '",
                 params_[static_cast<size_t>(id)].name, "' is not updated, so it has no keeper to go to");
    handed_over_[static_cast<size_t>(id)] = 1;
  }
  plan_gradients();  // the flat buffer without them (none, when every updated one went)
}

void Net::share_params_from(const Net& other) {
  for (int i = 0; i < num_layers(); ++i) {
    std::vector<LayerParam>& lp = layers_[i]->params();
    for (size_t k = 0; k < lp.size(); ++k) {
      NetParam& mine = params_[layer_param_ids_[i][k]];
      const int j = other.param_index(mine.name);
      if (j < 0) continue;  // e.g. a TEST-only layer: keeps its own parameters
      const NetParam& theirs = other.params_[j];
      if (theirs.blob->shape() != mine.blob->shape()) {
        fail<ShapeError>("parameter '", mine.name, "' has shape ", shape_str(mine.blob->shape()), " in the ",
                         phase_name(phase()), " net but ", shape_str(theirs.blob->shape()), " in the ",
                         phase_name(other.phase()), " net");
      }
      lp[k].blob = theirs.blob;
      mine.blob = theirs.blob;
    }
  }
  // The parameters (and their gradients) are the other net's now: its flat
  // gradient buffer holds them, and this net's own is let go.
  flat_grads_ = Tensor();
  grad_offsets_.assign(params_.size(), -1);
  const bool shared_scratch = options_.blob_memory != BlobMemory::kSeparate &&
                              other.options_.blob_memory != BlobMemory::kSeparate &&
                              options_.device == other.options_.device && other.scratches_.size() == 1;
  if (shared_scratch && scratches_ != other.scratches_) {
    scratches_ = other.scratches_;
    for (auto& l : layers_) l->share_scratch(scratches_[0]);
    plan_scratch();
  }
}

void Net::plan_gradients() {
  std::vector<int> order, unreached;
  // A net nobody runs backward on (inference, a TEST net) writes no gradient.
  const bool backward = options_.phase == Phase::kTrain || force_backward_;
  if (options_.blob_memory != BlobMemory::kSeparate && backward) {
    for (int id = 0; id < static_cast<int>(params_.size()); ++id) {
      if (!updated(params_[id]) || gradient_handed_over(id)) continue;
      (params_[id].last_backward_layer >= 0 ? order : unreached).push_back(id);
    }
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return params_[a].last_backward_layer > params_[b].last_backward_layer;
    });
    order.insert(order.end(), unreached.begin(), unreached.end());
  }
  std::vector<int64_t> offsets(params_.size(), -1);
  int64_t total = 0;
  for (int id : order) {
    offsets[id] = total;
    total = align_up(total + params_[id].blob->numel());
  }
  flat_grads_ = total > 0 ? Tensor(Shape{total}, DType::kF32, options_.device) : Tensor();
  for (size_t id = 0; id < params_.size(); ++id) {
    Tensor& diff = params_[id].blob->diff;
    const bool was_flat = !grad_offsets_.empty() && grad_offsets_[id] >= 0;
    if (offsets[id] < 0 && !was_flat) continue;  // keeps the storage it has
    if (gradient_handed_over(static_cast<int>(id))) {
      // Its keeper binds it; until then a shape without storage (deferred,
      // framework/memory_plan.h), and the old buffer goes with its last view.
      MemoryPlan deferred;
      diff = Tensor(diff.shape(), DType::kF32, options_.device);
      continue;
    }
    Tensor place = offsets[id] >= 0 ? flat_grads_.view_bytes(static_cast<size_t>(offsets[id]) * sizeof(float),
                                                             diff.nbytes(), diff.shape(), DType::kF32)
                                    : Tensor(diff.shape(), DType::kF32, options_.device);
    // What the gradient holds moves with it (zero at setup; whatever a
    // policy's set_lr_mult finds between steps), never an allocation's worth
    // of zeros copied for nothing.
    if (diff.holds_memory() && diff.numel() > 0) place.copy_from(diff);
    diff = place;
  }
  grad_offsets_ = offsets;
}

std::optional<Tensor> Net::gradient_view(const std::vector<int>& ids) const {
  if (ids.empty() || grad_offsets_.empty() || flat_grads_.numel() == 0) return std::nullopt;
  int64_t end = 0;
  for (size_t k = 0; k < ids.size(); ++k) {
    STRATA_CHECK(ids[k] >= 0 && ids[k] < static_cast<int>(params_.size()), "param index ", ids[k], " out of range");
    const int64_t off = grad_offsets_[static_cast<size_t>(ids[k])];
    if (off < 0 || (k > 0 && off != align_up(end))) return std::nullopt;
    end = off + params_[static_cast<size_t>(ids[k])].blob->numel();
  }
  const int64_t begin = grad_offsets_[static_cast<size_t>(ids[0])];
  return flat_grads_.view_bytes(static_cast<size_t>(begin) * sizeof(float),
                                static_cast<size_t>(end - begin) * sizeof(float), {end - begin}, DType::kF32);
}

}  // namespace strata
