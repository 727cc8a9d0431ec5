#include "codecs/mmp/mmp.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <unordered_map>

#include "codecs/mmp/postfilter.hpp"
#include "codecs/mmp/range_coder.hpp"
#include "core/error.hpp"
#include "core/log.hpp"

namespace vfp::mmp {

namespace {

// Sizes are bounded by the largest block (32x32: 36 scales); a plane uses the scales up to
// its block's size.
constexpr int kMaxLog = kMaxBlockLog, kB = 1 << kMaxLog, kScales = (kMaxLog + 1) * (kMaxLog + 1);
constexpr int kIndexBits = 12, kModeBits = 4;
constexpr int kMinLog = 2;  // smallest prediction unit: 4x4
using Elem = std::vector<int16_t>;

enum Mode { kNone, kDC, kVert, kHorz, kPlane, kDDL, kDDR, kVR, kHD, kVL, kHU };

int scale_of(int lw, int lh) { return lw + (kMaxLog + 1) * lh; }
int floor_div(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// One dictionary per scale; exact duplicates are not inserted; a full scale
// takes no more. Each scale also keeps its element sums and its indices ordered
// by sum (ties by index), which the encoder's search uses to skip elements that
// cannot win.
class Dictionary {
 public:
  Dictionary(int max, int log) : max_(max), log_(log) {
    // Flat elements over the residue range, every 8 levels.
    for (int lh = 0; lh <= log_; ++lh)
      for (int lw = 0; lw <= log_; ++lw)
        for (int v = -252; v <= 252; v += 8)
          insert(scale_of(lw, lh), Elem(static_cast<size_t>(1) << (lw + lh), static_cast<int16_t>(v)));
  }
  const std::vector<Elem>& at(int s) const { return e_[static_cast<size_t>(s)]; }
  const std::vector<int>& sums(int s) const { return sum_[static_cast<size_t>(s)]; }
  const std::vector<int>& by_sum(int s) const { return order_[static_cast<size_t>(s)]; }
  // A new element of scale (lw, lh), and its resized versions at every other
  // scale.
  void add_everywhere(const Elem& e, int lw, int lh) {
    for (int lh2 = 0; lh2 <= log_; ++lh2)
      for (int lw2 = 0; lw2 <= log_; ++lw2)
        insert(scale_of(lw2, lh2), lw2 == lw && lh2 == lh ? e : resize_element(e, lw, lh, lw2, lh2));
  }
  int64_t total() const {
    int64_t t = 0;
    for (const auto& v : e_) t += static_cast<int64_t>(v.size());
    return t;
  }

 private:
  void insert(int s, Elem e) {
    const size_t si = static_cast<size_t>(s);
    auto& list = e_[si];
    if (static_cast<int>(list.size()) >= max_) return;
    uint64_t h = 1469598103934665603ull;
    int sum = 0;
    for (int16_t v : e) h = (h ^ static_cast<uint16_t>(v)) * 1099511628211ull, sum += v;
    auto range = index_[si].equal_range(h);
    for (auto it = range.first; it != range.second; ++it)
      if (list[static_cast<size_t>(it->second)] == e) return;
    const int idx = static_cast<int>(list.size());
    index_[si].emplace(h, idx);
    list.push_back(std::move(e));
    sum_[si].push_back(sum);
    auto& ord = order_[si];
    const auto& sums = sum_[si];
    ord.insert(
        std::upper_bound(ord.begin(), ord.end(), sum, [&](int v, int i) { return v < sums[static_cast<size_t>(i)]; }),
        idx);
  }
  int max_, log_;
  std::array<std::vector<Elem>, kScales> e_;
  std::array<std::vector<int>, kScales> sum_, order_;
  std::array<std::unordered_multimap<uint64_t, int>, kScales> index_;
};

struct Models {
  // Indexed by unit size: [L - kMinLog] for 4x4 .. 32x32 units; splits exist from 8x8 up.
  std::array<std::array<Prob, 1 << kModeBits>, kMaxLog - kMinLog + 1> mode{};
  std::array<Prob, kMaxLog - kMinLog> psplit{};  // [L - kMinLog - 1]
  std::array<Prob, kScales> split{}, dir{};
  std::array<std::vector<Prob>, kScales> index;
  Models() {
    for (auto& t : index) t.assign(size_t(1) << kIndexBits, Prob{});
  }
};

}  // namespace

struct PlaneState::Impl {
  explicit Impl(const Params& p) : dict(p.max_dict, p.block_log) {}
  Dictionary dict;
  Models models;
};
PlaneState::PlaneState(const Params& p) : impl_(std::make_unique<Impl>(p)) {}
PlaneState::~PlaneState() = default;

const char* mode_name(int mode) {
  static const char* names[kModes] = {"none", "DC", "V", "H", "plane", "DDL", "DDR", "VR", "HD", "VL", "HU"};
  return mode >= 0 && mode < kModes ? names[mode] : "?";
}

void predict_block(const uint8_t* rec, const uint8_t* done, int W, int H, int x, int y, int N, int mode, int* pred) {
  (void)H;
  // Reference samples: t[1 + i] = row above (i in -1 .. 2N-1, -1 the corner),
  // l[1 + i] = column to the left (l[0] the corner too). Missing neighbours are
  // substituted (docs/mmp.md), so every mode is defined everywhere.
  int tbuf[2 * kB + 1], lbuf[kB + 1];
  const bool top = y > 0, left = x > 0;
  const auto px = [&](int xx, int yy) { return static_cast<int>(rec[static_cast<size_t>(yy) * W + xx]); };
  for (int i = 0; i < N; ++i) {
    tbuf[1 + i] = top ? px(x + i, y - 1) : left ? px(x - 1, y) : 128;
    lbuf[1 + i] = left ? px(x - 1, y + i) : top ? px(x, y - 1) : 128;
  }
  const bool above_right = top && x + 2 * N <= W && done[static_cast<size_t>(y - 1) * W + x + N];
  for (int i = N; i < 2 * N; ++i) tbuf[1 + i] = above_right ? px(x + i, y - 1) : tbuf[N];
  tbuf[0] = lbuf[0] = top && left ? px(x - 1, y - 1) : tbuf[1];  // corner (tbuf[1] holds the substitute)
  const int* t = tbuf + 1;                                       // t[-1] .. t[2N-1]
  const int* l = lbuf + 1;                                       // l[-1] .. l[N-1]
  const int tl = tbuf[0];
  int dc = 0, b = 0, c = 0, a = 0;
  if (mode == kDC) {
    for (int i = 0; i < N; ++i) dc += t[i] + l[i];
    dc = (dc + N) / (2 * N);
  }
  if (mode == kPlane) {
    // Slopes ~ 16 * H / sum(i^2): in 1/64 for N <= 16 (H.264's 5, 34 and 205), in 1/1024
    // for 32 (11 = 16 * 1024 / 1496, rounded), where 1/64 is too coarse.
    const int half = N / 2, mult = N == 32 ? 11 : N == 16 ? 5 : N == 8 ? 34 : 205, shift = N == 32 ? 10 : 6;
    int hs = 0, vs = 0;
    for (int i = 1; i <= half; ++i) {
      hs += i * (t[half - 1 + i] - t[half - 1 - i]);
      vs += i * (l[half - 1 + i] - l[half - 1 - i]);
    }
    b = (mult * hs + (1 << (shift - 1))) >> shift;
    c = (mult * vs + (1 << (shift - 1))) >> shift;
    a = 16 * (l[N - 1] + t[N - 1]);
  }
  const auto f3 = [](int p, int q, int r) { return (p + 2 * q + r + 2) >> 2; };
  const auto f2 = [](int p, int q) { return (p + q + 1) >> 1; };
  for (int yy = 0; yy < N; ++yy)
    for (int xx = 0; xx < N; ++xx) {
      int v = 128;
      switch (mode) {
        case kNone:
          v = 128;
          break;
        case kDC:
          v = dc;
          break;
        case kVert:
          v = t[xx];
          break;
        case kHorz:
          v = l[yy];
          break;
        case kPlane:
          v = std::clamp((a + b * (xx - (N / 2 - 1)) + c * (yy - (N / 2 - 1)) + 16) >> 5, 0, 255);
          break;
        case kDDL:
          v = xx == N - 1 && yy == N - 1 ? (t[2 * N - 2] + 3 * t[2 * N - 1] + 2) >> 2
                                         : f3(t[xx + yy], t[xx + yy + 1], t[xx + yy + 2]);
          break;
        case kDDR:
          v = xx > yy   ? f3(t[xx - yy - 2], t[xx - yy - 1], t[xx - yy])
              : xx < yy ? f3(l[yy - xx - 2], l[yy - xx - 1], l[yy - xx])
                        : f3(t[0], tl, l[0]);
          break;
        case kVR: {
          const int z = 2 * xx - yy, k = xx - (yy >> 1);
          v = z >= 0    ? ((z & 1) == 0 ? f2(t[k - 1], t[k]) : f3(t[k - 2], t[k - 1], t[k]))
              : z == -1 ? f3(l[0], tl, t[0])
                        : f3(l[yy - 2 * xx - 1], l[yy - 2 * xx - 2], l[yy - 2 * xx - 3]);
          break;
        }
        case kHD: {
          const int z = 2 * yy - xx, k = yy - (xx >> 1);
          v = z >= 0    ? ((z & 1) == 0 ? f2(l[k - 1], l[k]) : f3(l[k - 2], l[k - 1], l[k]))
              : z == -1 ? f3(l[0], tl, t[0])
                        : f3(t[xx - 2 * yy - 1], t[xx - 2 * yy - 2], t[xx - 2 * yy - 3]);
          break;
        }
        case kVL: {
          const int k = xx + (yy >> 1);
          v = (yy & 1) == 0 ? f2(t[k], t[k + 1]) : f3(t[k], t[k + 1], t[k + 2]);
          break;
        }
        case kHU: {
          const int z = xx + 2 * yy, k = yy + (xx >> 1);
          v = z > 2 * N - 3    ? l[N - 1]
              : z == 2 * N - 3 ? (l[N - 2] + 3 * l[N - 1] + 2) >> 2
              : (z & 1) == 0   ? f2(l[k], l[k + 1])
                               : f3(l[k], l[k + 1], l[k + 2]);
          break;
        }
      }
      pred[yy * N + xx] = v;
    }
}

namespace {

// Costs in bits of every index of every scale under the current models, and
// each scale's cheapest index (the rate part of the search's lower bound).
struct IndexCosts {
  std::array<std::vector<double>, kScales> bits;
  std::array<double, kScales> min_bits{};
};

void index_costs(const Models& m, const Dictionary& d, int log, IndexCosts& out) {
  std::vector<double> node(size_t(2) << kIndexBits);
  for (int s = 0; s < kScales; ++s) {
    if (s % (kMaxLog + 1) > log || s / (kMaxLog + 1) > log) continue;  // scale unused at this block size
    const Prob* tree = m.index[static_cast<size_t>(s)].data();
    // Path costs down the bit tree, root first (the same sums as tree_cost()).
    node[1] = 0;
    for (size_t k = 1; k < (size_t(1) << kIndexBits); ++k) {
      node[2 * k] = node[k] + bit_cost(tree[k], 0);
      node[2 * k + 1] = node[k] + bit_cost(tree[k], 1);
    }
    const size_t n = d.at(s).size();
    auto& b = out.bits[static_cast<size_t>(s)];
    b.assign(node.begin() + (1 << kIndexBits), node.begin() + (1 << kIndexBits) + static_cast<long>(n));
    out.min_bits[static_cast<size_t>(s)] = n ? *std::min_element(b.begin(), b.end()) : 0;
  }
}

// The best segmentation of one N x N residue (N = 2^L): for every segment
// (scale, position) the best J, its choice (0 leaf, 1 split into left|right, 2
// into top|bottom) and leaf index.
struct Plan {
  double J[kMaxLog + 1][kMaxLog + 1][kB * kB];
  uint8_t kind[kMaxLog + 1][kMaxLog + 1][kB * kB];
  int index[kMaxLog + 1][kMaxLog + 1][kB * kB];
};

// The element of scale s closest to residue segment `r` (stride N) by J = SSE +
// lambda * (index bits + leaf flag bits); ties go to the lower index. The
// pruned search visits elements in order of |sum(e) - sum(r)| and stops where
// (sum difference)^2 / n, a lower bound of the SSE, plus the cheapest rate
// exceeds the best J: the same answer as trying every element.
void best_leaf(const int* r, int N, int w, int h, int64_t rsum, const Dictionary& d, int s, const IndexCosts& ic,
               double lambda, double leaf_bits, bool exhaustive, double* best_j, int* best_i) {
  const auto& elems = d.at(s);
  const auto& bits = ic.bits[static_cast<size_t>(s)];
  double best = std::numeric_limits<double>::infinity();
  int bi = -1;
  auto try_elem = [&](int i) {
    const double rate = lambda * (bits[static_cast<size_t>(i)] + leaf_bits);
    if (rate > best) return;
    const int16_t* e = elems[static_cast<size_t>(i)].data();
    double dsum = 0;
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        const int diff = r[y * N + x] - e[y * w + x];
        dsum += static_cast<double>(diff * diff);
      }
      if (dsum + rate > best) return;
    }
    const double j = dsum + rate;
    if (j < best || (j == best && i < bi)) best = j, bi = i;
  };
  if (exhaustive) {
    for (int i = 0; i < static_cast<int>(elems.size()); ++i) try_elem(i);
  } else {
    const auto& order = d.by_sum(s);
    const auto& sums = d.sums(s);
    const double n = static_cast<double>(w * h), base = lambda * (ic.min_bits[static_cast<size_t>(s)] + leaf_bits);
    long hi = std::lower_bound(order.begin(), order.end(), rsum,
                               [&](int i, int64_t v) { return sums[static_cast<size_t>(i)] < v; }) -
              order.begin();
    long lo = hi - 1;
    const long size = static_cast<long>(order.size());
    while (lo >= 0 || hi < size) {
      const int64_t dlo = lo >= 0 ? rsum - sums[static_cast<size_t>(order[static_cast<size_t>(lo)])]
                                  : std::numeric_limits<int64_t>::max();
      const int64_t dhi = hi < size ? sums[static_cast<size_t>(order[static_cast<size_t>(hi)])] - rsum
                                    : std::numeric_limits<int64_t>::max();
      const bool up = dhi <= dlo;
      const int64_t dd = up ? dhi : dlo;
      if (static_cast<double>(dd * dd) / n + base > best) break;  // the other side is no closer
      try_elem(order[static_cast<size_t>(up ? hi++ : lo--)]);
    }
  }
  *best_j = best;
  *best_i = bi;
}

void optimise(const int* r, int L, const Dictionary& d, const Models& m, const IndexCosts& ic, double lambda,
              bool exhaustive, Plan& plan) {
  const int N = 1 << L;
  // Integral image of the residue (segment sums for the search's bound).
  int64_t sat[(kB + 1) * (kB + 1)];
  for (int x = 0; x <= N; ++x) sat[x] = 0;
  for (int y = 1; y <= N; ++y) {
    int64_t row = 0;
    sat[y * (N + 1)] = 0;
    for (int x = 1; x <= N; ++x) {
      row += r[(y - 1) * N + x - 1];
      sat[y * (N + 1) + x] = sat[(y - 1) * (N + 1) + x] + row;
    }
  }
  for (int sum = 0; sum <= 2 * L; ++sum)
    for (int lw = std::max(0, sum - L); lw <= std::min(L, sum); ++lw) {
      const int lh = sum - lw, s = scale_of(lw, lh), w = 1 << lw, h = 1 << lh, nx = N >> lw, ny = N >> lh;
      const bool flag = lw + lh > 0, both = lw > 0 && lh > 0;
      const double leaf_bits = flag ? bit_cost(m.split[static_cast<size_t>(s)], 0) : 0;
      const double split_bits = flag ? bit_cost(m.split[static_cast<size_t>(s)], 1) : 0;
      for (int iy = 0; iy < ny; ++iy)
        for (int ix = 0; ix < nx; ++ix) {
          const int at = ix + iy * nx, x0 = ix * w, y0 = iy * h;
          const int64_t rsum = sat[(y0 + h) * (N + 1) + x0 + w] - sat[y0 * (N + 1) + x0 + w] -
                               sat[(y0 + h) * (N + 1) + x0] + sat[y0 * (N + 1) + x0];
          double best;
          int best_i;
          best_leaf(r + y0 * N + x0, N, w, h, rsum, d, s, ic, lambda, leaf_bits, exhaustive, &best, &best_i);
          uint8_t kind = 0;
          if (lw > 0) {  // left | right
            const int nx2 = N >> (lw - 1);
            const double j = lambda * (split_bits + (both ? bit_cost(m.dir[static_cast<size_t>(s)], 0) : 0)) +
                             plan.J[lw - 1][lh][2 * ix + iy * nx2] + plan.J[lw - 1][lh][2 * ix + 1 + iy * nx2];
            if (j < best) best = j, kind = 1;
          }
          if (lh > 0) {  // top / bottom
            const double j = lambda * (split_bits + (both ? bit_cost(m.dir[static_cast<size_t>(s)], 1) : 0)) +
                             plan.J[lw][lh - 1][ix + 2 * iy * nx] + plan.J[lw][lh - 1][ix + (2 * iy + 1) * nx];
            if (j < best) best = j, kind = 2;
          }
          plan.J[lw][lh][at] = best;
          plan.kind[lw][lh][at] = kind;
          plan.index[lw][lh][at] = std::max(best_i, 0);
        }
    }
}

// A prediction unit as coded: position, size 2^L, mode and its segmentation
// tree in pre-order (kind, leaf index).
struct Unit {
  int x = 0, y = 0, L = 0, mode = 0;
  std::vector<std::pair<uint8_t, int>> tree;
};
// The prediction tree of an area: one unit, or four quarter areas in Z order.
struct Area {
  bool split = false;
  Unit unit;
  std::vector<Area> kids;
};

// Walks a unit's segmentation tree (from the encoder's decisions or from the
// stream, or the search's plan): `decide(x0, y0, lw, lh, &kind, &index)` gives
// each node's decision in pre-order; fills the residue reconstruction (stride 2^L) and collects the
// internal nodes (post-order), whose concatenations become new dictionary
// elements.
struct Internal {
  int x0, y0, lw, lh;
};

template <typename Decide>
void walk(int N, int x0, int y0, int lw, int lh, Decide&& decide, const Dictionary& d, int* rres,
          std::vector<Internal>& inner, int64_t& leaves) {
  int kind = 0, index = 0;
  decide(x0, y0, lw, lh, &kind, &index);
  if (kind == 0) {
    const Elem& e = d.at(scale_of(lw, lh))[static_cast<size_t>(index)];
    const int w = 1 << lw, h = 1 << lh;
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) rres[(y0 + y) * N + x0 + x] = e[static_cast<size_t>(y * w + x)];
    ++leaves;
    return;
  }
  if (kind == 1 && lw > 0) {  // (kind 1 needs lw > 0, kind 2 lh > 0: every caller's rule)
    walk(N, x0, y0, lw - 1, lh, decide, d, rres, inner, leaves);
    walk(N, x0 + (1 << (lw - 1)), y0, lw - 1, lh, decide, d, rres, inner, leaves);
  } else if (lh > 0) {
    walk(N, x0, y0, lw, lh - 1, decide, d, rres, inner, leaves);
    walk(N, x0, y0 + (1 << (lh - 1)), lw, lh - 1, decide, d, rres, inner, leaves);
  }
  inner.push_back({x0, y0, lw, lh});
}

