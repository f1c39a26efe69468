// InputSavingNeuronLayer: a NeuronLayer whose backward reads its input x
// (Power, Log, AbsVal, ELU with a negative alpha). In place, forward would
// overwrite x with y, so it keeps a copy of x first; out of place backward
// reads the bottom itself. Not a layer type of its own.
#pragma once

#include "layers/neuron_layer.h"

namespace strata {

class InputSavingNeuronLayer : public NeuronLayer {
 public:
  using NeuronLayer::NeuronLayer;

  void reshape(const BlobVec& bottom, const BlobVec& top) override {
    NeuronLayer::reshape(bottom, top);
    if (keeps_copy(bottom, top)) input_copy_.resize(bottom[0]->shape());
  }

 protected:
  // False for a configuration whose backward reads only the output (ELU with
  // alpha >= 0): then nothing is copied.
  virtual bool backward_reads_input() const { return true; }

  // The first thing forward_cpu() does.
  void save_input_cpu(const BlobVec& bottom, const BlobVec& top) {
    if (keeps_copy(bottom, top)) input_copy_.copy_from(bottom[0]->data);
  }
  // The input backward reads: the bottom, or its copy when in place.
  const Tensor& saved_input(const BlobVec& top, const BlobVec& bottom) const {
    return top[0] == bottom[0] ? input_copy_ : bottom[0]->data;
  }
#ifdef STRATA_WITH_CUDA
  // The first thing forward_cuda() does (layers/neuron_input_layer.cu).
  void save_input_cuda(const BlobVec& bottom, const BlobVec& top);
#endif

 private:
  bool keeps_copy(const BlobVec& bottom, const BlobVec& top) const {
    return top[0] == bottom[0] && backward_reads_input();
  }

  Tensor input_copy_;  // the input, kept only in place
};

}  // namespace strata
