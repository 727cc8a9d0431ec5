#include "pipeline/profile.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/log.hpp"

namespace vfp {

using nlohmann::json;

namespace {

std::vector<Interval> merged(std::vector<Interval> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](const Interval& i) { return i.end <= i.begin; }), v.end());
  std::sort(v.begin(), v.end(), [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  std::vector<Interval> out;
  for (const Interval& i : v) {
    if (!out.empty() && i.begin <= out.back().end)
      out.back().end = std::max(out.back().end, i.end);
    else
      out.push_back(i);
  }
  return out;
}

json summary_json(const Summary& s) {
  return json{{"count", s.count}, {"min", s.min}, {"mean", s.mean}, {"p50", s.p50},
              {"p90", s.p90},     {"p95", s.p95}, {"p99", s.p99},   {"max", s.max}};
}

std::string esc(const std::string& s) {  // HTML / XML text
  std::string r;
  for (char c : s) {
    if (c == '<')
      r += "&lt;";
    else if (c == '>')
      r += "&gt;";
    else if (c == '&')
      r += "&amp;";
    else if (c == '"')
      r += "&quot;";
    else
      r += c;
  }
  return r;
}

const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                         "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

// A "nice" axis maximum: 1, 2 or 5 times a power of ten, at least v.
double nice_max(double v) {
  if (v <= 0) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= v) return m * p;
  return 10 * p;
}

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> pts;
};

// A line chart with axes, ticks and a legend.
std::string svg_lines(const std::string& title, const std::string& xlabel, const std::string& ylabel,
                      const std::vector<Series>& series, int W = 900, int H = 320) {
  const int L = 60, R = 190, T = 30, B = 40;
  double xmin = 1e300, xmax = -1e300, ymax = 0;
  for (const auto& s : series)
    for (auto [x, y] : s.pts) {
      xmin = std::min(xmin, x);
      xmax = std::max(xmax, x);
      ymax = std::max(ymax, y);
    }
  if (xmin > xmax) xmin = 0, xmax = 1;
  if (xmax == xmin) xmax = xmin + 1;
  ymax = nice_max(ymax * 1.05);
  const double pw = W - L - R, ph = H - T - B;
  auto X = [&](double x) { return L + (x - xmin) / (xmax - xmin) * pw; };
  auto Y = [&](double y) { return T + ph - y / ymax * ph; };
  std::string s = log::format("<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' class='plot'>", W, H);
  s += log::format("<text x='%d' y='18' class='title'>%s</text>", L, esc(title).c_str());
  for (int i = 0; i <= 4; ++i) {
    const double y = ymax * i / 4;
    s += log::format("<line x1='%d' x2='%.1f' y1='%.1f' y2='%.1f' class='grid'/>", L, L + pw, Y(y), Y(y));
    s += log::format("<text x='%d' y='%.1f' class='tick' text-anchor='end'>%g</text>", L - 5, Y(y) + 4, y);
  }
  for (int i = 0; i <= 5; ++i) {
    const double x = xmin + (xmax - xmin) * i / 5;
    s += log::format("<text x='%.1f' y='%d' class='tick' text-anchor='middle'>%.0f</text>", X(x), H - B + 16, x);
  }
  s += log::format("<text x='%.1f' y='%d' class='label' text-anchor='middle'>%s</text>", L + pw / 2, H - 6,
                   esc(xlabel).c_str());
  s += log::format("<text x='14' y='%.1f' class='label' transform='rotate(-90 14 %.1f)' text-anchor='middle'>%s</text>",
                   T + ph / 2, T + ph / 2, esc(ylabel).c_str());
  for (size_t k = 0; k < series.size(); ++k) {
    const char* c = kColors[k % 10];
    std::string d;
    // At most ~2000 points per line: keep every n-th (the plot is ~700 px wide).
    const size_t stride = std::max<size_t>(1, series[k].pts.size() / 2000);
    for (size_t i = 0; i < series[k].pts.size(); i += stride)
      d += log::format("%s%.1f,%.1f ", i == 0 ? "M" : "L", X(series[k].pts[i].first), Y(series[k].pts[i].second));
    s += log::format("<path d='%s' stroke='%s' fill='none' stroke-width='1.2'><title>%s</title></path>", d.c_str(), c,
                     esc(series[k].name).c_str());
    s += log::format("<rect x='%.1f' y='%zu' width='12' height='3' fill='%s'/>", L + pw + 12, T + 10 + 16 * k, c);
    std::string n = series[k].name.size() > 26 ? series[k].name.substr(0, 24) + ".." : series[k].name;
    s += log::format("<text x='%.1f' y='%zu' class='tick'>%s</text>", L + pw + 28, T + 15 + 16 * k, esc(n).c_str());
  }
  s += log::format("<rect x='%d' y='%d' width='%.1f' height='%.1f' class='frame'/>", L, T, pw, ph);
  return s + "</svg>";
}