// A coded unit's residue and internal nodes, kept until the block's dictionary
// update.
struct Learned {
  int N;
  std::vector<int> rres;
  std::vector<Internal> inner;
};

void learn(const std::vector<Learned>& units, Dictionary& d) {
  for (const Learned& u : units)
    for (const Internal& n : u.inner) {
      const int w = 1 << n.lw, h = 1 << n.lh;
      Elem e(static_cast<size_t>(w * h));
      for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x)
          e[static_cast<size_t>(y * w + x)] =
              static_cast<int16_t>(u.rres[static_cast<size_t>((n.y0 + y) * u.N + n.x0 + x)]);
      d.add_everywhere(e, n.lw, n.lh);
    }
}

// The plane padded to whole blocks by repeating its last column and row.
std::vector<uint8_t> pad(const uint8_t* img, int w, int h, int W, int H) {
  std::vector<uint8_t> p(static_cast<size_t>(W) * H);
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x)
      p[static_cast<size_t>(y) * W + x] = img[static_cast<size_t>(std::min(y, h - 1)) * w + std::min(x, w - 1)];
  return p;
}

// Writes an N x N unit's reconstruction into the plane and marks it decoded.
void put_unit(std::vector<uint8_t>& rec, std::vector<uint8_t>& done, int W, int x, int y, int N, const int* v) {
  for (int yy = 0; yy < N; ++yy)
    for (int xx = 0; xx < N; ++xx) {
      rec[static_cast<size_t>(y + yy) * W + x + xx] = static_cast<uint8_t>(v[yy * N + xx]);
      done[static_cast<size_t>(y + yy) * W + x + xx] = 1;
    }
}

