#include "pipeline/g2g.hpp"

#include <algorithm>

namespace vfp {

G2GResult analyze_glass_to_glass(const std::vector<G2GFlip>& flips, const std::vector<G2GSample>& samples,
                                 int64_t timeout_ns) {
  G2GResult r;
  if (samples.empty()) {
    r.missed = static_cast<int>(flips.size());
    return r;
  }
  std::vector<double> l;
  for (const auto& s : samples) l.push_back(s.luma);
  std::sort(l.begin(), l.end());
  r.threshold = (percentile_sorted(l, 5) + percentile_sorted(l, 95)) / 2;
  std::vector<G2GSample> s = samples;
  std::sort(s.begin(), s.end(), [](const G2GSample& a, const G2GSample& b) { return a.t_ns < b.t_ns; });
  for (size_t i = 0; i < flips.size(); ++i) {
    const int64_t t0 = flips[i].t_ns;
    const int64_t end = std::min(i + 1 < flips.size() ? flips[i + 1].t_ns : INT64_MAX, t0 + timeout_ns);
    auto it = std::upper_bound(s.begin(), s.end(), t0, [](int64_t t, const G2GSample& x) { return t < x.t_ns; });
    bool seen = false;
    for (; it != s.end() && it->t_ns < end; ++it)
      if ((it->luma > r.threshold) == flips[i].white) {
        r.delays_ms.push_back((it->t_ns - t0) / 1e6);
        seen = true;
        break;
      }
    if (!seen) ++r.missed;
  }
  r.ms = summarize(r.delays_ms);
  return r;
}

double patch_luma(const ImageView& v, double fraction) {
  const int w = v.pw[0], h = v.ph[0];
  const int pw = std::max(1, static_cast<int>(w * fraction)), ph = std::max(1, static_cast<int>(h * fraction));
  const int x0 = (w - pw) / 2, y0 = (h - ph) / 2;
  const bool packed = is_packed_rgb(v.format);
  double sum = 0;
  for (int y = y0; y < y0 + ph; ++y) {
    const uint8_t* row = v.row(0, y);
    for (int x = x0; x < x0 + pw; ++x) {
      if (!packed) {
        sum += row[x];
        continue;
      }
      const uint8_t* p = row + 3 * x;
      const int r = v.format == PixelFormat::RGB24 ? p[0] : p[2], b = v.format == PixelFormat::RGB24 ? p[2] : p[0];
      sum += 0.299 * r + 0.587 * p[1] + 0.114 * b;
    }
  }
  return sum / (static_cast<double>(pw) * ph);
}

}  // namespace vfp