// Histogram (bars, left axis: frames) with the CDF over it (line, right axis: 0..1).
std::string svg_hist_cdf(const std::string& title, std::vector<double> v, int W = 440, int H = 240) {
  const int L = 50, R = 40, T = 28, B = 36, bins = 40;
  std::string s = log::format("<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' class='plot'>", W, H);
  s += log::format("<text x='%d' y='18' class='title'>%s</text>", L, esc(title).c_str());
  if (v.empty()) return s + "</svg>";
  std::sort(v.begin(), v.end());
  const double lo = v.front(), hi = v.back() > lo ? v.back() : lo + 1e-3;
  std::vector<int> h(bins, 0);
  for (double x : v) h[std::min(bins - 1, static_cast<int>((x - lo) / (hi - lo) * bins))]++;
  const int hmax = *std::max_element(h.begin(), h.end());
  const double pw = W - L - R, ph = H - T - B, bw = pw / bins;
  for (int i = 0; i < bins; ++i) {
    const double bh = ph * h[i] / std::max(1, hmax);
    s += log::format(
        "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' class='bar'><title>%.4f-%.4f ms: %d</title></rect>",
        L + i * bw, T + ph - bh, std::max(0.5, bw - 1), bh, lo + (hi - lo) * i / bins, lo + (hi - lo) * (i + 1) / bins,
        h[i]);
  }
  std::string d;
  const size_t stride = std::max<size_t>(1, v.size() / 400);
  for (size_t i = 0; i < v.size(); i += stride)
    d += log::format("%s%.1f,%.1f ", i == 0 ? "M" : "L", L + (v[i] - lo) / (hi - lo) * pw,
                     T + ph - ph * static_cast<double>(i + 1) / v.size());
  d += log::format("L%.1f,%.1f", L + pw, static_cast<double>(T));
  s += log::format("<path d='%s' class='cdf'/>", d.c_str());
  for (int i = 0; i <= 4; ++i) {
    const double x = lo + (hi - lo) * i / 4;
    s += log::format("<text x='%.1f' y='%d' class='tick' text-anchor='middle'>%.3g</text>", L + pw * i / 4, H - B + 15,
                     x);
    s += log::format("<text x='%.1f' y='%.1f' class='tick'>%.2f</text>", L + pw + 4, T + ph - ph * i / 4 + 4, i / 4.0);
  }
  s += log::format("<text x='%d' y='%.1f' class='tick' text-anchor='end'>%d</text>", L - 4, T + 4.0, hmax);
  s += log::format("<text x='%.1f' y='%d' class='label' text-anchor='middle'>ms (bars: frames, line: CDF)</text>",
                   L + pw / 2, H - 6);
  s += log::format("<rect x='%d' y='%d' width='%.1f' height='%.1f' class='frame'/>", L, T, pw, ph);
  return s + "</svg>";
}

struct TraceEvent {
  std::string name;
  std::string track;
  int64_t begin, end;
  int64_t frame;
};

// Every span of the frames [first, first + n) on its track, host and device.
std::vector<TraceEvent> frame_events(const RunReport& r, size_t first, size_t n) {
  std::vector<TraceEvent> ev;
  const bool cuda = !r.step_tracks.empty() && r.step_tracks.front().rfind("CUDA", 0) == 0;
  for (size_t f = first; f < r.frames.size() && f < first + n; ++f) {
    const FrameRecord& fr = r.frames[f];
    const int64_t i = fr.index;
    ev.push_back({"read", "source thread", fr.read_ns, fr.capture_ns, i});
    if (cuda)
      ev.push_back({"submit", "worker thread", fr.submit_ns, fr.launched_ns, i});
    else
      ev.push_back({"frame " + std::to_string(i), "worker thread", fr.submit_ns, fr.done_ns, i});
    // The compute stream's stages nest in one "frame" span on that track.
    int64_t cb = INT64_MAX, ce = INT64_MIN;
    for (size_t s = 0; s < fr.step_start_ns.size() && s < r.steps.size(); ++s) {
      ev.push_back({r.steps[s], r.step_tracks[s], fr.step_start_ns[s], fr.step_end_ns[s], i});
      if (cuda && !r.step_copy[s]) {
        cb = std::min(cb, fr.step_start_ns[s]);
        ce = std::max(ce, fr.step_end_ns[s]);
      }
    }
    if (cuda && cb <= ce) ev.push_back({"frame " + std::to_string(i), "CUDA compute stream", cb, ce, i});
    ev.push_back({"write", "sink thread", fr.write_ns, fr.output_ns, i});
    if (fr.display_ns > 0) ev.push_back({"display", "sink thread", fr.write_ns, fr.display_ns, i});
  }
  return ev;
}