// The encoder's search over one block, with the models and dictionary of
// the block's start (the decoder's state for every decision in it).
class BlockSearch {
 public:
  BlockSearch(const std::vector<uint8_t>& src, std::vector<uint8_t>& rec, std::vector<uint8_t>& done, int W, int H,
              const Dictionary& d, const Models& m, const IndexCosts& ic, const Params& p)
      : src_(src), rec_(rec), done_(done), W_(W), H_(H), d_(d), m_(m), ic_(ic), p_(p) {}

  // Best prediction tree of the 2^L area at (x, y): its J; the area's
  // reconstruction is in the plane afterwards (the units after it predict from
  // it).
  double area(int x, int y, int L, Area& out) {
    const int N = 1 << L;
    Area leaf;
    int leaf_rec[kB * kB];
    double jl = unit(x, y, L, leaf.unit, leaf_rec);
    if (L > kMinLog) jl += p_.lambda * bit_cost(m_.psplit[static_cast<size_t>(L - kMinLog - 1)], 0);
    if (L > kMinLog) {
      Area sp;
      sp.split = true;
      sp.kids.resize(4);
      double js = p_.lambda * bit_cost(m_.psplit[static_cast<size_t>(L - kMinLog - 1)], 1);
      for (int q = 0; q < 4 && js < jl; ++q)
        js += area(x + (q & 1) * N / 2, y + (q >> 1) * N / 2, L - 1, sp.kids[static_cast<size_t>(q)]);
      if (js < jl) {
        out = std::move(sp);
        return js;
      }
    }
    put_unit(rec_, done_, W_, x, y, N, leaf_rec);
    out = std::move(leaf);
    return jl;
  }

