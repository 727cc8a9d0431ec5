// The stage list. `vfpipe filters` shows the stages in this order.
#include "stages/builtin.hpp"

#include "core/filter_parser.hpp"

namespace vfp {

Registry& registry() {
  static Registry* reg = [] {
    auto* r = new Registry;
    register_null_stage(*r);
    register_mmp_stage(*r);
    register_format_stage(*r);
    register_median_stage(*r);
    register_conv_stage(*r);
    register_wavelet_stage(*r);
    return r;
  }();
  return *reg;
}

std::vector<std::unique_ptr<Stage>> build_stages(const std::string& text) { return build_stages(text, registry()); }

}  // namespace vfp