std::vector<std::string> track_order(const RunReport& r) {
  std::vector<std::string> t{"source thread", "worker thread"};
  for (const auto& s : r.step_tracks)
    if (std::find(t.begin(), t.end(), s) == t.end()) t.push_back(s);
  t.push_back("sink thread");
  return t;
}

std::string svg_timeline(const RunReport& r, size_t first, size_t n, int W = 1100) {
  const auto tracks = track_order(r);
  const auto ev = frame_events(r, first, n);
  const int L = 170, R = 60, T = 30, rowh = 26, H = T + rowh * static_cast<int>(tracks.size()) + 40;
  std::string s = log::format("<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' class='plot'>", W, H);
  s += log::format("<text x='%d' y='18' class='title'>Timeline of frames %zu..%zu (colour = frame)</text>", L,
                   first < r.frames.size() ? static_cast<size_t>(r.frames[first].index) : 0,
                   first + n - 1 < r.frames.size() ? static_cast<size_t>(r.frames[first + n - 1].index) : 0);
  if (ev.empty()) return s + "</svg>";
  int64_t t0 = INT64_MAX, t1 = INT64_MIN;
  for (const auto& e : ev) {
    t0 = std::min(t0, e.begin);
    t1 = std::max(t1, e.end);
  }
  const double span_ms = std::max(1e-3, (t1 - t0) / 1e6), pw = W - L - R;
  auto X = [&](int64_t t) { return L + (t - t0) / 1e6 / span_ms * pw; };
  for (size_t k = 0; k < tracks.size(); ++k) {
    const int y = T + rowh * static_cast<int>(k);
    s += log::format("<text x='%d' y='%d' class='tick' text-anchor='end'>%s</text>", L - 6, y + 16,
                     esc(tracks[k]).c_str());
    s += log::format("<line x1='%d' x2='%.1f' y1='%d' y2='%d' class='grid'/>", L, L + pw, y + rowh, y + rowh);
  }
  for (const auto& e : ev) {
    const size_t k = static_cast<size_t>(std::find(tracks.begin(), tracks.end(), e.track) - tracks.begin());
    const bool outer = e.name.rfind("frame ", 0) == 0;
    const int y = T + rowh * static_cast<int>(k) + (outer ? 2 : 6);
    const double x = X(e.begin), w = std::max(0.8, X(e.end) - x);
    s += log::format(
        "<rect x='%.1f' y='%d' width='%.1f' height='%d' fill='%s' fill-opacity='%s' stroke='#333' "
        "stroke-width='0.3'><title>%s, frame %lld: %.3f ms</title></rect>",
        x, y, w, outer ? rowh - 4 : rowh - 12, kColors[e.frame % 10], outer ? "0.25" : "0.85", esc(e.name).c_str(),
        static_cast<long long>(e.frame), (e.end - e.begin) / 1e6);
  }
  for (int i = 0; i <= 5; ++i)
    s += log::format("<text x='%.1f' y='%d' class='tick' text-anchor='middle'>%.2f ms</text>", L + pw * i / 5, H - 16,
                     span_ms * i / 5);
  return s + "</svg>";
}

}  // namespace

int64_t union_length(std::vector<Interval> v) {
  int64_t n = 0;
  for (const Interval& i : merged(std::move(v))) n += i.end - i.begin;
  return n;
}

