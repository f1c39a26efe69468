// Net: recomputation (`recompute { from: "a" to: "b" }`). The ranges are
// read and checked here, and run again in backward; their values' two
// lifetimes (the first forward, then the recompute to the backwards that
// read them) are placed by net_plan.cpp.
#include <string>

#include "framework/error.h"
#include "framework/net.h"
#include "framework/timeline.h"

namespace strata {

void Net::read_recompute_ranges(const ConfigNode& root) {
  const int L = num_layers();
  recompute_.clear();
  range_of_.assign(static_cast<size_t>(L), -1);
  state_before_.assign(static_cast<size_t>(L), std::string());
  for (const ConfigNode* node : root.all("recompute")) {
    node->check_keys({"from", "to"}, "recompute");
    const std::string where = "recompute { from: \"" + node->get_string("from") + "\" to: \"" +
                              node->get_string("to") + "\" } at " + node->loc().str();
    const int a = layer_index(node->get_string("from"));
    const int b = layer_index(node->get_string("to"));
    if (a > b) fail<ConfigError>(where, ": '", layers_[a]->name(), "' comes after '", layers_[b]->name(), "' in the net");
    const int r = static_cast<int>(recompute_.size());
    for (int i = a; i <= b; ++i) {
      const Layer& layer = *layers_[static_cast<size_t>(i)];
      if (range_of_[static_cast<size_t>(i)] >= 0) {
        fail<ConfigError>(where, ": layer '", layer.name(), "' is already in the range from '",
                          layers_[recompute_[range_of_[i]].first]->name(), "'; recompute ranges must not overlap");
      }
      if (bottoms_[i].empty()) {
        fail<ConfigError>(where, ": ", layer_where(i), " has no bottoms (it makes the net's input): run again it "
                          "would read the next batch; start the range after it");
      }
      for (const LayerParam& p : layer.params()) {
        if (p.learnable == Learnable::kNo) {
          fail<ConfigError>(where, ": ", layer_where(i), " updates its '", p.name, "' in forward (running "
                            "statistics); run again it would update them twice: leave it out of the range");
        }
      }
      for (size_t t = 0; t < tops_[i].size(); ++t) {
        const int producer = blob_producer_.at(top_names_[i][t]);
        if (producer < a) {
          fail<ConfigError>(where, ": ", layer_where(i), " writes '", top_names_[i][t], "' in place, which layer '",
                            layers_[producer]->name(), "' before the range made: run again it would apply "
                            "twice; start the range at '", layers_[producer]->name(), "'");
        }
      }
      range_of_[static_cast<size_t>(i)] = r;
    }
    for (int j = b + 1; j < L; ++j) {
      for (size_t t = 0; t < tops_[j].size(); ++t) {
        const int producer = blob_producer_.at(top_names_[j][t]);
        if (producer >= a && producer <= b) {
          fail<ConfigError>(where, ": ", layer_where(j), " after the range writes '", top_names_[j][t],
                            "' in place, which the range makes: the recompute would undo it; end the range at '",
                            layers_[j]->name(), "'");
        }
      }
    }
    recompute_.push_back(RecomputeRange{a, b});
  }
}

void Net::recompute(int r) {
  const RecomputeRange& range = recompute_.at(static_cast<size_t>(r));
  for (int i = range.first; i <= range.last; ++i) {
    Layer& layer = *layers_[static_cast<size_t>(i)];
    for (auto& [tensor, place] : recompute_places_[static_cast<size_t>(i)]) *tensor = place;
    // The random state the first forward had (Dropout's mask), then the
    // state it left, so that the next step draws as it would have.
    const std::string after = layer.save_state();
    layer.load_state(state_before_[static_cast<size_t>(i)]);
    {
      const TimelineScope event("recompute", layer.name());
      run_forward(i, Call::kRecompute);
    }
    layer.load_state(after);
    poison_after(recompute_step_[static_cast<size_t>(i)]);
    if (memory_trace_passes_ > 0) trace_memory("recompute", i);
  }
}

}  // namespace strata
