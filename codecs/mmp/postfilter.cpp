#include "codecs/mmp/postfilter.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "core/parallel.hpp"

namespace vfp::mmp {

namespace {

constexpr int kOffsets[kPostTaps][2] = {{0, 1}, {0, 2}, {1, 0}, {2, 0}, {1, 1}, {1, -1}};  // (dy, dx)
constexpr int kShift = kPostTapBits;                                                       // taps in 1/1024
// Rows per task of the pool: every pass is a few operations a sample.
constexpr int kMinRows = 32;

// The plane with a 2-sample replicated border, so that every tap is a plain index.
struct Padded {
  static constexpr int kB = 2;
  int pw;
  std::vector<uint8_t> v;
  Padded(const uint8_t* r, int w, int h) : pw(w + 2 * kB), v(static_cast<size_t>(pw) * (h + 2 * kB)) {
    parallel_rows(h + 2 * kB, kMinRows, [&](int y0, int y1) {
      for (int y = y0 - kB; y < y1 - kB; ++y)
        for (int x = -kB; x < w + kB; ++x)
          v[static_cast<size_t>(y + kB) * pw + (x + kB)] =
              r[static_cast<size_t>(std::clamp(y, 0, h - 1)) * w + std::clamp(x, 0, w - 1)];
    });
  }
  int at(int x, int y) const { return v[static_cast<size_t>(y + kB) * pw + (x + kB)]; }
  // r(+o_k) + r(-o_k) - 2 r0 at (x, y): what tap k multiplies.
  int pair(int x, int y, int k) const {
    const int dy = kOffsets[k][0], dx = kOffsets[k][1];
    return at(x + dx, y + dy) + at(x - dx, y - dy) - 2 * at(x, y);
  }
};

// Activity class (0..3) of every pixel: the 3x3 sum of |2r - left - right| + |2r - up - down|,
// split at the plane's quartiles (lower and upper quartile and median of the sums).
// The quartiles are the values at ranks n/4, n/2, 3n/4 of the sorted sums, read from a
// histogram (a sum is at most 9 * 2 * 510).
std::vector<uint8_t> classify(const Padded& p, int w, int h) {
  constexpr int kMaxSum = 9 * 2 * 510;
  std::vector<int> act(static_cast<size_t>(w) * h), sum(act.size());
  parallel_rows(h, kMinRows, [&](int y0, int y1) {
    for (int y = y0; y < y1; ++y)
      for (int x = 0; x < w; ++x) {
        const int c = 2 * p.at(x, y);
        act[static_cast<size_t>(y) * w + x] =
            std::abs(c - p.at(x - 1, y) - p.at(x + 1, y)) + std::abs(c - p.at(x, y - 1) - p.at(x, y + 1));
      }
  });
  std::vector<int64_t> hist(kMaxSum + 1, 0);
  std::mutex mu;
  parallel_rows(h, kMinRows, [&](int y0, int y1) {
    std::vector<int64_t> local(kMaxSum + 1, 0);
    for (int y = y0; y < y1; ++y)
      for (int x = 0; x < w; ++x) {
        int s = 0;
        for (int dy = -1; dy <= 1; ++dy)
          for (int dx = -1; dx <= 1; ++dx)
            s += act[static_cast<size_t>(std::clamp(y + dy, 0, h - 1)) * w + std::clamp(x + dx, 0, w - 1)];
        sum[static_cast<size_t>(y) * w + x] = s;
        ++local[static_cast<size_t>(s)];
      }
    std::lock_guard<std::mutex> lock(mu);
    for (int v = 0; v <= kMaxSum; ++v) hist[static_cast<size_t>(v)] += local[static_cast<size_t>(v)];
  });
  int t[3];
  for (int q = 0; q < 3; ++q) {
    const int64_t k = static_cast<int64_t>(sum.size()) * (q + 1) / 4;  // the rank, from 0
    int64_t below = 0;
    int v = 0;
    while (below + hist[static_cast<size_t>(v)] <= k) below += hist[static_cast<size_t>(v++)];
    t[q] = v;
  }
  std::vector<uint8_t> cls(sum.size());
  for (size_t i = 0; i < sum.size(); ++i)
    cls[i] = static_cast<uint8_t>((sum[i] > t[0]) + (sum[i] > t[1]) + (sum[i] > t[2]));
  return cls;
}

int filtered(const Padded& p, int x, int y, const int* taps) {
  int acc = p.at(x, y) << kShift;
  for (int k = 0; k < kPostTaps; ++k) acc += taps[k] * p.pair(x, y, k);
  return std::clamp((acc + (1 << (kShift - 1))) >> kShift, 0, 255);
}

// Solves the n x n system a x = b (row-major a) by Gaussian elimination with partial
// pivoting; false when it is (numerically) singular.
bool solve(double* a, double* b, int n, double* x) {
  double scale = 0;
  for (int i = 0; i < n * n; ++i) scale = std::max(scale, std::abs(a[i]));
  if (scale == 0) return false;
  for (int c = 0; c < n; ++c) {
    int piv = c;
    for (int r = c + 1; r < n; ++r)
      if (std::abs(a[r * n + c]) > std::abs(a[piv * n + c])) piv = r;
    if (std::abs(a[piv * n + c]) < 1e-12 * scale) return false;
    if (piv != c) {
      for (int k = 0; k < n; ++k) std::swap(a[c * n + k], a[piv * n + k]);
      std::swap(b[c], b[piv]);
    }
    for (int r = c + 1; r < n; ++r) {
      const double f = a[r * n + c] / a[c * n + c];
      for (int k = c; k < n; ++k) a[r * n + k] -= f * a[c * n + k];
      b[r] -= f * b[c];
    }
  }
  for (int r = n - 1; r >= 0; --r) {
    double s = b[r];
    for (int k = r + 1; k < n; ++k) s -= a[r * n + k] * x[k];
    x[r] = s / a[r * n + r];
  }
  return true;
}

}  // namespace

int post_filter_bits(const PostFilter& f) {
  int bits = 0;
  for (int c = 0; c < kPostClasses; ++c) bits += 1 + (f.on[c] ? kPostTaps * kPostTapBits : 0);
  return bits;
}

PostFilter design_post_filter(const uint8_t* rec, const uint8_t* orig, int w, int h, double lambda) {
  PostFilter f;
  if (w < 1 || h < 1) return f;
  const Padded p(rec, w, h);
  const std::vector<uint8_t> cls = classify(p, w, h);
  // Normal equations per class for out - r0 = sum_k t_k * pair_k, against orig - r0. The
  // sums are of integers, summed exactly in 64 bits (so in any order, on the pool's threads).
  struct Sums {
    int64_t a[kPostClasses][kPostTaps * kPostTaps] = {}, b[kPostClasses][kPostTaps] = {};
    int64_t count[kPostClasses] = {};
  } sums;
  std::mutex mu;
  parallel_rows(h, kMinRows, [&](int y0, int y1) {
    Sums local;
    for (int y = y0; y < y1; ++y)
      for (int x = 0; x < w; ++x) {
        const size_t i = static_cast<size_t>(y) * w + x;
        const int c = cls[i];
        int u[kPostTaps];
        for (int k = 0; k < kPostTaps; ++k) u[k] = p.pair(x, y, k);
        const int e = static_cast<int>(orig[i]) - rec[i];
        for (int k = 0; k < kPostTaps; ++k) {
          for (int j = 0; j < kPostTaps; ++j) local.a[c][k * kPostTaps + j] += static_cast<int64_t>(u[k]) * u[j];
          local.b[c][k] += static_cast<int64_t>(u[k]) * e;
        }
        ++local.count[c];
      }
    std::lock_guard<std::mutex> lock(mu);
    for (int c = 0; c < kPostClasses; ++c) {
      for (int k = 0; k < kPostTaps * kPostTaps; ++k) sums.a[c][k] += local.a[c][k];
      for (int k = 0; k < kPostTaps; ++k) sums.b[c][k] += local.b[c][k];
      sums.count[c] += local.count[c];
    }
  });
  for (int c = 0; c < kPostClasses; ++c) {
    double x[kPostTaps], a[kPostTaps * kPostTaps], b[kPostTaps];
    for (int k = 0; k < kPostTaps * kPostTaps; ++k) a[k] = static_cast<double>(sums.a[c][k]);
    for (int k = 0; k < kPostTaps; ++k) b[k] = static_cast<double>(sums.b[c][k]);
    if (sums.count[c] < 4 * kPostTaps || !solve(a, b, kPostTaps, x)) continue;
    for (int k = 0; k < kPostTaps; ++k)
      f.taps[c][k] = static_cast<int>(std::clamp<long>(std::lround(x[k] * (1 << kShift)), -kPostTapMax, kPostTapMax));
  }
  // Keep a class's taps only where they lower SSE by more than their bits cost.
  int64_t gain[kPostClasses] = {};
  parallel_rows(h, kMinRows, [&](int y0, int y1) {
    int64_t local[kPostClasses] = {};
    for (int y = y0; y < y1; ++y)
      for (int x = 0; x < w; ++x) {
        const size_t i = static_cast<size_t>(y) * w + x;
        const int c = cls[i];
        const int before = static_cast<int>(orig[i]) - rec[i];
        const int after = static_cast<int>(orig[i]) - filtered(p, x, y, f.taps[c]);
        local[c] += before * before - after * after;
      }
    std::lock_guard<std::mutex> lock(mu);
    for (int c = 0; c < kPostClasses; ++c) gain[c] += local[c];
  });
  for (int c = 0; c < kPostClasses; ++c) f.on[c] = static_cast<double>(gain[c]) > lambda * kPostTaps * kPostTapBits;
  for (int c = 0; c < kPostClasses; ++c)
    if (!f.on[c]) std::fill(f.taps[c], f.taps[c] + kPostTaps, 0);
  return f;
}

void apply_post_filter(const PostFilter& f, const uint8_t* rec, int w, int h, uint8_t* out) {
  if (w < 1 || h < 1) return;
  bool any = false;
  for (int c = 0; c < kPostClasses; ++c) any = any || f.on[c];
  if (!any) {
    std::copy(rec, rec + static_cast<size_t>(w) * h, out);
    return;
  }
  const Padded p(rec, w, h);
  const std::vector<uint8_t> cls = classify(p, w, h);
  parallel_rows(h, kMinRows, [&](int y0, int y1) {
    for (int y = y0; y < y1; ++y)
      for (int x = 0; x < w; ++x) {
        const size_t i = static_cast<size_t>(y) * w + x;
        const int c = cls[i];
        out[i] = f.on[c] ? static_cast<uint8_t>(filtered(p, x, y, f.taps[c])) : rec[i];
      }
  });
}

void write_post_filter(RangeEncoder& enc, const PostFilter& f) {
  for (int c = 0; c < kPostClasses; ++c) {
    enc.encode_direct(f.on[c] ? 1 : 0, 1);
    if (f.on[c])
      for (int k = 0; k < kPostTaps; ++k)
        enc.encode_direct(static_cast<uint32_t>(f.taps[c][k] + (1 << (kPostTapBits - 1))), kPostTapBits);
  }
}

PostFilter read_post_filter(RangeDecoder& dec) {
  PostFilter f;
  for (int c = 0; c < kPostClasses; ++c) {
    f.on[c] = dec.decode_direct(1) != 0;
    if (f.on[c])
      for (int k = 0; k < kPostTaps; ++k)
        f.taps[c][k] = static_cast<int>(dec.decode_direct(kPostTapBits)) - (1 << (kPostTapBits - 1));
  }
  return f;
}

}  // namespace vfp::mmp
