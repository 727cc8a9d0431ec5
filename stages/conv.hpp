// The `conv` stage's option declaration and its translation into kernel parameters
// (cpu/conv.hpp), for the tests that build kernels the way the stage does.
#pragma once
#include <vector>

#include "core/options.hpp"
#include "cpu/conv.hpp"

namespace vfp {

const std::vector<OptionSpec>& conv_options();
// Parameters from validated options; *use_separable tells whether to run two passes.
ConvParams conv_params_from_options(const Options& o, bool* use_separable);

}  // namespace vfp
