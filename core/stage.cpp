#include "core/stage.hpp"

#include <cstdlib>

#include "core/error.hpp"
#include "core/log.hpp"

namespace vfp {

void Stage::update(const Options&) {
  throw Error(ErrorKind::Usage, "filter '" + name_ + "' cannot change its options while running");
}

const char* backend_name(Backend b) { return b == Backend::CUDA ? "cuda" : "cpu"; }

void Stage::run_cuda(const ImageView&, const ImageView&, const StageContext&) {
  throw Error(ErrorKind::Internal, "stage '" + name_ + "' has no CUDA implementation");
}

void Options::set(const std::string& name, const std::string& value, bool explicit_value) {
  values_[name] = value;
  explicit_[name] = explicit_value;
}

bool Options::is_explicit(const std::string& name) const {
  auto it = explicit_.find(name);
  return it != explicit_.end() && it->second;
}

const std::string& Options::str(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) throw Error(ErrorKind::Internal, "option '" + name + "' not declared");
  return it->second;
}

long long Options::integer(const std::string& name) const {
  return std::strtoll(str(name).c_str(), nullptr, 10);
}
double Options::number(const std::string& name) const { return std::strtod(str(name).c_str(), nullptr); }
bool Options::flag(const std::string& name) const {
  const std::string& v = str(name);
  return v == "1" || v == "true" || v == "yes" || v == "on";
}

std::string Options::to_string() const {
  std::string r;
  for (const auto& [k, v] : values_) {
    if (!is_explicit(k)) continue;
    if (!r.empty()) r += ':';
    r += k + "=" + v;
  }
  return r;
}

}  // namespace vfp
