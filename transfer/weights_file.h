// Opening weight files written by PyTorch's safetensors package, which may
// hold tensors of dtypes strata does not read: BatchNorm's
// num_batches_tracked is I64. framework's SafetensorsReader rejects such a
// file whole; open_weights_file re-declares those tensors as U8 byte ranges
// at the same offsets (the data is untouched), so the rest reads normally and
// name maps can drop or report them.
#pragma once

#include <map>
#include <string>

#include "framework/io/safetensors.h"

namespace strata::transfer {

// Like SafetensorsReader(path); `foreign_dtypes` (optional) receives the name
// and stored dtype ("I64") of each re-declared tensor. Other damage is the
// reader's IoError as usual.
SafetensorsReader open_weights_file(const std::string& path,
                                    std::map<std::string, std::string>* foreign_dtypes = nullptr);

}  // namespace strata::transfer
