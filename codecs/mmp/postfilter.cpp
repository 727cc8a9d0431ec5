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
      for (int py = y0; py < y1; ++py) {
        const uint8_t* src = r + static_cast<size_t>(std::clamp(py - kB, 0, h - 1)) * w;
        uint8_t* dst = &v[static_cast<size_t>(py) * pw];
        std::fill(dst, dst + kB, src[0]);
        std::copy(src, src + w, dst + kB);
        std::fill(dst + kB + w, dst + pw, src[w - 1]);
      }
    });
  }
  const uint8_t* row(int y) const { return &v[static_cast<size_t>(y + kB) * pw + kB]; }
};

// Tap k's offset in a padded row-major plane of pitch pw.
inline int tap_step(int k, int pw) { return kOffsets[k][0] * pw + kOffsets[k][1]; }

// r(+o_k) + r(-o_k) - 2 r0 for every tap at the sample `c` points to: what tap k multiplies.
inline void pairs_at(const uint8_t* c, const int (&step)[kPostTaps], int (&u)[kPostTaps]) {
  const int c2 = 2 * c[0];
  for (int k = 0; k < kPostTaps; ++k) u[k] = c[step[k]] + c[-step[k]] - c2;
}

// Activity class (0..3) of every pixel: the 3x3 sum of |2r - left - right| + |2r - up - down|
// (the activity replicated beyond the plane's edge, as the samples are), split at the
// plane's quartiles (lower and upper quartile and median of the sums). The quartiles are
// the values at ranks n/4, n/2, 3n/4 of the sorted sums, read from a histogram (a sum is at
// most 9 * 2 * 510). The 3x3 sums are separable: a row's sums of three, then three rows'.
std::vector<uint8_t> classify(const Padded& p, int w, int h) {
  constexpr int kMaxSum = kPostMaxActivity;
  const int aw = w + 2;  // the activity with a border of one, replicated
  std::vector<int16_t> act(static_cast<size_t>(aw) * (h + 2)), row3(act.size());
  std::vector<int16_t> sum(static_cast<size_t>(w) * h);
  parallel_rows(h, kMinRows, [&](int y0, int y1) {
    for (int y = y0; y < y1; ++y) {
      const uint8_t* r = p.row(y);
      const uint8_t* up = r - p.pw;
      const uint8_t* dn = r + p.pw;
      int16_t* a = &act[static_cast<size_t>(y + 1) * aw + 1];
      for (int x = 0; x < w; ++x) {
        const int c = 2 * r[x];
        a[x] = static_cast<int16_t>(std::abs(c - r[x - 1] - r[x + 1]) + std::abs(c - up[x] - dn[x]));
      }
      a[-1] = a[0], a[w] = a[w - 1];
    }
  });
  std::copy_n(&act[static_cast<size_t>(aw)], aw, &act[0]);
  std::copy_n(&act[static_cast<size_t>(h) * aw], aw, &act[static_cast<size_t>(h + 1) * aw]);
  parallel_rows(h + 2, kMinRows, [&](int y0, int y1) {
    for (int y = y0; y < y1; ++y) {
      const int16_t* a = &act[static_cast<size_t>(y) * aw + 1];
      int16_t* o = &row3[static_cast<size_t>(y) * aw + 1];
      for (int x = 0; x < w; ++x) o[x] = static_cast<int16_t>(a[x - 1] + a[x] + a[x + 1]);
    }
  });
  std::vector<int64_t> hist(kMaxSum + 1, 0);
  std::mutex mu;
  parallel_rows(h, kMinRows, [&](int y0, int y1) {
    std::vector<int> local(kMaxSum + 1, 0);
    for (int y = y0; y < y1; ++y) {
      const int16_t* a = &row3[static_cast<size_t>(y) * aw + 1];
      const int16_t* b = a + aw;
      const int16_t* c = b + aw;
      int16_t* o = &sum[static_cast<size_t>(y) * w];
      for (int x = 0; x < w; ++x) {
        const int s = a[x] + b[x] + c[x];
        o[x] = static_cast<int16_t>(s);
        ++local[static_cast<size_t>(s)];
      }
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
  parallel_rows(h, kMinRows, [&](int y0, int y1) {
    for (size_t i = static_cast<size_t>(y0) * w; i < static_cast<size_t>(y1) * w; ++i)
      cls[i] = static_cast<uint8_t>((sum[i] > t[0]) + (sum[i] > t[1]) + (sum[i] > t[2]));
  });
  return cls;
}

// The filtered sample at `c` (a padded plane's sample) with the taps `taps`.
inline int filtered(const uint8_t* c, const int (&step)[kPostTaps], const int* taps) {
  int u[kPostTaps];
  pairs_at(c, step, u);
  int acc = c[0] << kShift;
  for (int k = 0; k < kPostTaps; ++k) acc += taps[k] * u[k];
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

PostFilter post_filter_taps(const PostFilterSums& s) {
  PostFilter f;
  for (int c = 0; c < kPostClasses; ++c) {
    double x[kPostTaps], a[kPostTaps * kPostTaps], b[kPostTaps];
    int n = 0;
    for (int k = 0; k < kPostTaps; ++k)
      for (int j = k; j < kPostTaps; ++j, ++n)
        a[k * kPostTaps + j] = a[j * kPostTaps + k] = static_cast<double>(s.t[c][n]);
    for (int k = 0; k < kPostTaps; ++k) b[k] = static_cast<double>(s.t[c][kPostSym + k]);
    if (s.count[c] < 4 * kPostTaps || !solve(a, b, kPostTaps, x)) continue;
    for (int k = 0; k < kPostTaps; ++k)
      f.taps[c][k] = static_cast<int>(std::clamp<long>(std::lround(x[k] * (1 << kShift)), -kPostTapMax, kPostTapMax));
  }
  return f;
}

void post_filter_keep(const int64_t (&gain)[kPostClasses], double lambda, PostFilter* f) {
  for (int c = 0; c < kPostClasses; ++c) {
    f->on[c] = static_cast<double>(gain[c]) > lambda * kPostTaps * kPostTapBits;
    if (!f->on[c]) std::fill(f->taps[c], f->taps[c] + kPostTaps, 0);
  }
}

int post_filter_bits(const PostFilter& f) {
  int bits = 0;
  for (int c = 0; c < kPostClasses; ++c) bits += 1 + (f.on[c] ? kPostTaps * kPostTapBits : 0);
  return bits;
}

PostFilter design_post_filter(const uint8_t* rec, const uint8_t* orig, int w, int h, double lambda, uint8_t* out) {
  PostFilter f;
  if (w < 1 || h < 1) return f;
  const Padded p(rec, w, h);
  const std::vector<uint8_t> cls = classify(p, w, h);
  int step[kPostTaps];
  for (int k = 0; k < kPostTaps; ++k) step[k] = tap_step(k, p.pw);
  // Normal equations per class for out - r0 = sum_k t_k * pair_k, against orig - r0: the
  // 21 distinct products of the symmetric matrix and the 6 right-hand sides. The sums are of
  // integers, summed exactly (so in any order, on the pool's threads): in 32 bits over at
  // most kRun samples (|pair| <= 510, |orig - r0| <= 255), then in 64.
  constexpr int kSym = kPostSym, kTerms = kPostTerms;
  constexpr int kRun = 4096;  // 4096 * 510 * 510 < 2^31
  PostFilterSums sums;
  std::mutex mu;
  parallel_rows(h, kMinRows, [&](int y0, int y1) {
    PostFilterSums local;
    // A run's samples listed by class, so that each class's sums stay in registers.
    std::vector<uint16_t> list(static_cast<size_t>(kPostClasses) * kRun);
    for (int y = y0; y < y1; ++y) {
      const uint8_t* r = p.row(y);
      const uint8_t* o = orig + static_cast<size_t>(y) * w;
      const uint8_t* cl = &cls[static_cast<size_t>(y) * w];
      for (int x0 = 0; x0 < w; x0 += kRun) {
        const int x1 = std::min(w, x0 + kRun);
        int n_of[kPostClasses] = {};
        for (int x = x0; x < x1; ++x)
          list[static_cast<size_t>(cl[x]) * kRun + n_of[cl[x]]++] = static_cast<uint16_t>(x - x0);
        for (int c = 0; c < kPostClasses; ++c) {
          int32_t acc[kTerms] = {};
          const uint16_t* xs = &list[static_cast<size_t>(c) * kRun];
          for (int i = 0; i < n_of[c]; ++i) {
            const int x = x0 + xs[i];
            int u[kPostTaps];
            pairs_at(r + x, step, u);
            const int e = static_cast<int>(o[x]) - r[x];
            int n = 0;
            for (int k = 0; k < kPostTaps; ++k)
              for (int j = k; j < kPostTaps; ++j) acc[n++] += u[k] * u[j];
            for (int k = 0; k < kPostTaps; ++k) acc[kSym + k] += u[k] * e;
          }
          for (int n = 0; n < kTerms; ++n) local.t[c][n] += acc[n];
          local.count[c] += n_of[c];
        }
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    for (int c = 0; c < kPostClasses; ++c) {
      for (int n = 0; n < kTerms; ++n) sums.t[c][n] += local.t[c][n];
      sums.count[c] += local.count[c];
    }
  });
  f = post_filter_taps(sums);
  // Keep a class's taps only where they lower SSE by more than their bits cost; the
  // filtered samples, computed for that, are the output where the class stays on.
  std::vector<uint8_t> scratch(out ? 0 : static_cast<size_t>(w) * h);
  uint8_t* filt = out ? out : scratch.data();
  int64_t gain[kPostClasses] = {};
  parallel_rows(h, kMinRows, [&](int y0, int y1) {
    int64_t local[kPostClasses] = {};
    for (int y = y0; y < y1; ++y) {
      const uint8_t* r = p.row(y);
      const uint8_t* o = orig + static_cast<size_t>(y) * w;
      const uint8_t* cl = &cls[static_cast<size_t>(y) * w];
      uint8_t* fo = filt + static_cast<size_t>(y) * w;
      for (int x = 0; x < w; ++x) {
        const int c = cl[x];
        const int v = filtered(r + x, step, f.taps[c]);
        fo[x] = static_cast<uint8_t>(v);
        const int before = static_cast<int>(o[x]) - r[x];
        const int after = static_cast<int>(o[x]) - v;
        local[c] += before * before - after * after;
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    for (int c = 0; c < kPostClasses; ++c) gain[c] += local[c];
  });
  post_filter_keep(gain, lambda, &f);
  bool all_on = true;
  for (int c = 0; c < kPostClasses; ++c) all_on = all_on && f.on[c];
  if (out && !all_on)
    parallel_rows(h, kMinRows, [&](int y0, int y1) {
      for (size_t i = static_cast<size_t>(y0) * w; i < static_cast<size_t>(y1) * w; ++i)
        if (!f.on[cls[i]]) out[i] = rec[i];
    });
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
  int step[kPostTaps];
  for (int k = 0; k < kPostTaps; ++k) step[k] = tap_step(k, p.pw);
  parallel_rows(h, kMinRows, [&](int y0, int y1) {
    for (int y = y0; y < y1; ++y) {
      const uint8_t* r = p.row(y);
      const uint8_t* cl = &cls[static_cast<size_t>(y) * w];
      uint8_t* o = out + static_cast<size_t>(y) * w;
      for (int x = 0; x < w; ++x)
        o[x] = f.on[cl[x]] ? static_cast<uint8_t>(filtered(r + x, step, f.taps[cl[x]])) : r[x];
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