 private:
  // Best mode and segmentation of the unit predicted whole; `recon` gets its
  // reconstruction.
  double unit(int x, int y, int L, Unit& u, int* recon) {
    const int N = 1 << L, ctx = L - kMinLog;
    const Prob* mtree = m_.mode[static_cast<size_t>(ctx)].data();
    std::array<std::array<int, kB * kB>, kModes> preds;
    std::array<std::pair<double, int>, kModes> rank;
    for (int mode = 0; mode < kModes; ++mode) {
      predict_block(rec_.data(), done_.data(), W_, H_, x, y, N, mode, preds[static_cast<size_t>(mode)].data());
      double sse = 0;
      for (int i = 0; i < N * N; ++i) {
        const int d = src_[static_cast<size_t>(y + i / N) * W_ + x + i % N] -
                      preds[static_cast<size_t>(mode)][static_cast<size_t>(i)];
        sse += static_cast<double>(d * d);
      }
      rank[static_cast<size_t>(mode)] = {sse + p_.lambda * tree_cost(mtree, kModeBits, static_cast<uint32_t>(mode)),
                                         mode};
    }
    std::stable_sort(rank.begin(), rank.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    const int candidates = std::clamp(p_.mode_candidates, 1, kModes);
    double best = std::numeric_limits<double>::infinity();
    int r[kB * kB];
    for (int c = 0; c < candidates; ++c) {
      const int mode = rank[static_cast<size_t>(c)].second;
      const int* pred = preds[static_cast<size_t>(mode)].data();
      for (int i = 0; i < N * N; ++i) r[i] = src_[static_cast<size_t>(y + i / N) * W_ + x + i % N] - pred[i];
      optimise(r, L, d_, m_, ic_, p_.lambda, p_.exhaustive, *plan_);
      const double j = plan_->J[L][L][0] + p_.lambda * tree_cost(mtree, kModeBits, static_cast<uint32_t>(mode));
      if (j < best || (j == best && mode < u.mode)) {
        best = j;
        u.x = x, u.y = y, u.L = L, u.mode = mode;
        u.tree.clear();
        int rres[kB * kB];
        auto from_plan = [&](int x0, int y0, int lw, int lh, int* kind, int* index) {
          const int at = (x0 >> lw) + (y0 >> lh) * (N >> lw);
          *kind = plan_->kind[lw][lh][at];
          *index = plan_->index[lw][lh][at];
          u.tree.emplace_back(static_cast<uint8_t>(*kind), *index);
        };
        std::vector<Internal> inner;  // learned only once the block is coded
        int64_t leaves = 0;
        walk(N, 0, 0, L, L, from_plan, d_, rres, inner, leaves);
        for (int i = 0; i < N * N; ++i) recon[i] = std::clamp(pred[i] + rres[i], 0, 255);
      }
    }
    return best;
  }

  const std::vector<uint8_t>& src_;
  std::vector<uint8_t>& rec_;
  std::vector<uint8_t>& done_;
  int W_, H_;
  const Dictionary& d_;
  const Models& m_;
  const IndexCosts& ic_;
  const Params& p_;
  std::unique_ptr<Plan> plan_{new Plan};  // default-initialised: optimise() writes before it reads
};

// Codes an area's prediction tree and units; collects what the block's update
// learns.
void emit_area(const Area& a, int L, RangeEncoder& enc, Models& m, const Dictionary& d, PlaneResult& res,
               std::vector<Learned>& learned) {
  if (L > kMinLog) enc.encode(m.psplit[static_cast<size_t>(L - kMinLog - 1)], a.split ? 1 : 0);
  if (a.split && L > kMinLog) {
    for (const Area& k : a.kids) emit_area(k, L - 1, enc, m, d, res, learned);
    return;
  }
  const Unit& u = a.unit;
  enc.encode_tree(m.mode[static_cast<size_t>(L - kMinLog)].data(), kModeBits, static_cast<uint32_t>(u.mode));
  ++res.modes[u.mode];
  ++res.unit_sizes[kMaxLog - L];
  size_t next = 0;
  auto decide = [&](int, int, int lw, int lh, int* kind, int* index) {
    const int s = scale_of(lw, lh);
    *kind = u.tree[next].first;
    *index = u.tree[next].second;
    ++next;
    if (lw + lh > 0) {
      enc.encode(m.split[static_cast<size_t>(s)], *kind != 0);
      if (*kind != 0 && lw > 0 && lh > 0) enc.encode(m.dir[static_cast<size_t>(s)], *kind == 2);
    }
    if (*kind == 0)
      enc.encode_tree(m.index[static_cast<size_t>(s)].data(), kIndexBits, static_cast<uint32_t>(*index));
    else
      ++res.splits[*kind - 1];
  };
  Learned l{1 << L, std::vector<int>(static_cast<size_t>(1) << (2 * L)), {}};
  walk(l.N, 0, 0, L, L, decide, d, l.rres.data(), l.inner, res.leaves);
  learned.push_back(std::move(l));
}

[[noreturn]] void corrupt(int bx, int by) {
  throw Error(ErrorKind::Input,
              "MMP: corrupt or truncated data (block at " + std::to_string(bx) + "," + std::to_string(by) + ")");
}

}  // namespace

