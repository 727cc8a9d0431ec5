// FFmpeg-style filter strings: "name=key=value:key=value,name2=v1:v2".
//   - filters are separated by ',' and options by ':'
//   - an option is key=value, or a bare value matched to options in declaration order
//     (positional), as FFmpeg allows; positional values must come before named ones
//   - values may be quoted with '...' or have single characters escaped with '\'
// Errors are vfp::ParseError pointing at the offending characters.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/registry.hpp"
#include "core/stage.hpp"

namespace vfp {

struct FilterArg {
  std::string key;  // empty for positional
  std::string value;
  size_t key_pos = 0, value_pos = 0, value_len = 0;
};

struct FilterSpec {
  std::string name;
  size_t name_pos = 0;
  std::vector<FilterArg> args;
};

// Syntax only. `text` is the whole string (kept in errors).
std::vector<FilterSpec> parse_filter_string(const std::string& text);

// Validates one filter's arguments against option specs; `what` names it in errors.
Options bind_options(const std::vector<OptionSpec>& specs, const FilterSpec& f, const std::string& text,
                     const std::string& what);

// Parses, looks up every filter in the registry, validates and creates the stages.
std::vector<std::unique_ptr<Stage>> build_stages(const std::string& text, const Registry& reg);

}  // namespace vfp
