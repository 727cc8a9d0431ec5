// The built-in stages: the list that fills the process-wide registry (stages/builtin.cpp).
// A new stage defines one register_* function in its own file and adds one line to that list
// (explicit calls survive static linking, unlike static initialisers); docs/adding-a-stage.md.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/frame.hpp"
#include "core/registry.hpp"

namespace vfp {
class Stage;

// The process-wide registry, with every built-in stage added.
Registry& registry();
// Parses a filter string and creates its stages from registry() (core/filter_parser.hpp).
std::vector<std::unique_ptr<Stage>> build_stages(const std::string& text);

void register_null_stage(Registry& reg);
void register_format_stage(Registry& reg);
void register_median_stage(Registry& reg);
void register_conv_stage(Registry& reg);
void register_wavelet_stage(Registry& reg);
void register_mmp_stage(Registry& reg);
// A format stage converting to `target`, as inserted automatically by the chain builder.
std::unique_ptr<Stage> make_format_stage(PixelFormat target);
}  // namespace vfp
