// Per-frame timing records and their summaries. The engine fills one FrameRecord per
// frame that reaches the sink; the summary and JSON report are computed from them.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace vfp {

// Host timestamps are steady-clock nanoseconds (now_ns()). GPU steps are timed by CUDA
// events and placed on the same clock through an anchor event (pipeline/engine.cpp).
struct FrameRecord {
  int64_t index = 0;                                // source frame number
  int64_t read_ns = 0;                              // source thread started reading the frame
  int64_t capture_ns = 0;                           // source produced the frame
  int64_t enqueue_ns = 0;                           // in the input queue (after waiting for room, batch policy)
  int64_t submit_ns = 0;                            // taken by the worker, handed to the backend
  int64_t launched_ns = 0;                          // worker finished enqueueing its GPU work (CPU: = done)
  int64_t done_ns = 0;                              // backend finished (download complete)
  int64_t write_ns = 0;                             // sink thread started writing
  int64_t output_ns = 0;                            // sink finished writing
  int64_t display_ns = 0;                           // the display presented it (0: not shown)
  std::vector<float> step_ms;                       // GPU (CUDA events) or CPU time of each step, see RunReport::steps
  std::vector<int64_t> step_start_ns, step_end_ns;  // the same steps on the host clock
  int64_t clock_error_ns = 0;      // GPU steps: their host-clock times are right within this (the anchor's)
  std::vector<std::string> notes;  // per chain stage: StageContext::note ("" if none)
  std::vector<std::pair<std::string, double>> metrics;  // StageContext::metrics of every stage, in chain order
};

struct Summary {
  size_t count = 0;
  double min = 0, mean = 0, p50 = 0, p90 = 0, p95 = 0, p99 = 0, max = 0;
};

// Percentiles use linear interpolation between closest ranks (numpy's default):
// p-th percentile of sorted x[0..n-1] = x[k] + (x[k+1]-x[k])*f with k+f = p/100*(n-1).
Summary summarize(std::vector<double> values);
double percentile_sorted(const std::vector<double>& sorted, double p);

struct RunReport {
  std::string backend;  // "cuda" or "cpu"
  std::string device;   // GPU name or "CPU"
  std::string input, output, filters, chain;
  std::string input_spec, output_spec;
  std::vector<std::string> steps;  // names of FrameRecord::step_ms entries
  // Where each step runs ("CUDA upload stream", "CUDA compute stream", "CUDA download
  // stream", "worker thread") and whether it is a host<->device copy.
  std::vector<std::string> step_tracks;
  std::vector<bool> step_copy;
  std::vector<FrameRecord> frames;   // in output order; at most max_records, the newest
  size_t max_records = 0;            // 0 = unbounded
  int64_t records_evicted = 0;       // older records dropped to stay within max_records
  int64_t frames_in = 0;             // read from the source
  int64_t frames_out = 0;            // written to the sink
  int64_t dropped = 0;               // live policy: frames replaced by newer ones before processing
  double wall_s = 0;                 // first capture to last output
  double start_s = 0, finish_s = 0;  // the engine's setup (buffers, streams) and its teardown
  int warmup = 0;                    // records skipped in the statistics
  int depth = 0;                     // frames in flight
  bool interrupted = false;
  size_t input_queue_high_water = 0;
  size_t bytes_up = 0, bytes_down = 0;  // per frame

  double fps() const { return wall_s > 0 ? frames_out / wall_s : 0; }
  // Index of the first record in the statistics: warm-up frames still held are skipped,
  // unless that would leave none (a run no longer than its warm-up is summarized whole).
  size_t first_counted() const {
    const int64_t skip = warmup - records_evicted;
    return skip > 0 && static_cast<size_t>(skip) < frames.size() ? static_cast<size_t>(skip) : 0;
  }
  // True when the warm-up was not applied because the run had no frames after it.
  bool warmup_waived() const {
    return warmup > 0 && !frames.empty() && warmup - records_evicted >= static_cast<int64_t>(frames.size());
  }
  // "10 warm-up frames skipped", or why none were.
  std::string warmup_text() const;
  Summary step_summary(size_t i) const;
  Summary latency_summary() const;  // capture -> output, ms
  std::string text() const;         // the human summary table
  std::string json(bool per_frame) const;
};

}  // namespace vfp
