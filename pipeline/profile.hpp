// Latency profiling: statistics, reports and traces computed from a run's per-frame
// records (pipeline/stats.hpp, filled by the engine).
//
//   summarize_profile   per step and per hand-off segment: count, min, mean, p50, p90, p95,
//                       p99, max; throughput; drops; the fraction of copy time hidden
//                       behind compute (CUDA backend)
//   profile_text/json   the readable table and the JSON profile (`vfpipe profile --json`)
//   chrome_trace_json   Chrome trace-event JSON for Perfetto / chrome://tracing: one track
//                       per host thread and per CUDA stream, stages nested in their frame
//   html_report         one self-contained HTML file with SVG plots (no script, no network)
//   compare_profiles    per-step differences between two JSON profiles
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pipeline/stats.hpp"

namespace vfp {

struct Interval {
  int64_t begin = 0, end = 0;
};
// Length covered by the union of the intervals.
int64_t union_length(std::vector<Interval> v);
// Length covered by both unions: |U(a) ∩ U(b)|.
int64_t intersection_length(std::vector<Interval> a, std::vector<Interval> b);

struct ProfileRow {
  std::string name;
  std::string track;  // where it runs (a thread or a CUDA stream); "" for host segments
  bool copy = false;
  Summary ms;
};

struct ProfileSummary {
  std::vector<ProfileRow> steps;     // as RunReport::steps (GPU or CPU time of each)
  std::vector<ProfileRow> segments;  // host hand-offs: read, input queue, process, output, end-to-end
  std::vector<ProfileRow> metrics;   // the stages' StageContext::metrics, in their own units (in `ms`)
  size_t counted = 0;                // frames in the statistics (after warm-up)
  double fps = 0;                    // steady state: counted frames over their output span
  double copy_ms = 0;                // total copy time of the counted frames (union)
  double hidden_copy_fraction = -1;  // of that, the part overlapped by compute; -1: no copies
};

ProfileSummary summarize_profile(const RunReport& r);
std::string profile_text(const RunReport& r, const ProfileSummary& p);
nlohmann::json profile_json(const RunReport& r, const ProfileSummary& p, bool per_frame);
// `frames` limits the trace to that many counted frames from the start (0 = all).
std::string chrome_trace_json(const RunReport& r, size_t frames = 0);
std::string html_report(const RunReport& r, const ProfileSummary& p);
// A table of per-step and end-to-end differences (p50, p95, mean, fps) of two profiles
// written by profile_json. `regressed` (if given) is set when a p50 of B exceeds A's by
// more than `threshold_pct` percent.
std::string compare_profiles(const nlohmann::json& a, const nlohmann::json& b, double threshold_pct, bool* regressed);

}  // namespace vfp