std::vector<int16_t> resize_element(const std::vector<int16_t>& e, int lw1, int lh1, int lw2, int lh2) {
  const int w1 = 1 << lw1, h1 = 1 << lh1, w2 = 1 << lw2, h2 = 1 << lh2;
  std::vector<int> tmp(static_cast<size_t>(w2 * h1));
  for (int y = 0; y < h1; ++y)
    for (int x = 0; x < w2; ++x) {
      if (w2 >= w1) {
        tmp[static_cast<size_t>(y * w2 + x)] = e[static_cast<size_t>(y * w1 + x * w1 / w2)];
      } else {
        const int k = w1 / w2;
        int sum = 0;
        for (int i = 0; i < k; ++i) sum += e[static_cast<size_t>(y * w1 + x * k + i)];
        tmp[static_cast<size_t>(y * w2 + x)] = floor_div(2 * sum + k, 2 * k);
      }
    }
  std::vector<int16_t> out(static_cast<size_t>(w2 * h2));
  for (int y = 0; y < h2; ++y)
    for (int x = 0; x < w2; ++x) {
      int v;
      if (h2 >= h1) {
        v = tmp[static_cast<size_t>((y * h1 / h2) * w2 + x)];
      } else {
        const int k = h1 / h2;
        int sum = 0;
        for (int i = 0; i < k; ++i) sum += tmp[static_cast<size_t>((y * k + i) * w2 + x)];
        v = floor_div(2 * sum + k, 2 * k);
      }
      out[static_cast<size_t>(y * w2 + x)] = static_cast<int16_t>(v);
    }
  return out;
}

