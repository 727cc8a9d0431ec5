// Restoration post-filter of the MMP codec (docs/mmp.md, "Post-filter"): a Wiener-style
// filter that the encoder designs by least squares against the original plane and sends in
// the plane's stream (after its last block), and that the decoder applies to the decoded
// plane. It works outside the prediction loop: blocks are predicted and dictionaries learn
// from the unfiltered reconstruction; only the plane handed out is filtered.
//
// Shape: a 5x5 diamond, point-symmetric, with unit DC gain by construction:
//   out = clamp((1024 * r0 + sum_k t_k * (r(+o_k) + r(-o_k) - 2 * r0) + 512) >> 10, 0, 255)
// for the six offsets o_k = (0,1) (0,2) (1,0) (2,0) (1,1) (1,-1) (dy,dx), samples outside the
// plane replicated from its edge, integer arithmetic only (the decoder's output is exact).
// Each pixel belongs to one of four classes by its local activity (the 3x3 sum of
// |2r - left - right| + |2r - up - down|, split at the plane's quartiles), and each class
// has its own taps or none.
#pragma once
#include <cstdint>

#include "codecs/mmp/range_coder.hpp"

namespace vfp::mmp {

constexpr int kPostClasses = 4;
constexpr int kPostTaps = 6;      // per class, besides the derived centre
constexpr int kPostTapBits = 10;  // signed, in 1/1024
constexpr int kPostTapMax = (1 << (kPostTapBits - 1)) - 1;

struct PostFilter {
  bool on[kPostClasses] = {};
  int taps[kPostClasses][kPostTaps] = {};
};

// Bits a filter costs in the stream: one flag per class, kPostTapBits per tap of a class
// that is on.
int post_filter_bits(const PostFilter& f);

// Encoder: the filter minimising SSE + lambda * bits against `orig`, class by class (a class
// whose best taps do not pay for themselves stays off). With `out` (not aliasing `rec`), also
// writes what apply_post_filter() would with that filter, from the work the design did.
PostFilter design_post_filter(const uint8_t* rec, const uint8_t* orig, int w, int h, double lambda,
                              uint8_t* out = nullptr);

// The design's exact integer statistics, which design_post_filter() sums over the plane (in
// any order: they are integers). Per class: the normal equations' 21 distinct products of
// the tap pairs u_k = r(+o_k) + r(-o_k) - 2 r0, their 6 products with the error orig - r0,
// and the class's sample count. A device that sums the same integers gets the same filter
// from post_filter_taps() and post_filter_keep().
constexpr int kPostSym = kPostTaps * (kPostTaps + 1) / 2, kPostTerms = kPostSym + kPostTaps;
struct PostFilterSums {
  int64_t t[kPostClasses][kPostTerms] = {};
  int64_t count[kPostClasses] = {};
};
// The most a sample's 3x3 activity sum can be (the classes' histogram has one more bin).
constexpr int kPostMaxActivity = 9 * 2 * 510;

// Each class's taps from its sums: least squares, rounded to 1/1024 and clamped; no taps
// for a class of fewer than 4 samples a tap or a singular system. Every class is left off.
PostFilter post_filter_taps(const PostFilterSums& s);
// Turns class c on where its taps lower the SSE (gain[c]: SSE before minus SSE after over
// the class's samples) by more than their bits cost at `lambda`; zeroes the others' taps.
void post_filter_keep(const int64_t (&gain)[kPostClasses], double lambda, PostFilter* f);

// Filters the w x h plane `rec` into `out` (which must not alias it).
void apply_post_filter(const PostFilter& f, const uint8_t* rec, int w, int h, uint8_t* out);

void write_post_filter(RangeEncoder& enc, const PostFilter& f);
PostFilter read_post_filter(RangeDecoder& dec);  // the caller checks dec.overrun()

}  // namespace vfp::mmp
