// The median filter's CPU reference (definition in cpu/median.hpp).
#include "cpu/median.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/parallel.hpp"

namespace vfp {

namespace {
inline int sample(const uint8_t* src, int spitch, int w, int h, int x, int y, const MedianParams& p) {
  const int gx = border_index(x, w, p.border), gy = border_index(y, h, p.border);
  return (gx < 0 || gy < 0) ? p.value : src[static_cast<size_t>(gy) * spitch + gx];
}
}  // namespace

void median_plane_naive(const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w, int h, const MedianParams& p) {
  const int rx = p.rx(), ry = p.ry(), k = p.rank();
  std::vector<uint8_t> win(static_cast<size_t>(p.count()));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      size_t n = 0;
      for (int dy = -ry; dy <= ry; ++dy)
        for (int dx = -rx; dx <= rx; ++dx)
          win[n++] = static_cast<uint8_t>(sample(src, spitch, w, h, x + dx, y + dy, p));
      std::nth_element(win.begin(), win.begin() + k, win.end());
      dst[static_cast<size_t>(y) * dpitch + x] = win[static_cast<size_t>(k)];
    }
}

namespace {
// Rows [y0, y1) of the output. Sliding histogram (Huang): for each column, build the
// window's 256-bin histogram at row y0, then per row remove the row leaving and add the row
// entering. A 16-bin coarse histogram makes the rank search at most 32 steps. Each row's
// result depends only on its window, so any split into row ranges gives the same output.
void median_rows(const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w, int h, const MedianParams& p, int y0,
                 int y1) {
  const int rx = p.rx(), ry = p.ry(), k = p.rank();
  std::vector<int> colmap(static_cast<size_t>(w + 2 * rx));
  for (int i = 0; i < w + 2 * rx; ++i) colmap[static_cast<size_t>(i)] = border_index(i - rx, w, p.border);
  auto add_row = [&](uint32_t* fine, uint32_t* coarse, int y, int x, int d) {
    const int gy = border_index(y, h, p.border);
    const uint8_t* row = gy < 0 ? nullptr : src + static_cast<size_t>(gy) * spitch;
    for (int i = x; i <= x + 2 * rx; ++i) {
      const int gx = colmap[static_cast<size_t>(i)];
      const int v = (row && gx >= 0) ? row[gx] : p.value;
      fine[v] += static_cast<uint32_t>(d);
      coarse[v >> 4] += static_cast<uint32_t>(d);
    }
  };
  for (int x = 0; x < w; ++x) {
    uint32_t fine[256] = {0}, coarse[16] = {0};
    for (int y = y0 - ry; y <= y0 + ry; ++y) add_row(fine, coarse, y, x, +1);
    for (int y = y0; y < y1; ++y) {
      if (y > y0) {
        add_row(fine, coarse, y - ry - 1, x, -1);
        add_row(fine, coarse, y + ry, x, +1);
      }
      uint32_t acc = 0;
      int c = 0;
      while (acc + coarse[c] <= static_cast<uint32_t>(k)) acc += coarse[c++];
      int b = c * 16;
      while (acc + fine[b] <= static_cast<uint32_t>(k)) acc += fine[b++];
      dst[static_cast<size_t>(y) * dpitch + x] = static_cast<uint8_t>(b);
    }
  }
}
}  // namespace

void median_plane_cpu(const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w, int h, const MedianParams& p) {
  // Stripes of rows on the CPU pool; a stripe re-builds its histograms at its first row
  // (2*ry+1 rows of work), so stripes are kept at least four windows tall.
  parallel_rows(h, std::max(16, 4 * (2 * p.ry() + 1)),
                [&](int y0, int y1) { median_rows(src, spitch, dst, dpitch, w, h, p, y0, y1); });
}

}  // namespace vfp
