// Live parameter changes from the display's keys, for every stage that declares a live
// parameter (StageInfo::live): the display thread edits a copy of each
// stage's options; the worker thread applies the pending ones before its next frame
// (Stage::update), so frames in flight keep their parameters.
#pragma once
#include <mutex>
#include <string>
#include <vector>

#include "core/stage.hpp"
#include "pipeline/chain.hpp"

namespace vfp {

class LiveControls {
 public:
  explicit LiveControls(const Chain& chain);

  // Display thread.
  size_t count() const { return entries_.size(); }
  size_t selected() const { return selected_; }
  void select_next();
  // Steps the live parameter the selected stage declares (StageInfo::live: median radius,
  // conv kernel preset, wavelet threshold). Returns what changed ("median radius=3").
  std::string adjust(int direction);
  std::string describe(size_t i) const;  // "median radius=2"
  // Switches the selected stage off or on again (only stages that keep the frame's format).
  std::string toggle();

  // Worker thread (EngineConfig::before_frame): hands pending changes to the stages.
  void apply(Chain& chain);
  // Whether apply() has a change to hand on (EngineConfig::change_due).
  bool pending() const;

 private:
  struct Entry {
    size_t step;            // index in the chain
    const StageInfo* info;  // the stage's declaration (its live parameter)
    Options options;        // the display thread's copy
    bool dirty = false;
    bool can_bypass = false, off = false, off_dirty = false;
  };
  mutable std::mutex mu_;
  std::vector<Entry> entries_;
  size_t selected_ = 0;
};

}  // namespace vfp
