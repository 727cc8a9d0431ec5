// The median filter's CPU reference (definition in cpu/median.hpp).
#include "cpu/median.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/parallel.hpp"

namespace vfp {

namespace {
template <typename T>
const T* row_of(const T* src, int pitch, int y) {
  return reinterpret_cast<const T*>(reinterpret_cast<const uint8_t*>(src) + static_cast<size_t>(y) * pitch);
}
template <typename T>
T* row_of(T* dst, int pitch, int y) {
  return reinterpret_cast<T*>(reinterpret_cast<uint8_t*>(dst) + static_cast<size_t>(y) * pitch);
}

template <typename T>
int sample(const T* src, int spitch, int w, int h, int x, int y, const MedianParams& p) {
  const int gx = border_index(x, w, p.border), gy = border_index(y, h, p.border);
  return (gx < 0 || gy < 0) ? p.value : row_of(src, spitch, gy)[gx];
}

template <typename T>
void naive(const T* src, int spitch, T* dst, int dpitch, int w, int h, const MedianParams& p) {
  const int rx = p.rx(), ry = p.ry(), k = p.rank();
  std::vector<T> win(static_cast<size_t>(p.count()));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      size_t n = 0;
      for (int dy = -ry; dy <= ry; ++dy)
        for (int dx = -rx; dx <= rx; ++dx) win[n++] = static_cast<T>(sample(src, spitch, w, h, x + dx, y + dy, p));
      std::nth_element(win.begin(), win.begin() + k, win.end());
      row_of(dst, dpitch, y)[x] = win[static_cast<size_t>(k)];
    }
}

// A window's histogram for 8-bit samples: 256 bins and 16 coarse ones (the upper nibble),
// so the rank search takes at most 32 steps.
struct Hist8 {
  std::array<uint32_t, 256> fine{};
  std::array<uint32_t, 16> coarse{};
  void add(int v, int d) {
    fine[static_cast<size_t>(v)] += static_cast<uint32_t>(d);
    coarse[static_cast<size_t>(v >> 4)] += static_cast<uint32_t>(d);
  }
  int select(int k) const {
    uint32_t acc = 0;
    size_t c = 0;
    while (acc + coarse[c] <= static_cast<uint32_t>(k)) acc += coarse[c++];
    size_t b = c * 16;
    while (acc + fine[b] <= static_cast<uint32_t>(k)) acc += fine[b++];
    return static_cast<int>(b);
  }
  // Cheaper than removing the window's samples again.
  template <typename RemoveWindow>
  void empty(RemoveWindow&&) {
    fine.fill(0);
    coarse.fill(0);
  }
};

// For 16-bit samples: 65536 bins under levels of 4096, 256 and 16 (each a sum of 16 of
// the level below), so the search takes at most 64 steps. Too large to clear for every
// column: the caller empties it by removing what it added.
struct Hist16 {
  std::vector<uint16_t> l3 = std::vector<uint16_t>(65536), l2 = std::vector<uint16_t>(4096);
  std::array<uint16_t, 256> l1{};
  std::array<uint16_t, 16> l0{};  // counts fit: a window holds at most 255 x 255 samples
  void add(int v, int d) {
    const auto u = static_cast<uint16_t>(d);
    l3[static_cast<size_t>(v)] += u;
    l2[static_cast<size_t>(v >> 4)] += u;
    l1[static_cast<size_t>(v >> 8)] += u;
    l0[static_cast<size_t>(v >> 12)] += u;
  }
  int select(int k) const {
    int acc = 0;
    size_t b = 0;
    while (acc + l0[b] <= k) acc += l0[b++];
    b *= 16;
    while (acc + l1[b] <= k) acc += l1[b++];
    b *= 16;
    while (acc + l2[b] <= k) acc += l2[b++];
    b *= 16;
    while (acc + l3[b] <= k) acc += l3[b++];
    return static_cast<int>(b);
  }
  template <typename RemoveWindow>
  void empty(RemoveWindow&& remove) {
    remove();
  }
};

// Rows [y0, y1) of the output. Sliding histogram (Huang): for each column, build the
// window's histogram at row y0, then per row remove the row leaving and add the row
// entering. Each row's result depends only on its window, so any split into row ranges
// gives the same output.
template <typename T, typename Hist>
void median_rows(const T* src, int spitch, T* dst, int dpitch, int w, int h, const MedianParams& p, int y0, int y1) {
  const int rx = p.rx(), ry = p.ry(), k = p.rank();
  std::vector<int> colmap(static_cast<size_t>(w + 2 * rx));
  for (int i = 0; i < w + 2 * rx; ++i) colmap[static_cast<size_t>(i)] = border_index(i - rx, w, p.border);
  auto add_row = [&](Hist& hist, int y, int x, int d) {
    const int gy = border_index(y, h, p.border);
    const T* row = gy < 0 ? nullptr : row_of(src, spitch, gy);
    for (int i = x; i <= x + 2 * rx; ++i) {
      const int gx = colmap[static_cast<size_t>(i)];
      hist.add((row && gx >= 0) ? row[gx] : p.value, d);
    }
  };
  auto hist = std::make_unique<Hist>();
  for (int x = 0; x < w; ++x) {
    for (int y = y0 - ry; y <= y0 + ry; ++y) add_row(*hist, y, x, +1);
    for (int y = y0; y < y1; ++y) {
      if (y > y0) {
        add_row(*hist, y - ry - 1, x, -1);
        add_row(*hist, y + ry, x, +1);
      }
      row_of(dst, dpitch, y)[x] = static_cast<T>(hist->select(k));
    }
    hist->empty([&] {
      const int last = std::max(y0, y1 - 1);  // the window's centre row now
      for (int y = last - ry; y <= last + ry; ++y) add_row(*hist, y, x, -1);
    });
  }
}

template <typename T, typename Hist>
void median_plane(const T* src, int spitch, T* dst, int dpitch, int w, int h, const MedianParams& p) {
  // Stripes of rows on the CPU pool; a stripe re-builds its histograms at its first row
  // (2*ry+1 rows of work), so stripes are kept at least four windows tall.
  parallel_rows(h, std::max(16, 4 * (2 * p.ry() + 1)),
                [&](int y0, int y1) { median_rows<T, Hist>(src, spitch, dst, dpitch, w, h, p, y0, y1); });
}
}  // namespace

void median_plane_naive(const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w, int h, const MedianParams& p) {
  naive(src, spitch, dst, dpitch, w, h, p);
}
void median_plane_naive(const uint16_t* src, int spitch, uint16_t* dst, int dpitch, int w, int h,
                        const MedianParams& p) {
  naive(src, spitch, dst, dpitch, w, h, p);
}
void median_plane_cpu(const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w, int h, const MedianParams& p) {
  median_plane<uint8_t, Hist8>(src, spitch, dst, dpitch, w, h, p);
}
void median_plane_cpu(const uint16_t* src, int spitch, uint16_t* dst, int dpitch, int w, int h, const MedianParams& p) {
  median_plane<uint16_t, Hist16>(src, spitch, dst, dpitch, w, h, p);
}

}  // namespace vfp
