// Stages registered by name (and aliases). The stages layer fills the process-wide one
// (stages/builtin.hpp: registry()).
#pragma once
#include <string>
#include <vector>

#include "core/stage.hpp"

namespace vfp {

class Registry {
 public:
  void add(StageInfo info);
  const StageInfo* find(const std::string& name_or_alias) const;
  const std::vector<StageInfo>& all() const { return stages_; }

 private:
  std::vector<StageInfo> stages_;
};

}  // namespace vfp