int64_t intersection_length(std::vector<Interval> a, std::vector<Interval> b) {
  const auto A = merged(std::move(a)), B = merged(std::move(b));
  int64_t n = 0;
  size_t i = 0, j = 0;
  while (i < A.size() && j < B.size()) {
    const int64_t lo = std::max(A[i].begin, B[j].begin), hi = std::min(A[i].end, B[j].end);
    if (hi > lo) n += hi - lo;
    if (A[i].end < B[j].end)
      ++i;
    else
      ++j;
  }
  return n;
}

ProfileSummary summarize_profile(const RunReport& r) {
  ProfileSummary p;
  const size_t first = r.first_counted();
  p.counted = r.frames.size() > first ? r.frames.size() - first : 0;
  for (size_t s = 0; s < r.steps.size(); ++s)
    p.steps.push_back({r.steps[s], s < r.step_tracks.size() ? r.step_tracks[s] : "",
                       s < r.step_copy.size() && r.step_copy[s], r.step_summary(s)});
  auto segment = [&](const char* name, int64_t FrameRecord::*a, int64_t FrameRecord::*b) {
    std::vector<double> v;
    for (size_t f = first; f < r.frames.size(); ++f) v.push_back((r.frames[f].*b - r.frames[f].*a) / 1e6);
    p.segments.push_back({name, "", false, summarize(std::move(v))});
  };
  segment("read (source)", &FrameRecord::read_ns, &FrameRecord::capture_ns);
  segment("input queue (capture->submit)", &FrameRecord::capture_ns, &FrameRecord::submit_ns);
  segment("process (submit->done)", &FrameRecord::submit_ns, &FrameRecord::done_ns);
  segment("output (done->written)", &FrameRecord::done_ns, &FrameRecord::output_ns);
  segment("end-to-end (capture->output)", &FrameRecord::capture_ns, &FrameRecord::output_ns);
  // Shown frames (the display): capture to presentation.
  {
    std::vector<double> v;
    for (size_t f = first; f < r.frames.size(); ++f)
      if (r.frames[f].display_ns > 0) v.push_back((r.frames[f].display_ns - r.frames[f].capture_ns) / 1e6);
    if (!v.empty()) p.segments.push_back({"capture->display", "", false, summarize(std::move(v))});
  }
  {  // each stage metric over the counted frames, in the order first seen
    std::vector<std::pair<std::string, std::vector<double>>> m;
    for (size_t f = first; f < r.frames.size(); ++f)
      for (const auto& metric : r.frames[f].metrics) {
        auto it = std::find_if(m.begin(), m.end(), [&](const auto& e) { return e.first == metric.first; });
        if (it == m.end()) it = m.insert(m.end(), {metric.first, {}});
        it->second.push_back(metric.second);
      }
    for (auto& [name, values] : m) p.metrics.push_back({name, "stage", false, summarize(std::move(values))});
  }
  if (p.counted >= 2) {
    const int64_t span = r.frames.back().output_ns - r.frames[first].output_ns;
    if (span > 0) p.fps = static_cast<double>(p.counted - 1) / (span / 1e9);
  }
  std::vector<Interval> copies, compute;
  for (size_t f = first; f < r.frames.size(); ++f) {
    const FrameRecord& fr = r.frames[f];
    for (size_t s = 0; s < fr.step_start_ns.size() && s < r.step_copy.size(); ++s)
      (r.step_copy[s] ? copies : compute).push_back({fr.step_start_ns[s], fr.step_end_ns[s]});
  }
  const int64_t copy_ns = union_length(copies);
  p.copy_ms = copy_ns / 1e6;
  if (copy_ns > 0) p.hidden_copy_fraction = static_cast<double>(intersection_length(copies, compute)) / copy_ns;
  return p;
}

