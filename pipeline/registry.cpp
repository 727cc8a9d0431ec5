#include "pipeline/registry.hpp"

#include "pipeline/error.hpp"
#include "stages/builtin.hpp"

namespace vfp {

void Registry::add(StageInfo info) {
  if (find(info.name))
    throw Error(ErrorKind::Internal, "stage '" + info.name + "' registered twice");
  stages_.push_back(std::move(info));
}

const StageInfo* Registry::find(const std::string& n) const {
  for (const auto& s : stages_) {
    if (s.name == n) return &s;
    for (const auto& a : s.aliases)
      if (a == n) return &s;
  }
  return nullptr;
}

Registry& registry() {
  static Registry* reg = [] {
    auto* r = new Registry;
    register_builtin_stages(*r);
    return r;
  }();
  return *reg;
}

}  // namespace vfp
