#include "pipeline/stats.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/log.hpp"

namespace vfp {

double percentile_sorted(const std::vector<double>& x, double p) {
  if (x.empty()) return 0;
  if (x.size() == 1) return x[0];
  double r = p / 100.0 * static_cast<double>(x.size() - 1);
  size_t k = static_cast<size_t>(std::floor(r));
  if (k + 1 >= x.size()) return x.back();
  double f = r - static_cast<double>(k);
  return x[k] + (x[k + 1] - x[k]) * f;
}

Summary summarize(std::vector<double> v) {
  Summary s;
  s.count = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  s.min = v.front();
  s.max = v.back();
  s.mean = sum / static_cast<double>(v.size());
  s.p50 = percentile_sorted(v, 50);
  s.p90 = percentile_sorted(v, 90);
  s.p95 = percentile_sorted(v, 95);
  s.p99 = percentile_sorted(v, 99);
  return s;
}

Summary RunReport::step_summary(size_t i) const {
  std::vector<double> v;
  for (size_t f = first_counted(); f < frames.size(); ++f)
    if (i < frames[f].step_ms.size()) v.push_back(frames[f].step_ms[i]);
  return summarize(std::move(v));
}

Summary RunReport::latency_summary() const {
  std::vector<double> v;
  for (size_t f = first_counted(); f < frames.size(); ++f)
    v.push_back((frames[f].output_ns - frames[f].capture_ns) / 1e6);
  return summarize(std::move(v));
}

std::string RunReport::text() const {
  std::string r;
  // The GPU's frames in flight (--depth, or the chain's default) set its throughput.
  const std::string in_flight = depth > 1 ? log::format(", %d frames in flight", depth) : "";
  r += log::format("%lld frame%s in %.2f s: %.1f fps, backend %s (%s)%s%s\n", static_cast<long long>(frames_out),
                   frames_out == 1 ? "" : "s", wall_s, fps(), backend.c_str(), device.c_str(), in_flight.c_str(),
                   interrupted ? ", interrupted" : "");
  r += "  input:  " + input + " (" + input_spec + ")\n";
  r += "  chain:  " + chain + "\n";
  r += "  output: " + output + " (" + output_spec + ")\n";
  if (dropped > 0 || backend == "live")
    r += log::format("  dropped: %lld of %lld frames (live policy kept the newest)\n", static_cast<long long>(dropped),
                     static_cast<long long>(frames_in));
  r += log::format("  %-28s %7s %9s %9s %9s %9s %9s\n", "step (ms per frame)", "frames", "mean", "p50", "p95", "p99",
                   "max");
  auto row = [&](const std::string& name, const Summary& s) {
    std::string n = name.size() > 28 ? name.substr(0, 25) + "..." : name;
    r += log::format("  %-28s %7zu %9.3f %9.3f %9.3f %9.3f %9.3f\n", n.c_str(), s.count, s.mean, s.p50, s.p95, s.p99,
                     s.max);
  };
  for (size_t i = 0; i < steps.size(); ++i) row(steps[i], step_summary(i));
  row("end-to-end (capture->output)", latency_summary());
  if (warmup > 0) r += "  (" + warmup_text() + ")\n";
  return r;
}

std::string RunReport::warmup_text() const {
  if (warmup <= 0) return "no warm-up";
  if (warmup_waived())
    return log::format("warm-up of %d frames not applied: the run had only %lld, all counted", warmup,
                       static_cast<long long>(frames_out));
  return log::format("first %d frames skipped as warm-up", warmup);
}

std::string RunReport::json(bool per_frame) const {
  using nlohmann::json;
  auto sj = [](const Summary& s) {
    return json{{"count", s.count}, {"min", s.min}, {"mean", s.mean}, {"p50", s.p50},
                {"p90", s.p90},     {"p95", s.p95}, {"p99", s.p99},   {"max", s.max}};
  };
  json j;
  j["vfpipe_report"] = 1;
  j["backend"] = backend;
  j["device"] = device;
  j["input"] = {{"name", input}, {"spec", input_spec}};
  j["output"] = {{"name", output}, {"spec", output_spec}};
  j["filters"] = filters;
  j["chain"] = chain;
  j["frames_in"] = frames_in;
  j["frames_out"] = frames_out;
  j["dropped"] = dropped;
  j["wall_s"] = wall_s;
  j["fps"] = fps();
  j["warmup"] = warmup;
  j["warmup_applied"] = !warmup_waived();
  j["depth"] = depth;
  j["interrupted"] = interrupted;
  j["bytes_per_frame"] = {{"upload", bytes_up}, {"download", bytes_down}};
  json st = json::array();
  for (size_t i = 0; i < steps.size(); ++i) {
    json e = sj(step_summary(i));
    e["name"] = steps[i];
    st.push_back(e);
  }
  j["steps_ms"] = st;
  j["latency_ms"] = sj(latency_summary());
  if (per_frame) {
    json fr = json::array();
    for (const auto& f : frames)
      fr.push_back({{"index", f.index},
                    {"capture_ns", f.capture_ns},
                    {"submit_ns", f.submit_ns},
                    {"done_ns", f.done_ns},
                    {"output_ns", f.output_ns},
                    {"step_ms", f.step_ms}});
    j["frames"] = fr;
  }
  return j.dump(2);
}

}  // namespace vfp