int checked_block_log(const Params& p) {
  if (p.block_log < kMinBlockLog || p.block_log > kMaxBlockLog)
    throw Error(ErrorKind::Usage, "MMP: block size 2^" + std::to_string(p.block_log) + " (8, 16 or 32)");
  return p.block_log;
}

void check_lambda(const Params& p) {
  // A NaN cost compares false with everything: the search would pick no candidate.
  if (!std::isfinite(p.lambda) || p.lambda < 0)
    throw Error(ErrorKind::Usage, log::format("MMP: lambda %g is not a finite number >= 0", p.lambda));
}

PlaneResult encode_plane(const uint8_t* img, int w, int h, const Params& p, PlaneState* state) {
  check_lambda(p);
  const int BL = checked_block_log(p), B = 1 << BL;
  const int W = (w + B - 1) / B * B, H = (h + B - 1) / B * B;
  const std::vector<uint8_t> src = pad(img, w, h, W, H);
  std::vector<uint8_t> rec(src.size(), 0), done(src.size(), 0);
  std::unique_ptr<PlaneState> fresh;
  if (!state) state = (fresh = std::make_unique<PlaneState>(p)).get();
  PlaneState::Impl& st = state->impl();
  Dictionary& dict = st.dict;
  Models& models = st.models;
  RangeEncoder enc;
  PlaneResult res;
  IndexCosts ic;
  std::vector<Learned> learned;
  for (int by = 0; by < H; by += B)
    for (int bx = 0; bx < W; bx += B) {
      index_costs(models, dict, BL, ic);
      Area area;
      {
        BlockSearch search(src, rec, done, W, H, dict, models, ic, p);
        search.area(bx, by, BL, area);  // leaves the block's reconstruction in `rec`
      }
      learned.clear();
      emit_area(area, BL, enc, models, dict, res, learned);
      learn(learned, dict);
      ++res.blocks;
    }
  // The plane as decoded, cropped; then the post-filter, designed against the original and
  // sent after the last block (it does not touch the prediction loop above).
  std::vector<uint8_t> decoded(static_cast<size_t>(w) * h);
  for (int y = 0; y < h; ++y)
    std::memcpy(&decoded[static_cast<size_t>(y) * w], &rec[static_cast<size_t>(y) * W], static_cast<size_t>(w));
  res.recon.resize(decoded.size());
  if (p.post_filter) {
    const PostFilter f = design_post_filter(decoded.data(), img, w, h, p.lambda);
    write_post_filter(enc, f);
    apply_post_filter(f, decoded.data(), w, h, res.recon.data());
    for (int c = 0; c < kPostClasses; ++c) res.post_filter_classes += f.on[c] ? 1 : 0;
  } else {
    res.recon = decoded;
  }
  res.bytes = enc.finish();
  for (size_t i = 0; i < decoded.size(); ++i) {
    const double d = static_cast<double>(res.recon[i]) - img[i];
    res.sse += d * d;
  }
  res.dict_elements = dict.total();
  return res;
}

