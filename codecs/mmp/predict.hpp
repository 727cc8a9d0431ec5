// MMP's intra prediction of an N x N unit (N = 4..32), in a form both the CPU codec and
// the GPU encoder compile: the unit's reference samples and its mode-independent values
// are gathered once (PredictionRefs), then any mode's sample is a function of them and the
// position, so the GPU can compute all modes' samples in parallel and the CPU loop gives the
// same integers. docs/mmp.md defines the modes and the substitution of missing neighbours.
#pragma once
#include <cstdint>

#include "codecs/mmp/device_code.hpp"

namespace vfp::mmp {

enum PredictionMode { kNone, kDC, kVert, kHorz, kPlane, kDDL, kDDR, kVR, kHD, kVL, kHU };

// Plain data without initialisers: the GPU keeps one in shared memory.
struct PredictionRefs {
  int N;
  int tbuf[2 * 32 + 1];  // tbuf[0] the corner, tbuf[1 + i] the row above (i = 0 .. 2N-1)
  int lbuf[32 + 1];      // lbuf[0] the corner, lbuf[1 + i] the column to the left (i = 0 .. N-1)
  int dc, a, b, c;       // DC value; plane mode's offset and slopes
};

// Where a unit's references come from: which neighbours exist, and whether the samples
// above-right of it are decoded (`done(xx, yy)` is asked only for the sample above-right of
// the unit, in the row above it).
struct RefSource {
  int x, y, N;
  bool top, left, above_right;
};
template <typename Done>
VFP_MMP_HD inline RefSource ref_source(Done&& done, int W, int x, int y, int N) {
  RefSource s{x, y, N, y > 0, x > 0, false};
  s.above_right = s.top && x + 2 * N <= W && done(x + N, y - 1);
  return s;
}
// Reference i of the row above (i = -1, the corner, .. 2N - 1) and of the column to the left
// (i = -1 .. N - 1), with the substitutes for missing neighbours; `px(xx, yy)` reads a decoded
// sample. Each is a function of i alone, so that the GPU gathers them in parallel.
template <typename Px>
VFP_MMP_HD inline int ref_top(const RefSource& s, Px&& px, int i) {
  if (i < 0) {
    if (s.top && s.left) return px(s.x - 1, s.y - 1);
    i = 0;  // the corner's substitute
  }
  if (i >= s.N && !s.above_right) i = s.N - 1;
  return s.top ? px(s.x + i, s.y - 1) : s.left ? px(s.x - 1, s.y) : 128;
}
template <typename Px>
VFP_MMP_HD inline int ref_left(const RefSource& s, Px&& px, int i) {
  if (i < 0) return ref_top(s, px, -1);
  return s.left ? px(s.x - 1, s.y + i) : s.top ? px(s.x, s.y - 1) : 128;
}
// The mode-independent values from the references t(i) and l(i) (i = -1 ..).
template <typename T, typename L>
VFP_MMP_HD inline void ref_values(T&& t, L&& l, int N, PredictionRefs* r) {
  int dc = 0;
  for (int i = 0; i < N; ++i) dc += t(i) + l(i);
  r->dc = (dc + N) / (2 * N);
  // Slopes ~ 16 * H / sum(i^2): in 1/64 for N <= 16 (H.264's 5, 34 and 205), in 1/1024 for
  // 32 (11 = 16 * 1024 / 1496, rounded), where 1/64 is too coarse.
  const int half = N / 2, mult = N == 32 ? 11 : N == 16 ? 5 : N == 8 ? 34 : 205, shift = N == 32 ? 10 : 6;
  int hs = 0, vs = 0;
  for (int i = 1; i <= half; ++i) {
    hs += i * (t(half - 1 + i) - t(half - 1 - i));
    vs += i * (l(half - 1 + i) - l(half - 1 - i));
  }
  r->b = (mult * hs + (1 << (shift - 1))) >> shift;
  r->c = (mult * vs + (1 << (shift - 1))) >> shift;
  r->a = 16 * (l(N - 1) + t(N - 1));
}

// The references of the unit at (x, y) of a W-wide plane (tile) and their values.
template <typename Px, typename Done>
VFP_MMP_HD inline void prediction_refs(Px&& px, Done&& done, int W, int x, int y, int N, PredictionRefs* r) {
  const RefSource s = ref_source(done, W, x, y, N);
  r->N = N;
  for (int i = -1; i < 2 * N; ++i) r->tbuf[1 + i] = ref_top(s, px, i);
  for (int i = -1; i < N; ++i) r->lbuf[1 + i] = ref_left(s, px, i);
  ref_values([&](int i) { return r->tbuf[1 + i]; }, [&](int i) { return r->lbuf[1 + i]; }, N, r);
}

// The prediction of `mode` at (xx, yy) of the unit.
VFP_MMP_HD inline int predict_sample(const PredictionRefs& r, int mode, int xx, int yy) {
  const int N = r.N;
  const int* t = r.tbuf + 1;
  const int* l = r.lbuf + 1;
  const int tl = r.tbuf[0];
  const auto f3 = [](int p, int q, int s) { return (p + 2 * q + s + 2) >> 2; };
  const auto f2 = [](int p, int q) { return (p + q + 1) >> 1; };
  switch (mode) {
    case kDC:
      return r.dc;
    case kVert:
      return t[xx];
    case kHorz:
      return l[yy];
    case kPlane: {
      const int v = (r.a + r.b * (xx - (N / 2 - 1)) + r.c * (yy - (N / 2 - 1)) + 16) >> 5;
      return v < 0 ? 0 : v > 255 ? 255 : v;
    }
    case kDDL:
      return xx == N - 1 && yy == N - 1 ? (t[2 * N - 2] + 3 * t[2 * N - 1] + 2) >> 2
                                        : f3(t[xx + yy], t[xx + yy + 1], t[xx + yy + 2]);
    case kDDR:
      return xx > yy   ? f3(t[xx - yy - 2], t[xx - yy - 1], t[xx - yy])
             : xx < yy ? f3(l[yy - xx - 2], l[yy - xx - 1], l[yy - xx])
                       : f3(t[0], tl, l[0]);
    case kVR: {
      const int z = 2 * xx - yy, k = xx - (yy >> 1);
      return z >= 0    ? ((z & 1) == 0 ? f2(t[k - 1], t[k]) : f3(t[k - 2], t[k - 1], t[k]))
             : z == -1 ? f3(l[0], tl, t[0])
                       : f3(l[yy - 2 * xx - 1], l[yy - 2 * xx - 2], l[yy - 2 * xx - 3]);
    }
    case kHD: {
      const int z = 2 * yy - xx, k = yy - (xx >> 1);
      return z >= 0    ? ((z & 1) == 0 ? f2(l[k - 1], l[k]) : f3(l[k - 2], l[k - 1], l[k]))
             : z == -1 ? f3(l[0], tl, t[0])
                       : f3(t[xx - 2 * yy - 1], t[xx - 2 * yy - 2], t[xx - 2 * yy - 3]);
    }
    case kVL: {
      const int k = xx + (yy >> 1);
      return (yy & 1) == 0 ? f2(t[k], t[k + 1]) : f3(t[k], t[k + 1], t[k + 2]);
    }
    case kHU: {
      const int z = xx + 2 * yy, k = yy + (xx >> 1);
      return z > 2 * N - 3    ? l[N - 1]
             : z == 2 * N - 3 ? (l[N - 2] + 3 * l[N - 1] + 2) >> 2
             : (z & 1) == 0   ? f2(l[k], l[k + 1])
                              : f3(l[k], l[k + 1], l[k + 2]);
    }
    default:  // kNone
      return 128;
  }
}

}  // namespace vfp::mmp
