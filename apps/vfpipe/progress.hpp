// A one-line progress display on stderr for long batch runs (only when stderr is a TTY).
#pragma once
#include <cstdint>
#include <mutex>
#include <string>

namespace vfp {

class Progress {
 public:
  Progress(bool enabled, int64_t total);
  // Thread-safe; redraws at most 10 times a second.
  void update(int64_t done, int64_t dropped);
  void finish();  // erases the line

 private:
  bool enabled_;
  int64_t total_;
  int64_t start_ns_, last_draw_ns_ = 0;
  bool drawn_ = false;
  std::mutex mu_;
};

std::string render_progress_line(int64_t done, int64_t total, int64_t dropped, double elapsed_s,
                                 int width);

}  // namespace vfp
