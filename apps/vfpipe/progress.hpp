// A one-line progress display on stderr for long batch runs (only when stderr is a TTY),
// and periodic statistics lines for long or live runs.
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "pipeline/stats.hpp"

namespace vfp {

class Progress {
 public:
  Progress(bool enabled, int64_t total, double rate = 0);
  // Thread-safe; redraws at most 10 times a second.
  void update(int64_t done, int64_t dropped);
  void finish();  // erases the line

 private:
  bool enabled_;
  int64_t total_;
  double rate_;
  int64_t start_ns_, last_draw_ns_ = 0;
  bool drawn_ = false;
  std::mutex mu_;
};

// --stats-every S: one line per S seconds of a long run (soak tests, live monitoring): the
// window's frames, rate, drops, end-to-end latency p50/p99/max, the process's resident
// memory and the GPU's memory in use. Called on the sink thread.
class PeriodicStats {
 public:
  // gpu_memory: bytes in use on the GPU (empty: not shown).
  PeriodicStats(double period_s, std::function<size_t()> gpu_memory);
  void frame(const FrameRecord& rec, int64_t dropped_total);
  void finish(int64_t dropped_total);  // the last, partial window

 private:
  void emit(int64_t now, int64_t dropped_total);
  int64_t period_ns_, start_ns_, window_start_ns_;
  int64_t dropped_at_window_start_ = 0;
  std::vector<double> e2e_ms_;
  std::function<size_t()> gpu_memory_;
};
// -progress FILE (ffmpeg's machine-readable progress): blocks of key=value lines, every
// half second and at the end, for scripts and batch tools; "-" writes to stderr. Called on
// the sink thread.
class ProgressFile {
 public:
  ProgressFile(const std::string& path, double rate);  // throws vfp::Error (Output)
  ~ProgressFile();
  void update(int64_t done, int64_t dropped);
  void finish(int64_t done, int64_t dropped);  // the last block: progress=end

 private:
  void write(int64_t done, int64_t dropped, bool end);
  std::FILE* f_;
  bool own_;
  double rate_;
  int64_t start_ns_, last_ns_ = 0;
};

// Resident set size of this process in bytes (/proc/self/statm).
size_t resident_bytes();

// `rate`: the stream's frames per second (0: unknown); with it the line shows the speed as a
// multiple of real time, as ffmpeg's does.
std::string render_progress_line(int64_t done, int64_t total, int64_t dropped, double elapsed_s, int width,
                                 double rate = 0);

}  // namespace vfp
