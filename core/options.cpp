#include "core/options.hpp"

#include "core/error.hpp"
#include "core/log.hpp"

namespace vfp {

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

std::string Options::to_string() const {
  std::string r;
  for (const auto& [k, v] : values_) {
    if (!is_explicit(k)) continue;
    if (!r.empty()) r += ':';
    r += k + "=" + v;
  }
  return r;
}

std::string format_option_number(double v) { return log::format("%g", v); }

}  // namespace vfp
