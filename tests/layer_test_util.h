// The layer tests' names for the layer harness (framework/layer_harness.h),
// which `strata check-layers` runs layers in too.
#pragma once

#include "framework/layer_harness.h"

namespace strata {
namespace test_util {

using ::strata::build_any;
using ::strata::copy_into;
using ::strata::default_num_tops;
using ::strata::fill_gaussian;
using ::strata::fill_inputs;
using ::strata::fill_uniform;
using ::strata::input_kind;
using ::strata::LayerHarness;
using ::strata::make_harness;
using ::strata::make_spec;
using ::strata::separate_values;
using ::strata::to_vector;

}  // namespace test_util
}  // namespace strata