std::string profile_text(const RunReport& r, const ProfileSummary& p) {
  std::string t = log::format(
      "profile: %zu frames counted (%s%s), %.1f fps steady state, "
      "backend %s (%s)\n",
      p.counted, r.warmup_text().c_str(),
      r.records_evicted
          ? log::format(", %lld oldest records not kept", static_cast<long long>(r.records_evicted)).c_str()
          : "",
      p.fps, r.backend.c_str(), r.device.c_str());
  t += "  input:  " + r.input + " (" + r.input_spec + ")\n";
  t += "  chain:  " + r.chain + "\n";
  t += "  output: " + r.output + " (" + r.output_spec + ")\n";
  if (r.dropped > 0 || r.frames_in != r.frames_out)
    t += log::format("  dropped: %lld of %lld frames\n", static_cast<long long>(r.dropped),
                     static_cast<long long>(r.frames_in));
  t += log::format("  %-30s %-9s %7s %8s %8s %8s %8s %8s %8s %8s\n", "ms per frame", "where", "count", "min", "mean",
                   "p50", "p90", "p95", "p99", "max");
  auto row = [&](const ProfileRow& x) {
    std::string n = x.name.size() > 30 ? x.name.substr(0, 27) + "..." : x.name;
    std::string where = x.track.empty()                 ? "host"
                        : x.track == "stage"            ? "stage"
                        : x.track.rfind("CUDA", 0) == 0 ? "gpu"
                                                        : "cpu";
    t += log::format("  %-30s %-9s %7zu %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f\n", n.c_str(), where.c_str(),
                     x.ms.count, x.ms.min, x.ms.mean, x.ms.p50, x.ms.p90, x.ms.p95, x.ms.p99, x.ms.max);
  };
  for (const auto& s : p.steps) row(s);
  for (const auto& s : p.segments) row(s);
  if (!p.metrics.empty()) {  // in each metric's own unit
    t += log::format("  %-30s %-9s %7s %8s %8s %8s %8s %8s %8s %8s\n", "stage metrics per frame", "", "count", "min",
                     "mean", "p50", "p90", "p95", "p99", "max");
    for (const auto& s : p.metrics) row(s);
  }
  if (p.hidden_copy_fraction >= 0)
    t += log::format("  copy/compute overlap: %.1f%% of the %.1f ms of copies ran while a kernel ran\n",
                     100 * p.hidden_copy_fraction, p.copy_ms);
  return t;
}

json profile_json(const RunReport& r, const ProfileSummary& p, bool per_frame) {
  json j = json::parse(r.json(false));
  j["vfpipe_profile"] = 1;
  json steps = json::array(), segs = json::array();
  for (const auto& s : p.steps) {
    json e = summary_json(s.ms);
    e["name"] = s.name;
    e["track"] = s.track;
    e["copy"] = s.copy;
    steps.push_back(e);
  }
  for (const auto& s : p.segments) {
    json e = summary_json(s.ms);
    e["name"] = s.name;
    segs.push_back(e);
  }
  json metrics = json::array();
  for (const auto& s : p.metrics) {
    json e = summary_json(s.ms);
    e["name"] = s.name;
    metrics.push_back(e);
  }
  j["profile"] = {{"counted", p.counted},
                  {"stage_metrics", metrics},
                  {"fps", p.fps},
                  {"steps_ms", steps},
                  {"segments_ms", segs},
                  {"copy_ms", p.copy_ms},
                  {"hidden_copy_fraction", p.hidden_copy_fraction >= 0 ? json(p.hidden_copy_fraction) : json(nullptr)},
                  {"records_evicted", r.records_evicted}};
  if (per_frame) {
    json fr = json::array();
    for (const auto& f : r.frames)
      fr.push_back({{"index", f.index},
                    {"read_ns", f.read_ns},
                    {"capture_ns", f.capture_ns},
                    {"enqueue_ns", f.enqueue_ns},
                    {"submit_ns", f.submit_ns},
                    {"launched_ns", f.launched_ns},
                    {"done_ns", f.done_ns},
                    {"write_ns", f.write_ns},
                    {"output_ns", f.output_ns},
                    {"display_ns", f.display_ns},
                    {"step_ms", f.step_ms},
                    {"step_start_ns", f.step_start_ns},
                    {"step_end_ns", f.step_end_ns},
                    {"clock_error_ns", f.clock_error_ns}});
    j["frames"] = fr;
  }
  return j;
}

