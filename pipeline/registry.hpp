// Stages registered by name (and aliases). Built-in stages register themselves on first use.
#pragma once
#include <string>
#include <vector>

#include "pipeline/stage.hpp"

namespace vfp {

class Registry {
 public:
  void add(StageInfo info);
  const StageInfo* find(const std::string& name_or_alias) const;
  const std::vector<StageInfo>& all() const { return stages_; }

 private:
  std::vector<StageInfo> stages_;
};

// The process-wide registry, with the built-in stages already added.
Registry& registry();

}  // namespace vfp
