// Stages registered by name (and aliases). The stages layer fills the process-wide one
// (stages/builtin.hpp: registry()).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/stage.hpp"

namespace vfp {

class Registry {
 public:
  void add(StageInfo info);
  const StageInfo* find(const std::string& name_or_alias) const;
  // A stage from validated options (filter_parser.hpp: bind_options), with its declaration
  // and options attached. Throws what the stage's factory throws (OptionError, Error).
  std::unique_ptr<Stage> create(const StageInfo& info, const Options& opts) const;
  const std::vector<StageInfo>& all() const { return stages_; }

 private:
  std::vector<StageInfo> stages_;
};

}  // namespace vfp