std::string chrome_trace_json(const RunReport& r, size_t frames) {
  const size_t first = r.first_counted();
  const size_t n = frames == 0 ? r.frames.size() : frames;
  const auto ev = frame_events(r, first, n);
  const auto tracks = track_order(r);
  int64_t t0 = INT64_MAX;
  for (const auto& e : ev) t0 = std::min(t0, e.begin);
  json out = json::array();
  out.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"args", {{"name", "vfpipe " + r.chain}}}});
  for (size_t k = 0; k < tracks.size(); ++k) {
    out.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", k + 1}, {"args", {{"name", tracks[k]}}}});
    out.push_back(
        {{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", 1}, {"tid", k + 1}, {"args", {{"sort_index", k}}}});
  }
  auto us = [&](int64_t t) { return (t - t0) / 1e3; };
  for (const auto& e : ev) {
    const size_t k = static_cast<size_t>(std::find(tracks.begin(), tracks.end(), e.track) - tracks.begin());
    out.push_back({{"name", e.name},
                   {"cat", e.track.rfind("CUDA", 0) == 0 ? "gpu" : "host"},
                   {"ph", "X"},
                   {"ts", us(e.begin)},
                   {"dur", std::max(0.0, (e.end - e.begin) / 1e3)},
                   {"pid", 1},
                   {"tid", k + 1},
                   {"args", {{"frame", e.frame}}}});
  }
  // Each frame's life, capture to output, as an async span (its own row in Perfetto).
  for (size_t f = first; f < r.frames.size() && f < first + n; ++f) {
    const FrameRecord& fr = r.frames[f];
    const std::string name = "frame " + std::to_string(fr.index);
    out.push_back({{"name", name},
                   {"cat", "latency"},
                   {"ph", "b"},
                   {"id", fr.index},
                   {"ts", us(fr.capture_ns)},
                   {"pid", 1},
                   {"tid", 1}});
    out.push_back({{"name", name},
                   {"cat", "latency"},
                   {"ph", "e"},
                   {"id", fr.index},
                   {"ts", us(fr.output_ns)},
                   {"pid", 1},
                   {"tid", 1}});
  }
  json j = {{"traceEvents", out},
            {"displayTimeUnit", "ms"},
            {"otherData", {{"vfpipe_chain", r.chain}, {"backend", r.backend}, {"device", r.device}}}};
  return j.dump();
}

std::string html_report(const RunReport& r, const ProfileSummary& p) {
  const size_t first = r.first_counted();
  std::string h =
      "<!DOCTYPE html><html><head><meta charset='utf-8'><title>vfpipe profile</title><style>"
      "body{font:14px sans-serif;margin:24px;color:#222}h1{font-size:20px}h2{font-size:16px;margin-top:28px}"
      "table{border-collapse:collapse}td,th{padding:3px 8px;border-bottom:1px solid #ddd;text-align:right}"
      "td:first-child,th:first-child{text-align:left}.plot{margin:6px 12px 6px 0}.title{font:bold 13px sans-serif}"
      ".tick{font:11px sans-serif;fill:#444}.label{font:12px sans-serif;fill:#222}.grid{stroke:#e4e4e4}"
      ".frame{fill:none;stroke:#888}.bar{fill:#9ecae1}.cdf{fill:none;stroke:#d62728;stroke-width:1.5}"
      "</style></head><body>";
  h += "<h1>vfpipe profile</h1><p>" + esc(r.input) + " &rarr; <b>" + esc(r.chain) + "</b> &rarr; " + esc(r.output) +
       "<br>backend " + esc(r.backend) + " (" + esc(r.device) + "), " + log::format("%zu frames counted (", p.counted) +
       esc(r.warmup_text()) + log::format("), %.1f fps steady state", p.fps);
  if (r.dropped) h += log::format(", %lld dropped", static_cast<long long>(r.dropped));
  if (p.hidden_copy_fraction >= 0)
    h += log::format("<br>copy/compute overlap: %.1f%% of copy time hidden behind compute",
                     100 * p.hidden_copy_fraction);
  h += "</p><h2>Latency (ms)</h2><table><tr><th>step</th><th>where</th><th>count</th><th>min</th><th>mean</th>"
       "<th>p50</th><th>p90</th><th>p95</th><th>p99</th><th>max</th></tr>";
  auto row = [&](const ProfileRow& x) {
    h += log::format(
        "<tr><td>%s</td><td>%s</td><td>%zu</td><td>%.3f</td><td>%.3f</td><td>%.3f</td><td>%.3f</td>"
        "<td>%.3f</td><td>%.3f</td><td>%.3f</td></tr>",
        esc(x.name).c_str(), esc(x.track.empty() ? "host" : x.track).c_str(), x.ms.count, x.ms.min, x.ms.mean, x.ms.p50,
        x.ms.p90, x.ms.p95, x.ms.p99, x.ms.max);
  };
  for (const auto& s : p.steps) row(s);
  for (const auto& s : p.segments) row(s);
  for (const auto& s : p.metrics) row(s);  // the stages' own numbers, in their units
  h += "</table>";
  // Latency over time.
  std::vector<Series> steps, e2e(1);
  e2e[0].name = "end-to-end";
  for (size_t s = 0; s < r.steps.size(); ++s) steps.push_back({r.steps[s], {}});
  for (size_t f = first; f < r.frames.size(); ++f) {
    const FrameRecord& fr = r.frames[f];
    e2e[0].pts.push_back({static_cast<double>(fr.index), (fr.output_ns - fr.capture_ns) / 1e6});
    for (size_t s = 0; s < fr.step_ms.size() && s < steps.size(); ++s)
      steps[s].pts.push_back({static_cast<double>(fr.index), fr.step_ms[s]});
  }
  h += "<h2>Latency over time</h2>";
  h += svg_lines("End-to-end latency (capture to output)", "frame", "ms", e2e);
  h += svg_lines("Time of each step", "frame", "ms", steps);
  // Histograms and CDFs.
  h += "<h2>Distributions</h2><div>";
  for (size_t s = 0; s < r.steps.size(); ++s) {
    std::vector<double> v;
    for (size_t f = first; f < r.frames.size(); ++f)
      if (s < r.frames[f].step_ms.size()) v.push_back(r.frames[f].step_ms[s]);
    h += svg_hist_cdf(r.steps[s], v);
  }
  std::vector<double> v;
  for (size_t f = first; f < r.frames.size(); ++f) v.push_back((r.frames[f].output_ns - r.frames[f].capture_ns) / 1e6);
  h += svg_hist_cdf("end-to-end", v) + "</div>";
  // A few frames in the middle of the run, every track.
  if (r.frames.size() > first) {
    const size_t n = std::min<size_t>(6, r.frames.size() - first);
    const size_t mid = first + (r.frames.size() - first - n) / 2;
    h += "<h2>Timeline</h2>" + svg_timeline(r, mid, n);
  }
  h += "<p style='color:#777'>Written by vfpipe " VFPIPE_VERSION
       ". Open the trace file (--trace) in ui.perfetto.dev or chrome://tracing for every frame.</p></body></html>\n";
  return h;
}

std::string compare_profiles(const json& a, const json& b, double threshold_pct, bool* regressed) {
  if (regressed) *regressed = false;
  auto rows = [](const json& j) {
    std::vector<std::pair<std::string, json>> v;
    const json& p = j.contains("profile") ? j["profile"] : j;
    for (const char* key : {"steps_ms", "segments_ms"})
      if (p.contains(key))
        for (const auto& e : p[key]) v.push_back({e.value("name", "?"), e});
    return v;
  };
  const auto ra = rows(a), rb = rows(b);
  std::string t = log::format("  %-30s %10s %10s %8s %10s %10s %8s\n", "ms per frame", "p50 A", "p50 B", "change",
                              "p95 A", "p95 B", "change");
  auto pct = [](double x, double y) { return x > 0 ? 100.0 * (y - x) / x : 0.0; };
  for (const auto& [name, ea] : ra) {
    const std::string& key = name;  // C++17 lambdas cannot capture a structured binding
    auto it = std::find_if(rb.begin(), rb.end(), [&](const auto& e) { return e.first == key; });
    if (it == rb.end()) {
      t += log::format("  %-30s only in A\n", name.c_str());
      continue;
    }
    const json& eb = it->second;
    const double a50 = ea.value("p50", 0.0), b50 = eb.value("p50", 0.0);
    const double a95 = ea.value("p95", 0.0), b95 = eb.value("p95", 0.0);
    const bool worse = pct(a50, b50) > threshold_pct && b50 - a50 > 0.001;
    if (worse && regressed) *regressed = true;
    std::string n = name.size() > 30 ? name.substr(0, 27) + "..." : name;
    t += log::format("  %-30s %10.3f %10.3f %+7.1f%% %10.3f %10.3f %+7.1f%%%s\n", n.c_str(), a50, b50, pct(a50, b50),
                     a95, b95, pct(a95, b95), worse ? "  <- slower" : "");
  }
  for (const auto& entry : rb)
    if (std::none_of(ra.begin(), ra.end(), [&](const auto& e) { return e.first == entry.first; }))
      t += log::format("  %-30s only in B\n", entry.first.c_str());
  auto fps = [](const json& j) { return j.contains("profile") ? j["profile"].value("fps", 0.0) : j.value("fps", 0.0); };
  t += log::format("  %-30s %10.1f %10.1f %+7.1f%%\n", "throughput (fps)", fps(a), fps(b), pct(fps(a), fps(b)));
  return t;
}

}  // namespace vfp
