// The sum order of the GPU's small-segment search (cuda/mmp_search.cu, small_rows_sum()):
// the integer rules by which it skips dictionary elements whose sum lies far from a
// segment's, in one definition for the kernel and for the CPU test that checks them
// against the exhaustive search (tests/test_mmp.cpp).
//
// For a segment x and an element d of n samples, SSE(x, d) >= (sum x - sum d)^2 / n
// (Cauchy-Schwarz on x - d), and SSE is an integer, so SSE >= ceil((sum x - sum d)^2 / n).
// An element's J = fl(SSE + rate) is then at least that integer plus floor(rate); where
// this exceeds floor(J) of an element already found, the element can neither win nor tie.
#pragma once

#include <climits>

#include "codecs/mmp/device_code.hpp"

namespace vfp::mmp::sum_order {

constexpr int kBuckets = 1024;  // the counting sort's buckets
constexpr int kRun = 32;        // elements a run (a warp's lanes)
constexpr int kTile = 128;      // elements a step of the walk (a run a warp, 4 warps)

// Sums of n samples (n = 4, 8, 16; samples in -255..255) in buckets of 2^shift sums:
// buckets 0..1020, and the sum 0 begins bucket 510.
VFP_MMP_HD constexpr int shift(int n) { return n <= 4 ? 1 : n == 8 ? 2 : 3; }
VFP_MMP_HD constexpr int log2_samples(int n) { return n <= 4 ? 2 : n == 8 ? 3 : 4; }
VFP_MMP_HD inline int bucket(int sum, int n) {
  const int k = (sum + 255 * n) >> shift(n);
  return k < 0 ? 0 : k > kBuckets - 1 ? kBuckets - 1 : k;
}
// The least sum of bucket k (the end buckets also hold whatever the clamp puts there:
// callers treat their far side as unbounded).
VFP_MMP_HD constexpr int bucket_low(int k, int n) { return (k << shift(n)) - 255 * n; }

// ceil(d^2 / n) + r: the least J (rounded down) of an element at sum distance d whose
// rate is at least r. d <= 2 * 255 * 16 and r <= 2^30 keep it in an int.
VFP_MMP_HD inline int bound(int d, int n, int r) { return ((d * d + n - 1) >> log2_samples(n)) + r; }

// The distance from a segment's sum to a run's sums [lo, hi] (0 inside).
VFP_MMP_HD inline int distance(int sum, int lo, int hi) {
  const int below = lo - sum, above = sum - hi;
  return below > 0 ? below : above > 0 ? above : 0;
}

// A rate rounded down to an int, capped at 2^30 (a lower bound all the same).
VFP_MMP_HD inline int rate_floor(double rate) { return rate < 1073741824.0 ? static_cast<int>(rate) : 1 << 30; }

// The walk's k-th tile of `tiles`, from `zero` (the tile holding the first sum >= 0)
// outward: zero, zero + 1, zero - 1, zero + 2, ..., then the longer side's rest in order.
VFP_MMP_HD inline int walk_tile(int k, int zero, int tiles) {
  const int below = zero, above = tiles - 1 - zero, both = below < above ? below : above;
  if (k == 0) return zero;
  if (k <= 2 * both) return (k & 1) ? zero + (k + 1) / 2 : zero - k / 2;
  return above > below ? zero + (k - both) : zero - (k - both);
}

// Where the sums beyond a run of the walk begin: on the up side (1) every later position's
// sum is at least the returned value, on the down side (0) at most it. lo / hi: the run's
// least and greatest sums (the order is by bucket, so later runs' buckets lie beyond them).
VFP_MMP_HD inline int beyond_edge(int side, int lo, int hi, int n) {
  if (side == 1) {
    const int k = bucket(hi, n);
    return k == 0 ? INT_MIN / 4 : bucket_low(k, n);
  }
  const int k = bucket(lo, n);
  return k == kBuckets - 1 ? INT_MAX / 4 : bucket_low(k + 1, n) - 1;
}

// Whether a segment of sum `sum` with best J so far `limit` (floor) could need anything
// beyond a run whose edge is `edge` on `side`, every rate being at least `least_rate`.
VFP_MMP_HD inline bool may_need_beyond(int side, int edge, int sum, int n, int least_rate, int limit) {
  const int d = side == 1 ? edge - sum : sum - edge;
  return d < 0 || bound(d, n, least_rate) <= limit;
}

// A model of one chunk of small_rows_sum()'s walk for one segment, on the CPU (the test
// of these rules against the exhaustive search, and vfpipe-mmp-pairs' count): the sum
// order's `count` positions, `zero` the first whose sum is at least 0, `seed_best` the best
// J the seed found. sum(p) / rate(p): position p's sum and rate; visit(p) searches it and
// returns its J. The chunk takes the walk's steps chunk, chunk + chunks, ...; each step is a
// run a warp, and `pick(ready)` chooses which warp (a bit of `ready`) goes next, so that any
// interleaving of the kernel's warps can be replayed. Returns the best J found.
template <class Sum, class Rate, class Visit, class Pick>
double model_walk(int count, int zero, int n, int segment_sum, double seed_best, int least_rate, int chunk, int chunks,
                  const Sum& sum, const Rate& rate, const Visit& visit, const Pick& pick) {
  constexpr int kWarps = kTile / kRun;
  const int tiles = (count + kTile - 1) / kTile;
  const int zt = tiles == 0 ? 0 : (zero / kTile < tiles - 1 ? zero / kTile : tiles - 1);
  double best = seed_best;
  const auto limit = [&] { return best < 2.0e9 ? static_cast<int>(best) : INT_MAX; };
  int end_down = INT_MIN, end_up = INT_MAX;  // as the kernel's shared `end`
  int step[kWarps];
  for (int& k : step) k = chunk;
  for (;;) {
    unsigned ready = 0;
    for (int w = 0; w < kWarps; ++w)
      if (step[w] < tiles) ready |= 1u << w;
    if (!ready) break;
    const int w = pick(ready);
    const int tile = walk_tile(step[w], zt, tiles);
    step[w] += chunks;
    const int side = tile > zt ? 1 : tile < zt ? 0 : -1;
    const int from = tile * kTile + w * kRun;
    if (from >= count) continue;
    if ((side == 1 && from >= end_up) || (side == 0 && from + kRun <= end_down)) continue;
    const int to = from + kRun < count ? from + kRun : count;
    int lo = INT_MAX, hi = INT_MIN, rmin = INT_MAX;
    for (int p = from; p < to; ++p) {
      const int v = sum(p), r = rate_floor(rate(p));
      lo = v < lo ? v : lo, hi = v > hi ? v : hi, rmin = r < rmin ? r : rmin;
    }
    const bool needed = bound(distance(segment_sum, lo, hi), n, rmin) <= limit();
    if (side >= 0 && !may_need_beyond(side, beyond_edge(side, lo, hi, n), segment_sum, n, least_rate, limit())) {
      if (side == 1)
        end_up = from + kRun < end_up ? from + kRun : end_up;
      else
        end_down = from > end_down ? from : end_down;
    }
    if (needed)
      for (int p = from; p < to; ++p) {
        const double j = visit(p);
        best = j < best ? j : best;
      }
  }
  return best;
}

}  // namespace vfp::mmp::sum_order
