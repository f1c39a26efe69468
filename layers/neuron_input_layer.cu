#include "framework/cuda/math.h"
#include "layers/neuron_input_layer.h"

namespace strata {

void InputSavingNeuronLayer::save_input_cuda(const BlobVec& bottom, const BlobVec& top) {
  if (!keeps_copy(bottom, top)) return;
  cuda::ensure_on_device(input_copy_, bottom[0]->shape(), DType::kF32, device());
  cuda::copy(bottom[0]->numel(), bottom[0]->data.device_data<float>(), input_copy_.device_data<float>());
}

}  // namespace strata
