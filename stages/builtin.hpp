// Registration of the built-in stages. Each stage file defines one register_* function;
// add new stages here (explicit calls survive static linking, unlike static initialisers).
#pragma once
#include <memory>

#include "pipeline/frame.hpp"

namespace vfp {
class Registry;
class Stage;
void register_builtin_stages(Registry& reg);
void register_null_stage(Registry& reg);
void register_format_stage(Registry& reg);
void register_median_stage(Registry& reg);
void register_conv_stage(Registry& reg);
void register_wavelet_stage(Registry& reg);
void register_mmp_stage(Registry& reg);
// A format stage converting to `target`, as inserted automatically by the chain builder.
std::unique_ptr<Stage> make_format_stage(PixelFormat target);
}  // namespace vfp
