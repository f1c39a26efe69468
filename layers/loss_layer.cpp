#include "layers/loss_layer.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include "framework/error.h"

namespace strata {

LossNormalization read_loss_normalization(const ConfigNode& loss_param, LossNormalization fallback) {
  if (loss_param.has("normalization")) {
    const std::string mode = loss_param.get_enum("normalization", {"VALID", "BATCH_SIZE", "FULL", "NONE"}, "VALID");
    return mode == "VALID"        ? LossNormalization::kValid
           : mode == "BATCH_SIZE" ? LossNormalization::kBatchSize
           : mode == "FULL"       ? LossNormalization::kFull
                                  : LossNormalization::kNone;
  }
  if (loss_param.has("normalize")) {
    return loss_param.get_bool("normalize", true) ? LossNormalization::kValid : LossNormalization::kBatchSize;
  }
  return fallback;
}

std::optional<int64_t> read_ignore_label(const ConfigNode& loss_param) {
  if (!loss_param.has("ignore_label")) return std::nullopt;
  return loss_param.get_int("ignore_label");
}

double loss_divisor(LossNormalization mode, int64_t outer, int64_t positions, int64_t valid) {
  double n = 1.0;
  switch (mode) {
    case LossNormalization::kValid: n = static_cast<double>(valid); break;
    case LossNormalization::kBatchSize: n = static_cast<double>(outer); break;
    case LossNormalization::kFull: n = static_cast<double>(positions); break;
    case LossNormalization::kNone: n = 1.0; break;
  }
  return std::max(1.0, n);
}

int32_t class_label(const std::string& where, float v, int64_t index, int64_t inner, int64_t classes,
                    const std::optional<int64_t>& ignore_label) {
  if (ignore_label && v == static_cast<float>(*ignore_label)) return -1;
  if (!(v >= 0.0f && v < static_cast<float>(classes)) || v != std::floor(v)) {
    std::ostringstream label;
    label << "label " << v << " at index " << index;
    fail_class_label(where, label.str(), index, inner, classes, ignore_label);
  }
  return static_cast<int32_t>(v);
}

void fail_class_label(const std::string& where, const std::string& label, int64_t index, int64_t inner,
                      int64_t classes, const std::optional<int64_t>& ignore_label) {
  fail<Error>(where, ": ", label, " (sample ", index / std::max<int64_t>(1, inner), ") is not a class index in [0, ",
              classes, ")", ignore_label ? " or the ignore_label " + std::to_string(*ignore_label) : std::string(),
              "; check the labels or the number of scores per sample (", classes, ")");
}

void report_bad_label_of_previous_batch(const std::string& where, int64_t bad_index, int64_t inner, int64_t classes,
                                        const std::optional<int64_t>& ignore_label) {
  if (bad_index < 0) return;
  fail_class_label(where, "the label at index " + std::to_string(bad_index) + " of the previous batch", bad_index,
                   inner, classes, ignore_label);
}

}  // namespace strata
