#include "core/registry.hpp"

#include "core/error.hpp"

namespace vfp {

void Registry::add(StageInfo info) {
  if (find(info.name)) throw Error(ErrorKind::Internal, "stage '" + info.name + "' registered twice");
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

std::unique_ptr<Stage> Registry::create(const StageInfo& info, const Options& opts) const {
  std::unique_ptr<Stage> st = info.create(opts);
  st->set_info(&info);
  st->set_options(opts);
  return st;
}

}  // namespace vfp
