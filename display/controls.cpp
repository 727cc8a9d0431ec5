#include "display/controls.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/log.hpp"

namespace vfp {

LiveControls::LiveControls(const Chain& chain) {
  for (size_t i = 0; i < chain.size(); ++i) {
    const Stage& st = *chain.step(i).stage;
    const StageInfo* info = st.info();
    if (!info || info->live.option.empty()) continue;  // nothing to adjust
    entries_.push_back({i, info, st.options(), false, chain.step(i).in == chain.step(i).out, false, false});
  }
}

void LiveControls::select_next() {
  std::lock_guard<std::mutex> lk(mu_);
  if (!entries_.empty()) selected_ = (selected_ + 1) % entries_.size();
}

namespace {
// Whether the options the live parameter sets with each change (LiveParam::sets) hold.
bool engaged(const LiveParam& lp, const Options& o) {
  for (const auto& [k, v] : lp.sets)
    if (o.str(k) != v) return false;
  return true;
}
}  // namespace

std::string LiveControls::describe(size_t i) const {
  std::lock_guard<std::mutex> lk(mu_);
  if (i >= entries_.size()) return "";
  const Entry& e = entries_[i];
  const LiveParam& lp = e.info->live;
  std::string d = e.info->name;
  if (engaged(lp, e.options))
    d += " " + lp.option + "=" + e.options.str(lp.option);
  else  // the parameter is not in use yet: show what is (wavelet: its threshold rule)
    for (const auto& kv : lp.sets) d += " " + e.options.str(kv.first);
  return e.off ? d + " (off)" : d;
}

std::string LiveControls::adjust(int dir) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (entries_.empty()) return "no stage to adjust";
    Entry& e = entries_[selected_];
    Options& o = e.options;
    const LiveParam& lp = e.info->live;
    const std::string& cur = o.str(lp.option);
    std::string next;
    switch (lp.step) {
      case LiveParam::Step::Add: {
        const double v = std::clamp(std::strtod(cur.c_str(), nullptr) + dir * lp.amount, lp.min, lp.max);
        next = log::format("%.10g", v);
        break;
      }
      case LiveParam::Step::Scale: {
        // Until the parameter is engaged, the first press lands on `start` from either side.
        double v = engaged(lp, o) ? std::strtod(cur.c_str(), nullptr) : lp.start / std::pow(lp.amount, dir);
        v = std::clamp(v * std::pow(lp.amount, dir), lp.min, lp.max);
        next = log::format("%.3g", v);
        break;
      }
      case LiveParam::Step::Cycle: {
        const int n = static_cast<int>(lp.values.size());
        int k = 0;
        for (int j = 0; j < n; ++j)
          if (cur == lp.values[static_cast<size_t>(j)]) k = j;
        next = lp.values[static_cast<size_t>(((k + dir) % n + n) % n)];
        break;
      }
    }
    for (const std::string& r : lp.resets)
      for (const OptionSpec& spec : e.info->options)
        if (spec.name == r) o.set(spec.name, spec.default_value, false);
    for (const auto& [k, v] : lp.sets) o.set(k, v, true);
    o.set(lp.option, next, true);
    e.dirty = true;
  }
  return describe(selected_);
}

std::string LiveControls::toggle() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (entries_.empty()) return "no stage to switch off";
    Entry& e = entries_[selected_];
    if (!e.can_bypass) return e.info->name + " changes the format: it cannot be switched off";
    e.off = !e.off;
    e.off_dirty = true;
  }
  return describe(selected_);
}

bool LiveControls::pending() const {
  std::lock_guard<std::mutex> lk(mu_);
  for (const Entry& e : entries_)
    if (e.dirty || e.off_dirty) return true;
  return false;
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
      log::warn("%s: live change refused: %s", e.info->name.c_str(), ex.what());
      e.options = st.options();  // back to what the stage runs
    }
  }
}

}  // namespace vfp
