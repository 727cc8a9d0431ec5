#include "display/controls.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/log.hpp"
#include "stages/builtin.hpp"

namespace vfp {

namespace {
const char* kConvPresets[] = {"identity", "box", "gauss", "sharpen", "unsharp", "laplacian", "edge", "emboss", "sobel", "scharr"};
}

LiveControls::LiveControls(const Chain& chain) {
  for (size_t i = 0; i < chain.size(); ++i) {
    const Stage& st = *chain.step(i).stage;
    if (st.name() == "format" || st.name() == "null") continue;  // nothing to adjust
    entries_.push_back({i, st.name(), st.options(), false, chain.step(i).in == chain.step(i).out, false, false});
  }
}

void LiveControls::select_next() {
  std::lock_guard<std::mutex> lk(mu_);
  if (!entries_.empty()) selected_ = (selected_ + 1) % entries_.size();
}

std::string LiveControls::describe(size_t i) const {
  std::lock_guard<std::mutex> lk(mu_);
  if (i >= entries_.size()) return "";
  const Entry& e = entries_[i];
  const Options& o = e.options;
  std::string d = e.name;
  if (e.name == "median") d = "median radius=" + o.str("radius");
  if (e.name == "conv") d = "conv kernel=" + o.str("kernel");
  if (e.name == "wavelet")
    d = o.str("method") == "fixed" ? "wavelet threshold=" + o.str("threshold") : "wavelet " + o.str("method");
  return e.off ? d + " (off)" : d;
}

std::string LiveControls::adjust(int dir) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (entries_.empty()) return "no stage to adjust";
    Entry& e = entries_[selected_];
    Options& o = e.options;
    if (e.name == "median") {
      const long long r = std::clamp<long long>(o.integer("radius") + dir, 1, 127);
      o.set("radius", std::to_string(r), true);
    } else if (e.name == "conv") {
      const int n = static_cast<int>(std::size(kConvPresets));
      int k = 0;
      for (int i = 0; i < n; ++i)
        if (o.str("kernel") == kConvPresets[i]) k = i;
      k = ((k + dir) % n + n) % n;
      o.set("kernel", kConvPresets[k], true);
      // The preset's own size, sigma, amount, rdiv, bias: back to the option defaults.
      if (const StageInfo* info = registry().find("conv"))
        for (const auto& spec : info->options)
          if (spec.name != "kernel" && spec.name != "border" && spec.name != "planes" && spec.name != "value")
            o.set(spec.name, spec.default_value, false);
    } else if (e.name == "wavelet") {
      // The threshold becomes fixed at the first press (8 levels), then scales by 1.25.
      double t = o.str("method") == "fixed" ? o.number("threshold") : 8.0 / std::pow(1.25, dir);
      t = std::clamp(t * std::pow(1.25, dir), 0.25, 1000.0);
      o.set("method", "fixed", true);
      o.set("threshold", log::format("%.3g", t), true);
    } else {
      return e.name + " has no live parameter";
    }
    e.dirty = true;
  }
  return describe(selected_);
}

std::string LiveControls::toggle() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (entries_.empty()) return "no stage to switch off";
    Entry& e = entries_[selected_];
    if (!e.can_bypass) return e.name + " changes the format: it cannot be switched off";
    e.off = !e.off;
    e.off_dirty = true;
  }
  return describe(selected_);
}

void LiveControls::apply(Chain& chain) {
  std::lock_guard<std::mutex> lk(mu_);
  for (Entry& e : entries_) {
    if (e.off_dirty) {
      e.off_dirty = false;
      chain.step(e.step).stage->set_bypass(e.off);
    }
    if (!e.dirty) continue;
    e.dirty = false;
    Stage& st = *chain.step(e.step).stage;
    try {
      st.update(e.options);
    } catch (const std::exception& ex) {
      log::warn("%s: live change refused: %s", e.name.c_str(), ex.what());
      e.options = st.options();  // back to what the stage runs
    }
  }
}

}  // namespace vfp
