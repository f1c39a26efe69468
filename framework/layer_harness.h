// A registered layer type built from a config body, with bottoms filled as a
// LayerExample asks, run without a Net: what the generic layer checks
// (framework/layer_check.h), the layer tests and `strata check-layers` run
// layers in.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/layer.h"
#include "framework/rng.h"

namespace strata {

// A layer plus bottom and top blobs it owns (distinct blobs: never in place).
struct LayerHarness {
  std::unique_ptr<Layer> layer;
  std::vector<std::unique_ptr<Blob>> bottom_blobs;
  std::vector<std::unique_ptr<Blob>> top_blobs;
  BlobVec bottom;
  BlobVec top;

  // setup() then reshape().
  void setup();
  // reshape() then forward_cpu().
  void forward();
  // Backward into every bottom the layer can take a gradient for.
  void backward();
  void backward(const std::vector<bool>& propagate_down);
  // can_backward_to(i) for every bottom.
  std::vector<bool> backward_targets() const;
};

// The same layer type and config on a CUDA device, beside a LayerHarness on
// the CPU (a CUDA build's CPU-against-CUDA check; the layer must have CUDA
// code). make_cuda_twin gives its bottoms the CPU harness's values (with
// in_place, top 0 is bottom 0); setup_from() sets it up and gives its
// parameters the CPU layer's values, as a Net does (fillers run on the
// host). ShapeError when the two layers make different parameters.
struct CudaTwin {
  std::unique_ptr<Layer> layer;
  std::vector<std::unique_ptr<Blob>> blobs;
  BlobVec bottom;
  BlobVec top;

  void setup_from(const LayerHarness& cpu);
  // reshape() then forward_cuda().
  void forward();
  void backward(const std::vector<bool>& propagate_down);
};
enum class TwinInPlace { kNo, kYes };
CudaTwin make_cuda_twin(const std::string& type, const std::string& config, Phase phase, uint64_t seed,
                        const LayerHarness& cpu, Device device, TwinInPlace in_place = TwinInPlace::kNo);

// Parses `layer { name: "test" type: "<type>" <config> }` into a spec with
// bottoms in0.. and tops out0...
LayerSpec make_spec(const std::string& type, const std::string& config, int num_bottoms, int num_tops);

// How many tops a harness gives a layer: max_tops() when finite, else
// max(1, min_tops()).
int default_num_tops(const Layer& layer);

// Creates the layer through the registry with bottoms of the given shapes
// (zero-filled) and the default number of tops (or `num_tops` when >= 0).
// Does not call setup().
LayerHarness make_harness(const std::string& type, const std::string& config,
                          const std::vector<Shape>& bottom_shapes, Phase phase = Phase::kTrain,
                          uint64_t seed = 1, int num_tops = -1);

// The example's layer with bottoms filled from its InputKinds (seeded).
LayerHarness make_harness(const std::string& type, const LayerExample& example, uint64_t seed = 1);

// An instance of a registered type, to ask it what it is (has_cuda(),
// min_bottoms(), its parameters): built from its first example, else from an
// empty config, else (data layers) from a minimal config of its own
// *data_param or input_param block; the file such a config names is never
// opened. Null if none of these builds; then `why` (if given) holds the last
// error.
std::unique_ptr<Layer> build_any(const std::string& type, std::string* why = nullptr);

// The input kind of bottom i (kGaussian when the example does not say).
InputKind input_kind(const LayerExample& example, size_t i);

// Fills the bottoms as the example asks:
//   kGaussian: N(0, 1) values, jointly over all Gaussian bottoms moved apart
//     so that any two differ by at least `min_gap` and none lies within
//     `min_gap` of 0. Finite differences then never straddle a tie (max
//     pooling, Eltwise MAX) or the usual kink at 0 (ReLU) as long as
//     min_gap >= 2 * step.
//   kPositive: uniform in [0.5, 1.5).
//   kLabels: integers in [0, label_classes), stored as float.
void fill_inputs(const LayerExample& example, const BlobVec& bottoms, Rng& rng, float min_gap);

void fill_gaussian(Tensor& t, Rng& rng, float mean = 0.0f, float stddev = 1.0f);
void fill_uniform(Tensor& t, Rng& rng, float lo, float hi);
// Moves the values (in place, keeping their order) so that sorted neighbours
// are at least `gap` apart and every value is at least `gap` from 0.
void separate_values(const std::vector<float*>& values, float gap);

std::vector<float> to_vector(const Tensor& t);
void copy_into(Tensor& t, const std::vector<float>& v);  // sizes must match

// The values of a tensor stored in f32, bf16 or f16, on any device, widened
// to f32 on the host.
std::vector<float> widened(const Tensor& t);
// t = v rounded to t's dtype (f32, bf16 or f16; to the nearest, ties to
// even), wherever t lives; sizes must match.
void store_rounded(Tensor& t, const std::vector<float>& v);
// Every bottom and top blob of `h` (data and diff) stored in `storage`, its
// values rounded to it: the harness as a Net whose storage dtype it is would
// hand the layer its blobs (framework/net_storage.cpp), and the layer's
// call_dtype set to it. Parameters stay f32, and so do the blobs the layer
// declares f32 (Layer::bottom_stays_f32, top_stays_f32: labels, a loss).
void store_blobs_as(LayerHarness& h, DType storage);

// Appends to `out` the elements where |a - b| > tolerance * max(1, |a|,
// |b|) (NaN counts), as "WHAT element I: A_NAME a vs B_NAME b (tolerance
// ...)", at most five, then a count; a size mismatch as one line. What the
// CPU-against-CUDA and the 16-bit checks report.
void compare_values(std::vector<std::string>& out, const std::string& what, const std::string& a_name,
                    const std::vector<float>& a, const std::string& b_name, const std::vector<float>& b,
                    float tolerance);

// a.setup() and b.setup(), then b's parameters given a's values: two
// harnesses of one example that a check compares. Empty, or the problem
// when the two layers made different parameters.
std::string set_up_with_shared_params(LayerHarness& a, LayerHarness& b, const std::string& type);

// Which bottoms a check takes a gradient for: those the layer can backward
// to, never labels.
std::vector<bool> gradient_targets(const LayerHarness& h, const LayerExample& example);
// Per-top weights of a check's objective (and its top diffs): the loss
// weight for loss tops, else N(0, 1).
std::vector<std::vector<float>> top_weights(const LayerHarness& h, Rng& rng);

}  // namespace strata