size_t min_plane_bytes(int w, int h, int block_log) {
  const int64_t b = int64_t{1} << block_log;
  const int64_t blocks = ((w + b - 1) / b) * ((h + b - 1) / b);
  const double bits = static_cast<double>(blocks) * kModeBits * 0.0220;
  return static_cast<size_t>(bits / 8 * 0.5);
}

std::vector<uint8_t> decode_plane(const uint8_t* data, size_t n, int w, int h, const Params& p, PlaneState* state) {
  const int BL = checked_block_log(p), B = 1 << BL;
  const int W = (w + B - 1) / B * B, H = (h + B - 1) / B * B;
  std::vector<uint8_t> rec(static_cast<size_t>(W) * H, 0), done(rec.size(), 0);
  std::unique_ptr<PlaneState> fresh;
  if (!state) state = (fresh = std::make_unique<PlaneState>(p)).get();
  PlaneState::Impl& st = state->impl();
  Dictionary& dict = st.dict;
  Models& models = st.models;
  RangeDecoder dec(data, n);
  std::vector<Learned> learned;
  int64_t leaves = 0;
  for (int by = 0; by < H; by += B)
    for (int bx = 0; bx < W; bx += B) {
      learned.clear();
      // The block's prediction tree, depth first in Z order, as the encoder
      // wrote it.
      auto area = [&](auto&& self, int x, int y, int L) -> void {
        const int N = 1 << L;
        if (L > kMinLog && dec.decode(models.psplit[static_cast<size_t>(L - kMinLog - 1)])) {
          for (int q = 0; q < 4; ++q) self(self, x + (q & 1) * N / 2, y + (q >> 1) * N / 2, L - 1);
          return;
        }
        const int mode =
            static_cast<int>(dec.decode_tree(models.mode[static_cast<size_t>(L - kMinLog)].data(), kModeBits));
        if (mode >= kModes || dec.overrun()) corrupt(bx, by);
        int pred[kB * kB];
        predict_block(rec.data(), done.data(), W, H, x, y, N, mode, pred);
        auto decide = [&](int, int, int lw, int lh, int* kind, int* index) {
          const int s = scale_of(lw, lh);
          *kind = 0;
          if (lw + lh > 0 && dec.decode(models.split[static_cast<size_t>(s)])) {
            *kind = lw > 0 && lh > 0 ? 1 + dec.decode(models.dir[static_cast<size_t>(s)]) : lw > 0 ? 1 : 2;
            return;
          }
          const uint32_t i = dec.decode_tree(models.index[static_cast<size_t>(s)].data(), kIndexBits);
          if (i >= dict.at(s).size() || dec.overrun()) corrupt(bx, by);
          *index = static_cast<int>(i);
        };
        Learned l{N, std::vector<int>(static_cast<size_t>(N * N)), {}};
        walk(N, 0, 0, L, L, decide, dict, l.rres.data(), l.inner, leaves);
        if (dec.overrun()) corrupt(bx, by);
        int v[kB * kB];
        for (int i = 0; i < N * N; ++i) v[i] = std::clamp(pred[i] + l.rres[static_cast<size_t>(i)], 0, 255);
        put_unit(rec, done, W, x, y, N, v);
        learned.push_back(std::move(l));
      };
      area(area, bx, by, BL);
      learn(learned, dict);
    }
  std::vector<uint8_t> out(static_cast<size_t>(w) * h);
  for (int y = 0; y < h; ++y)
    std::memcpy(&out[static_cast<size_t>(y) * w], &rec[static_cast<size_t>(y) * W], static_cast<size_t>(w));
  if (!p.post_filter) return out;
  const PostFilter f = read_post_filter(dec);
  if (dec.overrun()) corrupt(W, H);
  std::vector<uint8_t> filtered(out.size());
  apply_post_filter(f, out.data(), w, h, filtered.data());
  return filtered;
}

}  // namespace vfp::mmp
