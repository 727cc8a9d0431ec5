#include "codecs/mmp/mmp.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "codecs/mmp/dictionary.hpp"
#include "codecs/mmp/postfilter.hpp"
#include "codecs/mmp/predict.hpp"
#include "codecs/mmp/range_coder.hpp"
#include "codecs/mmp/search.hpp"
#include "core/error.hpp"
#include "core/frame.hpp"
#include "core/log.hpp"
#include "core/parallel.hpp"

namespace vfp::mmp {

namespace {

// Sizes are bounded by the largest block (32x32: 36 scales); a plane uses the scales up to
// its block's size.
constexpr int kMaxLog = kMaxBlockLog, kB = 1 << kMaxLog;
constexpr int kIndexBits = 12, kModeBits = 4;
constexpr int kMinLog = 2;  // smallest prediction unit: 4x4

uint64_t next_stamp() {
  static std::atomic<uint64_t> n{0};
  return ++n;
}

struct Models {
  // Indexed by unit size: [L - kMinLog] for 4x4 .. 32x32 units; splits exist from 8x8 up.
  std::array<std::array<Prob, 1 << kModeBits>, kMaxLog - kMinLog + 1> mode{};
  std::array<Prob, kMaxLog - kMinLog> psplit{};  // [L - kMinLog - 1]
  std::array<Prob, kScales> split{}, dir{};
  std::array<std::vector<Prob>, kScales> index;
  // A new value (unique in the process) whenever a scale's index model may have changed:
  // a search backend that keeps a copy of the models sends only what changed
  // (search.hpp's BlockQuery::index_stamp).
  std::array<uint64_t, kScales> index_stamp{};
  Models() {
    for (auto& t : index) t.assign(size_t(1) << kIndexBits, Prob{});
    touch_all();
  }
  void touch(int s) { index_stamp[static_cast<size_t>(s)] = next_stamp(); }
  void touch_all() {
    for (int s = 0; s < kScales; ++s) touch(s);
  }
};

}  // namespace

// What a plane's coding learns, kept between frames (carry) and from Cb to Cr: one
// dictionary set and one model set for an untiled plane; for a tiled one, per tile or per
// plane as its TileMode says. Made at first use, when the tile count is known.
struct PlaneState::Impl {
  explicit Impl(const Params& p) : params(p) {}
  void prepare(const Params& p, int tile_count) {
    const bool tiled = p.tiled();
    if (tiles > 0) {
      if (tile_count != tiles || tiled != params.tiled() || (tiled && p.tile_mode != params.tile_mode))
        throw Error(ErrorKind::Usage, "MMP: the carried dictionaries were made for another tiling");
      return;
    }
    params = p;
    tiles = tile_count;
    const bool own_dicts = !tiled || p.tile_mode == TileMode::Independent;
    const bool own_models = own_dicts || p.tile_mode == TileMode::SyncDictionaries;
    for (int t = 0; t < (own_dicts ? tile_count : 1); ++t)
      dicts.push_back(std::make_unique<Dictionary>(p.max_dict, p.block_log, p.replace_least_used));
    for (int t = 0; t < (own_models ? tile_count : 1); ++t) models.push_back(std::make_unique<Models>());
  }
  Dictionary& dict(int tile) { return *dicts[dicts.size() == 1 ? 0 : static_cast<size_t>(tile)]; }
  Models& model(int tile) { return *models[models.size() == 1 ? 0 : static_cast<size_t>(tile)]; }
  Params params;
  int tiles = 0;
  std::vector<std::unique_ptr<Dictionary>> dicts;
  std::vector<std::unique_ptr<Models>> models;
};
PlaneState::PlaneState(const Params& p) : impl_(std::make_unique<Impl>(p)) {}
PlaneState::~PlaneState() = default;

const char* mode_name(int mode) {
  static const char* names[kModes] = {"none", "DC", "V", "H", "plane", "DDL", "DDR", "VR", "HD", "VL", "HU"};
  return mode >= 0 && mode < kModes ? names[mode] : "?";
}

void predict_block(const uint8_t* rec, const uint8_t* done, int W, int H, int x, int y, int N, int mode, int* pred) {
  (void)H;
  PredictionRefs r;
  prediction_refs([&](int xx, int yy) { return static_cast<int>(rec[static_cast<size_t>(yy) * W + xx]); },
                  [&](int xx, int yy) { return done[static_cast<size_t>(yy) * W + xx] != 0; }, W, x, y, N, &r);
  for (int yy = 0; yy < N; ++yy)
    for (int xx = 0; xx < N; ++xx) pred[yy * N + xx] = predict_sample(r, mode, xx, yy);
}

namespace {

// Costs in bits of every index of every scale under the current models, and
// each scale's cheapest index (the rate part of the search's lower bound).
struct IndexCosts {
  std::array<std::vector<double>, kScales> bits;
  std::array<double, kScales> min_bits{};
  uint64_t id = 0;  // new with every computation (a LeafSearch backend caches by it)
};

void index_costs(const Models& m, const Dictionary& d, int log, IndexCosts& out) {
  static std::atomic<uint64_t> ids{0};
  out.id = ++ids;
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
    const size_t n = static_cast<size_t>(d.count(s));
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
  const auto& bits = ic.bits[static_cast<size_t>(s)];
  double best = std::numeric_limits<double>::infinity();
  int bi = -1;
  auto try_elem = [&](int i) {
    const double rate = lambda * (bits[static_cast<size_t>(i)] + leaf_bits);
    if (rate > best) return;
    const int16_t* e = d.elem(s, i);
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
    for (int i = 0; i < d.count(s); ++i) try_elem(i);
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

double leaf_flag_bits(const Models& m, int lw, int lh) {
  return lw + lh > 0 ? bit_cost(m.split[static_cast<size_t>(scale_of(lw, lh))], 0) : 0;
}

// The leaf table of one residue on the CPU: best_leaf for every segment of every scale.
void cpu_leaves(const int* r, int L, const Dictionary& d, const Models& m, const IndexCosts& ic, double lambda,
                bool exhaustive, double* J, int* I) {
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
  for (int lh = 0; lh <= L; ++lh)
    for (int lw = 0; lw <= L; ++lw) {
      const int s = scale_of(lw, lh), w = 1 << lw, h = 1 << lh, nx = N >> lw, ny = N >> lh;
      const int off = leaf_scale_offset(L, lw, lh);
      const double leaf_bits = leaf_flag_bits(m, lw, lh);
      for (int iy = 0; iy < ny; ++iy)
        for (int ix = 0; ix < nx; ++ix) {
          const int at = ix + iy * nx, x0 = ix * w, y0 = iy * h;
          const int64_t rsum = sat[(y0 + h) * (N + 1) + x0 + w] - sat[y0 * (N + 1) + x0 + w] -
                               sat[(y0 + h) * (N + 1) + x0] + sat[y0 * (N + 1) + x0];
          best_leaf(r + y0 * N + x0, N, w, h, rsum, d, s, ic, lambda, leaf_bits, exhaustive, &J[off + at],
                    &I[off + at]);
        }
    }
}

// The best segmentation of a unit from its leaf table: bottom-up over the scales, each
// segment a leaf or split in two (left | right, top / bottom), whichever J is least.
void optimise(const double* leaf_j, const int* leaf_i, int L, const Models& m, double lambda, Plan& plan) {
  const int N = 1 << L;
  for (int sum = 0; sum <= 2 * L; ++sum)
    for (int lw = std::max(0, sum - L); lw <= std::min(L, sum); ++lw) {
      const int lh = sum - lw, s = scale_of(lw, lh), nx = N >> lw, ny = N >> lh;
      const bool flag = lw + lh > 0, both = lw > 0 && lh > 0;
      const double split_bits = flag ? bit_cost(m.split[static_cast<size_t>(s)], 1) : 0;
      const int off = leaf_scale_offset(L, lw, lh);
      for (int iy = 0; iy < ny; ++iy)
        for (int ix = 0; ix < nx; ++ix) {
          const int at = ix + iy * nx;
          double best = leaf_j[off + at];
          const int best_i = leaf_i[off + at];
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
// elements. Without a dictionary (null) only the tree is walked.
struct Internal {
  int x0, y0, lw, lh;
};

template <typename Decide>
void walk(int N, int x0, int y0, int lw, int lh, Decide&& decide, const Dictionary* d, int* rres,
          std::vector<Internal>& inner, int64_t& leaves) {
  int kind = 0, index = 0;
  decide(x0, y0, lw, lh, &kind, &index);
  if (kind == 0) {
    if (d) {  // null: a dictionary that learns on the device needs no residue here
      const int16_t* e = d->elem(scale_of(lw, lh), index);
      const int w = 1 << lw, h = 1 << lh;
      for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x) rres[(y0 + y) * N + x0 + x] = e[y * w + x];
    }
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

// A coded unit's residue, internal nodes and leaves (scale << 16 | index, in coding order),
// kept until the block's dictionary update.
struct Learned {
  int N = 0;
  std::vector<int> rres;
  std::vector<Internal> inner;
  std::vector<uint32_t> leaves;
};
// A block's units, their storage kept from block to block (every block of a plane would
// otherwise allocate and free a few vectors a unit).
class LearnedUnits {
 public:
  // A unit of 2^L x 2^L: its residue zeroed, no nodes or leaves yet. The next add() may
  // move it.
  Learned& add(int L) {
    if (n_ == items_.size()) items_.emplace_back();
    Learned& l = items_[n_++];
    l.N = 1 << L;
    l.rres.assign(static_cast<size_t>(1) << (2 * L), 0);
    l.inner.clear();
    l.leaves.clear();
    return l;
  }
  void clear() { n_ = 0; }
  const Learned* begin() const { return items_.data(); }
  const Learned* end() const { return items_.data() + n_; }

 private:
  std::vector<Learned> items_;
  size_t n_ = 0;
};

// Appends what a block's coded units teach: their leaves, and their new elements in the
// order the dictionaries take them (units in coding order, each unit's internal nodes in
// post-order).
void collect(const LearnedUnits& units, Lesson& lesson) {
  for (const Learned& u : units) {
    lesson.uses.insert(lesson.uses.end(), u.leaves.begin(), u.leaves.end());
    for (const Internal& n : u.inner) {
      const int w = 1 << n.lw, h = 1 << n.lh;
      int16_t* e = lesson.add(n.lw, n.lh);
      for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x)
          e[y * w + x] = static_cast<int16_t>(u.rres[static_cast<size_t>((n.y0 + y) * u.N + n.x0 + x)]);
    }
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
    if (L > kMinLog && (1 << (L - 1)) >= p_.min_unit) {
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
    // The candidates' residues, their leaf tables (one search for all of them), then each
    // candidate's segmentation.
    const int NN = N * N, table = leaf_table_size(L);
    thread_local std::vector<int> residues, leaf_i;
    thread_local std::vector<double> leaf_j;
    residues.resize(static_cast<size_t>(candidates * NN));
    leaf_j.resize(static_cast<size_t>(candidates * table));
    leaf_i.resize(leaf_j.size());
    for (int c = 0; c < candidates; ++c) {
      const int* pred = preds[static_cast<size_t>(rank[static_cast<size_t>(c)].second)].data();
      int* r = residues.data() + c * NN;
      for (int i = 0; i < NN; ++i) r[i] = src_[static_cast<size_t>(y + i / N) * W_ + x + i % N] - pred[i];
    }
    if (p_.search) {
      LeafQuery q;
      q.L = L;
      q.K = candidates;
      q.residues = residues.data();
      q.dict_id = d_.id();
      q.costs_id = ic_.id;
      q.lambda = p_.lambda;
      for (int lh = 0; lh <= L; ++lh)
        for (int lw = 0; lw <= L; ++lw) {
          const int s = scale_of(lw, lh);
          q.scales[static_cast<size_t>(s)] = d_.view(s);
          q.bits[static_cast<size_t>(s)] = ic_.bits[static_cast<size_t>(s)].data();
          q.leaf_bits[static_cast<size_t>(s)] = leaf_flag_bits(m_, lw, lh);
        }
      p_.search->search(q, leaf_j.data(), leaf_i.data());
    } else {
      for (int c = 0; c < candidates; ++c)
        cpu_leaves(residues.data() + c * NN, L, d_, m_, ic_, p_.lambda, p_.exhaustive, leaf_j.data() + c * table,
                   leaf_i.data() + c * table);
    }
    for (int c = 0; c < candidates; ++c) {
      const int mode = rank[static_cast<size_t>(c)].second;
      const int* pred = preds[static_cast<size_t>(mode)].data();
      optimise(leaf_j.data() + c * table, leaf_i.data() + c * table, L, m_, p_.lambda, *plan_);
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
        walk(N, 0, 0, L, L, from_plan, &d_, rres, inner, leaves);
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
  Plan* plan_ = thread_plan();

  static Plan* thread_plan() {  // default-initialised: optimise() writes before it reads
    thread_local std::unique_ptr<Plan> plan(new Plan);
    return plan.get();
  }
};

// The symbols of a block go through a SymbolWriter (SymbolReader). With models of their
// own (untiled planes, independent tiles, SyncDictionaries) the models adapt as they code.
// SyncAll tiles share the plane's models, which stay as they were at the round's start
// while the round's tiles run: each tile adapts private copies of the probabilities it
// touches (an overlay, fresh for each block) and logs its bits, and after the round the
// shared models adapt to every tile's bits in tile order.
using BitLog = std::vector<std::pair<Prob*, uint8_t>>;

// The copies live in an open-addressed table keyed by the shared model's address that
// keeps its storage from block to block: a block touches a few hundred models, and a node
// allocated and freed for each (freed by the thread that replays the round, not the one
// that coded the block) cost more than the coding itself with many planes at once.
class Overlay {
 public:
  BitLog log;
  Prob& at(Prob& shared) {
    if (2 * (used_.size() + 1) > slots_.size()) grow();
    const size_t mask = slots_.size() - 1;
    for (size_t i = slot_of(&shared, mask);; i = (i + 1) & mask) {
      Slot& e = slots_[i];
      if (e.key == &shared) return e.copy;
      if (!e.key) {
        e.key = &shared, e.copy = shared;
        used_.push_back(static_cast<uint32_t>(i));
        return e.copy;
      }
    }
  }
  void clear() {
    for (uint32_t i : used_) slots_[i].key = nullptr;
    used_.clear();
  }

 private:
  struct Slot {
    const Prob* key = nullptr;
    Prob copy;
  };
  static size_t slot_of(const Prob* p, size_t mask) {
    return static_cast<size_t>((reinterpret_cast<uintptr_t>(p) >> 1) * 0x9E3779B97F4A7C15ull >> 40) & mask;
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(std::max<size_t>(1024, 2 * old.size()), Slot{});
    used_.clear();
    const size_t mask = slots_.size() - 1;
    for (const Slot& e : old)
      if (e.key)
        for (size_t i = slot_of(e.key, mask);; i = (i + 1) & mask)
          if (!slots_[i].key) {
            slots_[i] = e;
            used_.push_back(static_cast<uint32_t>(i));
            break;
          }
  }
  std::vector<Slot> slots_;  // a power of two, at most half full
  std::vector<uint32_t> used_;
};

struct SymbolWriter {
  RangeEncoder& enc;
  Overlay* ov;  // non-null: shared models
  void bit(Prob& p, int b) {
    if (!ov) return enc.encode(p, b);
    enc.encode(ov->at(p), b);
    ov->log.emplace_back(&p, static_cast<uint8_t>(b));
  }
  void tree(Prob* t, int nbits, uint32_t value) {  // MSB first down the tree
    uint32_t node = 1;
    for (int i = nbits - 1; i >= 0; --i) {
      const int b = static_cast<int>((value >> i) & 1u);
      bit(t[node], b);
      node = (node << 1) | static_cast<uint32_t>(b);
    }
  }
};

struct SymbolReader {
  RangeDecoder& dec;
  Overlay* ov;
  int bit(Prob& p) {
    if (!ov) return dec.decode(p);
    const int b = dec.decode(ov->at(p));
    ov->log.emplace_back(&p, static_cast<uint8_t>(b));
    return b;
  }
  uint32_t tree(Prob* t, int nbits) {
    uint32_t node = 1;
    for (int i = 0; i < nbits; ++i) node = (node << 1) | static_cast<uint32_t>(bit(t[node]));
    return node - (1u << nbits);
  }
};

// The shared models' adaptation to a tile's block: its bits, in coding order.
void replay(Overlay& ov) {
  for (auto& [p, b] : ov.log) p->update(b);
  ov.log.clear();
  ov.clear();
}

// Codes an area's prediction tree and units; collects what the block's update learns
// (nothing with `d` null: the dictionary learns on the device).
void emit_area(const Area& a, int L, SymbolWriter& out, Models& m, PlaneResult& res, LearnedUnits& learned,
               const Dictionary* d) {
  if (L > kMinLog) out.bit(m.psplit[static_cast<size_t>(L - kMinLog - 1)], a.split ? 1 : 0);
  if (a.split && L > kMinLog) {
    for (const Area& k : a.kids) emit_area(k, L - 1, out, m, res, learned, d);
    return;
  }
  const Unit& u = a.unit;
  out.tree(m.mode[static_cast<size_t>(L - kMinLog)].data(), kModeBits, static_cast<uint32_t>(u.mode));
  ++res.modes[u.mode];
  ++res.unit_sizes[kMaxLog - L];
  size_t next = 0;
  Learned& l = learned.add(L);
  auto decide = [&](int, int, int lw, int lh, int* kind, int* index) {
    const int s = scale_of(lw, lh);
    *kind = u.tree[next].first;
    *index = u.tree[next].second;
    ++next;
    if (lw + lh > 0) {
      out.bit(m.split[static_cast<size_t>(s)], *kind != 0);
      if (*kind != 0 && lw > 0 && lh > 0) out.bit(m.dir[static_cast<size_t>(s)], *kind == 2);
    }
    if (*kind == 0) {
      out.tree(m.index[static_cast<size_t>(s)].data(), kIndexBits, static_cast<uint32_t>(*index));
      if (!out.ov) m.touch(s);  // shared models change only when the round is replayed
      l.leaves.push_back(static_cast<uint32_t>(s) << 16 | static_cast<uint32_t>(*index));
    } else
      ++res.splits[*kind - 1];
  };
  walk(l.N, 0, 0, L, L, decide, d, l.rres.data(), l.inner, res.leaves);
}

[[noreturn]] void corrupt(int bx, int by) {
  throw Error(ErrorKind::Input,
              "MMP: corrupt or truncated data (block at " + std::to_string(bx) + "," + std::to_string(by) + ")");
}

// What coding a block leaves for its dictionary update and, where the models stay as they
// were during a round, for their adaptation at the round's end; kept from block to block
// for its storage.
struct BlockWork {
  LearnedUnits learned;  // the block's units
  Area area;             // its choices, as a backend's search returned them
  Overlay overlay;       // models frozen in the round: the block's private probabilities and bits
};

// One tile of a plane (an untiled plane is one tile of the whole padded plane), in its own
// coordinates: prediction sees only the tile's decoded samples, as at a plane's edges.
struct Tile {
  int x0 = 0, y0 = 0, w = 0, h = 0;  // in the padded plane; whole blocks
  int blocks_x = 0, blocks = 0;
  std::vector<uint8_t> src, rec, done;  // w x h
  Dictionary* dict = nullptr;
  Models* models = nullptr;
  std::unique_ptr<RangeEncoder> enc;
  std::unique_ptr<RangeDecoder> dec;
  BlockWork work;                                // a tile coded alone: its last block's
  PlaneResult stats;                             // counters only
  std::atomic<int64_t>* blocks_coded = nullptr;  // Params::blocks_coded
};

// The tile grid of a W x H padded plane: tiles in raster order, each W x H clipped to the
// plane; one tile when untiled.
// Tiles with state of their own (models, and for Independent dictionaries: about 0.3 MB
// each) are limited so that no tiling asks for gigabytes; SyncAll tiles hold only buffers.
int max_tiles(TileMode m) { return m == TileMode::SyncAll ? 16384 : 1024; }

std::vector<Tile> make_tiles(int W, int H, const Params& p, ErrorKind kind) {
  const int B = 1 << p.block_log;
  const int tw = p.tiled() ? p.tile_w : W, th = p.tiled() ? p.tile_h : H;
  check_tile_count(W, H, p, kind);
  std::vector<Tile> tiles;
  for (int y = 0; y < H; y += th)
    for (int x = 0; x < W; x += tw) {
      Tile t;
      t.x0 = x, t.y0 = y, t.w = std::min(tw, W - x), t.h = std::min(th, H - y);
      t.blocks_x = t.w / B;
      t.blocks = t.blocks_x * (t.h / B);
      t.rec.assign(static_cast<size_t>(t.w) * t.h, 0);
      t.done.assign(t.rec.size(), 0);
      tiles.push_back(std::move(t));
    }
  return tiles;
}

// Runs body(tile index) for every tile in `ids` on the process-wide pool.
template <typename Body>
void for_tiles(const std::vector<int>& ids, Body&& body) {
  if (ids.size() == 1 || cpu_threads() == 1) {
    for (int i : ids) body(i);
    return;
  }
  tbb::parallel_for(size_t{0}, ids.size(), [&](size_t k) { body(ids[k]); });
}

// A block of a round of synchronized tiles: its tile and its index in the tile (raster
// order of the tile's blocks).
struct RoundItem {
  int tile, k;
};
using Rounds = std::vector<std::vector<RoundItem>>;

// The rounds of synchronized tiles (TileScan), each in tile then block order: the order in
// which a round's blocks write their tiles' streams and its learning is merged.
Rounds round_schedule(const std::vector<Tile>& tiles, TileScan scan) {
  Rounds rounds;
  for (size_t i = 0; i < tiles.size(); ++i)
    for (int k = 0; k < tiles[i].blocks; ++k) {
      const int bx = k % tiles[i].blocks_x, by = k / tiles[i].blocks_x;
      const size_t r = static_cast<size_t>(scan == TileScan::Wavefront ? bx + 2 * by : k);
      if (r >= rounds.size()) rounds.resize(r + 1);
      rounds[r].push_back({static_cast<int>(i), k});
    }
  return rounds;
}
size_t most_blocks_a_round(const Rounds& rounds) {
  size_t most = 0;
  for (const auto& r : rounds) most = std::max(most, r.size());
  return most;
}

// Whether a round's blocks code with the models as the round found them (an overlay a
// block, replayed at the round's end): shared models (SyncAll), or a wavefront, whose
// rounds take several blocks of a tile at once.
bool models_frozen_in_rounds(const Params& p) {
  return p.tile_mode == TileMode::SyncAll || p.tile_scan == TileScan::Wavefront;
}

// Runs body(j) for the items [begin, end) of a round: a tile's blocks one after another
// in order (they write one stream), the tiles in parallel on the process-wide pool.
template <typename Body>
void for_round_items(const std::vector<RoundItem>& items, size_t begin, size_t end, Body&& body) {
  std::vector<int> starts;
  for (size_t j = begin; j < end; ++j)
    if (j == begin || items[j].tile != items[j - 1].tile) starts.push_back(static_cast<int>(j));
  for_tiles(starts, [&](int j0) {
    for (size_t j = static_cast<size_t>(j0); j < end && items[j].tile == items[static_cast<size_t>(j0)].tile; ++j)
      body(static_cast<int>(j));
  });
}

// The end of a round of synchronized tiles: the round's new elements enter the shared
// dictionaries in the round's order (unless the device learnt them), and where the models
// stayed frozen, the blocks' private model changes are replayed in the same order. `work`
// holds the round's blocks' (item j's at j); `batch` is scratch.
void end_round(std::vector<Tile>& tiles, const std::vector<RoundItem>& items, std::vector<BlockWork>& work,
               const Params& p, Lesson& batch) {
  const int64_t t0 = now_ns();
  Dictionary& dict = *tiles[0].dict;
  batch.clear();
  if (!dict.held_on_device()) {
    for (size_t j = 0; j < items.size(); ++j) collect(work[j].learned, batch);
    dict.add(batch);
  } else {  // the device holds the samples: it judged the round's elements, the host places them
    int n = 0;
    for (size_t j = 0; j < items.size(); ++j)
      for (const Learned& u : work[j].learned) {
        batch.uses.insert(batch.uses.end(), u.leaves.begin(), u.leaves.end());
        n += static_cast<int>(u.inner.size());
      }
    int n_device = 0;
    const RoundVerdicts verdicts = p.search->round_verdicts(dict.device_handle(), &n_device);
    if (n_device != n)
      throw Error(ErrorKind::Gpu,
                  log::format("MMP: the device listed %d new elements in a round, the encoder %d", n_device, n));
    thread_local std::vector<Placement> placements;
    dict.add_decided(batch.uses, n, verdicts, &placements);
    p.search->place_round(dict.device_handle(), placements);
  }
  if (models_frozen_in_rounds(p)) {
    for (size_t j = 0; j < items.size(); ++j) replay(work[j].overlay);
    if (p.tile_mode == TileMode::SyncAll)
      tiles[0].models->touch_all();  // the tiles share one model set
    else
      for (size_t j = 0; j < items.size(); ++j)
        if (j == 0 || items[j].tile != items[j - 1].tile) tiles[static_cast<size_t>(items[j].tile)].models->touch_all();
  }
  tiles[0].stats.learning_s += 1e-9 * static_cast<double>(now_ns() - t0);
}

// The corner (samples) of block k of a tile.
std::pair<int, int> block_corner(const Tile& t, int k, int B) { return {(k % t.blocks_x) * B, (k / t.blocks_x) * B}; }

// Seconds between two now_ns() readings.
double seconds_between(int64_t from, int64_t to) { return 1e-9 * static_cast<double>(to - from); }

// Codes the tiles' blocks: each tile start to finish where it owns what it learns (untiled,
// Independent), else in rounds (round_schedule()), the round's tiles in parallel and its
// learning merged in the round's order. `code(tile, k, work, frozen)` codes block k of a
// tile and leaves its units in work.learned (frozen: the models change only through
// work.overlay). `round_start(r)` runs before round r.
template <typename Code, typename RoundStart>
void code_tiles(std::vector<Tile>& tiles, const Params& p, Code&& code, RoundStart&& round_start) {
  if (!p.tiled() || p.tile_mode == TileMode::Independent) {
    std::vector<int> all(tiles.size());
    for (size_t i = 0; i < tiles.size(); ++i) all[i] = static_cast<int>(i);
    for_tiles(all, [&](int i) {
      Tile& t = tiles[static_cast<size_t>(i)];
      Lesson batch;
      for (int k = 0; k < t.blocks; ++k) {
        code(t, k, t.work, false);
        const int64_t t0 = now_ns();
        batch.clear();
        collect(t.work.learned, batch);
        t.dict->add(batch);
        t.stats.learning_s += 1e-9 * static_cast<double>(now_ns() - t0);
      }
    });
    return;
  }
  const bool frozen = models_frozen_in_rounds(p);
  const Rounds rounds = round_schedule(tiles, p.tile_scan);
  std::vector<BlockWork> work(most_blocks_a_round(rounds));
  Lesson batch;
  for (size_t r = 0; r < rounds.size(); ++r) {
    const std::vector<RoundItem>& items = rounds[r];
    round_start(static_cast<int>(r));
    for_round_items(items, 0, items.size(), [&](int j) {
      const RoundItem& it = items[static_cast<size_t>(j)];
      code(tiles[static_cast<size_t>(it.tile)], it.k, work[static_cast<size_t>(j)], frozen);
    });
    end_round(tiles, items, work, p, batch);
  }
}

// The search of a block on a backend that searches whole blocks (search.hpp): the query
// carries the costs as the CPU computes them.
BlockQuery block_query(const Tile& t, int bx, int by, const Params& p) {
  static_assert(sizeof(Prob) == sizeof(uint16_t), "index models are passed as arrays of uint16_t");
  const int BL = p.block_log;
  const Dictionary& d = *t.dict;
  const Models& m = *t.models;
  BlockQuery q;
  q.block_log = BL;
  q.candidates = std::clamp(p.mode_candidates, 1, kModes);
  q.min_unit_log = kMinLog;
  while (q.min_unit_log < BL && (2 << q.min_unit_log) <= p.min_unit) ++q.min_unit_log;
  q.lambda = p.lambda;
  q.bx = bx, q.by = by, q.W = t.w, q.H = t.h;
  q.src = t.src.data(), q.rec = t.rec.data(), q.done = t.done.data();
  q.dict_id = d.id();
  q.device_ns = p.device_ns;
  for (int lh = 0; lh <= BL; ++lh)
    for (int lw = 0; lw <= BL; ++lw) {
      const size_t s = static_cast<size_t>(scale_of(lw, lh));
      q.scales[s] = d.view(static_cast<int>(s));
      q.index_probs[s] = reinterpret_cast<const uint16_t*>(m.index[s].data());
      q.index_stamp[s] = m.index_stamp[s];
      q.leaf_bits[s] = leaf_flag_bits(m, lw, lh);
      q.split_bits[s] = lw + lh > 0 ? bit_cost(m.split[s], 1) : 0;
      q.dir_bits[s] = {bit_cost(m.dir[s], 0), bit_cost(m.dir[s], 1)};
    }
  for (int L = kMinLog; L <= BL; ++L)
    for (int mode = 0; mode < kModes; ++mode)
      q.mode_bits[L - kMinLog][mode] =
          tree_cost(m.mode[static_cast<size_t>(L - kMinLog)].data(), kModeBits, static_cast<uint32_t>(mode));
  for (int L = kMinLog + 1; L <= BL; ++L)
    for (int b = 0; b < 2; ++b)
      q.psplit_bits[L - kMinLog - 1][b] = bit_cost(m.psplit[static_cast<size_t>(L - kMinLog - 1)], b);
  q.max_elements = p.max_dict;
  return q;
}

// The backend's choices for the block at (bx, by) as an Area, and its reconstruction into
// the tile, as BlockSearch::area() leaves it.
void take_choices(const LeafSearch& backend, const BlockChoices& c, Tile& t, int bx, int by, int BL, Area& area) {
  const int B = 1 << BL;
  size_t at = 0;
  const auto next = [&]() {
    if (at >= c.code.size())
      throw Error(ErrorKind::Gpu, "MMP: the " + backend.name() + " search's choices are truncated");
    return c.code[at++];
  };
  const auto parse = [&](auto&& self, int x, int y, int L, Area& a) -> void {
    const int N = 1 << L;
    a.split = L > kMinLog && next() != 0;
    if (a.split) {
      a.kids.resize(4);
      for (int qd = 0; qd < 4; ++qd)
        self(self, x + (qd & 1) * N / 2, y + (qd >> 1) * N / 2, L - 1, a.kids[static_cast<size_t>(qd)]);
      return;
    }
    Unit& u = a.unit;
    u.x = x, u.y = y, u.L = L, u.mode = next();
    u.tree.clear();  // `area` may be a tile's, reused from its last block
    const int nodes = next();
    if (u.mode < 0 || u.mode >= kModes || nodes < 1 || nodes > 2 * N * N)
      throw Error(ErrorKind::Gpu, "MMP: the " + backend.name() + " search returned a malformed unit");
    for (int i = 0; i < nodes; ++i) {
      const int32_t v = next();
      u.tree.emplace_back(static_cast<uint8_t>(v >> 16), v & 0xFFFF);
    }
  };
  parse(parse, bx, by, BL, area);
  if (c.recon.size() != static_cast<size_t>(B * B))
    throw Error(ErrorKind::Gpu, "MMP: the " + backend.name() + " search returned no reconstruction");
  for (int y = 0; y < B; ++y)
    for (int x = 0; x < B; ++x) {
      const size_t o = static_cast<size_t>(by + y) * t.w + bx + x;
      t.rec[o] = c.recon[static_cast<size_t>(y * B + x)];
      t.done[o] = 1;
    }
}

// Range-codes a searched block's choices (frozen: through work.overlay of the models) and
// keeps what its dictionary update learns in work.learned.
void code_block(Tile& t, const Area& area, int BL, BlockWork& work, bool frozen) {
  work.learned.clear();
  SymbolWriter out{*t.enc, frozen ? &work.overlay : nullptr};
  emit_area(area, BL, out, *t.models, t.stats, work.learned, t.dict->held_on_device() ? nullptr : t.dict);
  ++t.stats.blocks;
  if (t.blocks_coded) t.blocks_coded->fetch_add(1, std::memory_order_relaxed);
}

void search_block_on(LeafSearch& backend, Tile& t, int bx, int by, const Params& p, Area& area) {
  BlockChoices c;
  backend.search_block(block_query(t, bx, by, p), &c);
  take_choices(backend, c, t, bx, by, p.block_log, area);
}

// A tile whose dictionary only it changes (untiled, or an independent tile), on a backend
// that learns blocks itself: the backend's copy of the dictionary learns each block's new
// elements at the end of its search, so block k + 1 is searched while this thread adds
// block k's to its own (the backend checks that the two agree). The bytes are those of
// code_tiles(); only the order of the work differs.
void encode_tile_learning_on_backend(Tile& t, const Params& p) {
  LeafSearch& backend = *p.search;
  const int BL = p.block_log, B = 1 << BL;
  const auto query = [&](int k, bool pending) {
    const auto [bx, by] = block_corner(t, k, B);
    BlockQuery q = block_query(t, bx, by, p);
    q.learn = true, q.pending = pending;
    return q;
  };
  if (t.blocks == 0) return;
  bool in_flight = false;
  try {
    int64_t t0 = now_ns();
    backend.start_block(query(0, false));
    in_flight = true;
    Lesson batch;
    for (int k = 0; k < t.blocks; ++k) {
      BlockChoices c;
      in_flight = false;
      backend.finish_block(&c, -1);
      Area area;
      const auto [bx, by] = block_corner(t, k, B);
      take_choices(backend, c, t, bx, by, BL, area);
      const int64_t t1 = now_ns();
      code_block(t, area, BL, t.work, false);
      const int64_t t2 = now_ns();
      if (k + 1 < t.blocks) {
        backend.start_block(query(k + 1, true));
        in_flight = true;
      }
      const int64_t t3 = now_ns();
      batch.clear();
      collect(t.work.learned, batch);
      // Isolated: while it waits for its parallel scales, this thread must not take up another
      // tile or plane (a task of the same pool), whose search would need the backend's lane
      // that this block holds.
      tbb::this_task_arena::isolate([&] { t.dict->add(batch); });
      const int64_t t4 = now_ns();
      t.stats.search_s += seconds_between(t0, t1) + seconds_between(t2, t3);
      t.stats.coding_s += seconds_between(t1, t2);
      t.stats.learning_s += seconds_between(t3, t4);
      t0 = t4;
    }
  } catch (...) {
    if (in_flight) {  // the backend's lane must not stay busy
      BlockChoices ignored;
      try {
        backend.finish_block(&ignored, -1);
      } catch (...) {  // the first error is the one to report
      }
    }
    throw;
  }
}

// Blocks in flight at once: 64, or VFP_MMP_IN_FLIGHT (1..1024; for measurements).
int blocks_in_flight() {
  if (const char* e = std::getenv("VFP_MMP_IN_FLIGHT")) return std::clamp(std::atoi(e), 1, 1024);
  return 64;
}

// Synchronized tiles on a backend that searches whole blocks and lends lanes: a round's
// blocks are all started (blocks_in_flight() at a time, from the pool's threads), then
// finished and coded, so that the device searches many tiles' blocks at once rather than
// one per thread. The bytes are code_tiles()'s: every block of a round is searched with
// the dictionaries and models as the round found them, each tile codes into its own stream
// and models, and the round's learning is merged in the round's order.
// False (nothing done) when the backend has no lanes to lend.
bool code_rounds_in_flight(std::vector<Tile>& tiles, const Params& p) {
  LeafSearch& backend = *p.search;
  const int BL = p.block_log, B = 1 << BL;
  const Rounds rounds = round_schedule(tiles, p.tile_scan);
  const size_t most = most_blocks_a_round(rounds);
  const int width =
      static_cast<int>(std::min<size_t>(std::max<size_t>(most, 1), static_cast<size_t>(blocks_in_flight())));
  const int first = backend.reserve_lanes(width);
  if (first < 0) return false;
  struct Lease {
    LeafSearch& backend;
    int first, n;
    ~Lease() { backend.release_lanes(first, n); }
  } lease{backend, first, width};
  const bool frozen = models_frozen_in_rounds(p);
  std::vector<BlockWork> work(most);
  Lesson batch;
  std::vector<std::atomic<bool>> in_flight(static_cast<size_t>(width));
  for (const std::vector<RoundItem>& items : rounds) {
    // Waves of equal size (135 blocks: 45, 45, 45, not 64, 64, 7): a wave lasts about as
    // long as its slowest block, however few blocks it has.
    if (items.empty()) continue;
    const size_t waves = (items.size() + static_cast<size_t>(width) - 1) / static_cast<size_t>(width);
    const size_t step = (items.size() + waves - 1) / waves;
    for (size_t w0 = 0; w0 < items.size(); w0 += step) {
      const size_t w1 = std::min(items.size(), w0 + step);
      const auto lane_of = [&](int j) { return static_cast<size_t>(j) - w0; };
      try {
        std::vector<int> wave(w1 - w0);  // the wave's items
        for (size_t j = w0; j < w1; ++j) wave[j - w0] = static_cast<int>(j);
        for_tiles(wave, [&](int j) {
          const RoundItem& it = items[static_cast<size_t>(j)];
          Tile& t = tiles[static_cast<size_t>(it.tile)];
          const int64_t t0 = now_ns();
          const auto [bx, by] = block_corner(t, it.k, B);
          BlockQuery q = block_query(t, bx, by, p);
          q.lane = first + static_cast<int>(lane_of(j));
          backend.start_block(q);
          in_flight[lane_of(j)] = true;
          t.stats.search_s += seconds_between(t0, now_ns());
        });
        for_round_items(items, w0, w1, [&](int j) {
          const RoundItem& it = items[static_cast<size_t>(j)];
          Tile& t = tiles[static_cast<size_t>(it.tile)];
          BlockWork& bw = work[static_cast<size_t>(j)];
          const int64_t t0 = now_ns();
          BlockChoices c;
          in_flight[lane_of(j)] = false;
          backend.finish_block(&c, first + static_cast<int>(lane_of(j)));
          const auto [bx, by] = block_corner(t, it.k, B);
          take_choices(backend, c, t, bx, by, BL, bw.area);
          const int64_t t1 = now_ns();
          code_block(t, bw.area, BL, bw, frozen);
          t.stats.search_s += seconds_between(t0, t1);
          t.stats.coding_s += seconds_between(t1, now_ns());
        });
      } catch (...) {
        for (size_t j = 0; j < w1 - w0; ++j)
          if (in_flight[j].exchange(false)) {  // the backend's lanes must not stay busy
            BlockChoices ignored;
            try {
              backend.finish_block(&ignored, first + static_cast<int>(j));
            } catch (...) {  // the first error is the one to report
            }
          }
        throw;
      }
    }
    end_round(tiles, items, work, p, batch);
  }
  return true;
}

// VFP_MMP_TRACE=file (for measurements): a line a round of code_rounds_batched(), the host
// timeline of every plane: plane, round, blocks, then the round's start, search done,
// coding done and dictionary update done (steady-clock ns). Summarized by
// scripts/mmp-round-trace.py.
struct RoundTrace {
  std::mutex mu;
  FILE* f = nullptr;
  RoundTrace() {
    if (const char* e = std::getenv("VFP_MMP_TRACE")) f = std::fopen(e, "w");
  }
  ~RoundTrace() {
    if (f) std::fclose(f);
  }
};
RoundTrace& round_trace() {
  static RoundTrace t;
  return t;
}

// Whether rounds may start learning on a backend's device: VFP_MMP_DEVICE_LEARN=1 (off by
// default: on the H200 the stage ran 5-16% slower with it at 3 to 8 frames in flight, for
// 10-15% less CPU time; docs/perf.md, session 36). A dictionary the device holds already
// goes on learning there.
bool device_learning_allowed() {
  const char* e = std::getenv("VFP_MMP_DEVICE_LEARN");
  return e && std::string(e) == "1";
}

// Whether a search backend with a device also designs the post-filter there (the same
// filter and output); VFP_MMP_POST_FILTER_GPU=0 keeps it on the CPU, for measurements.
bool post_filter_on_device() {
  static const bool on = [] {
    const char* e = std::getenv("VFP_MMP_POST_FILTER_GPU");
    return !(e && std::string(e) == "0");
  }();
  return on;
}

// Synchronized tiles that share the models too (SyncAll) on a backend that searches rounds:
// each round's blocks in one search (each kernel launched once for all of them), then
// coded in parallel, each into its tile's stream through its overlay, then the round's
// learning merged in tile order. The bytes are code_tiles()'s. False (nothing done) where
// the backend has no round search, or VFP_MMP_ROUNDS=0 (for measurements).
bool code_rounds_batched(std::vector<Tile>& tiles, const Params& p) {
  LeafSearch& backend = *p.search;
  const int cap = backend.round_capacity();
  const bool rounds_off = [] {
    const char* e = std::getenv("VFP_MMP_ROUNDS");
    return e && std::string(e) == "0";
  }();
  if (cap <= 0 || p.tile_mode != TileMode::SyncAll || rounds_off) {
    if (tiles[0].dict->held_on_device())  // only these rounds go on with it
      throw Error(ErrorKind::Usage, "MMP: this plane's dictionaries learnt on the " + backend.name() +
                                        " search in rounds of synchronized tiles, and cannot continue otherwise");
    return false;
  }
  // The rounds learn on the device where the backend can (LeafSearch::learns_rounds()) and
  // it is asked for (device_learning_allowed()): a replacing dictionary, every round one
  // search, and a dictionary the backend holds already or that has learnt nothing yet. The
  // host's copy then stays as it was, and the backend keeps the real one.
  const Rounds rounds = round_schedule(tiles, p.tile_scan);
  const size_t most = most_blocks_a_round(rounds);
  Dictionary& dict = *tiles[0].dict;
  const bool fits = p.replace_least_used && backend.learns_rounds() && most <= static_cast<size_t>(cap);
  if (dict.held_on_device() && !fits)
    throw Error(ErrorKind::Usage,
                "MMP: this plane's dictionaries learnt on the " + backend.name() +
                    " search, which cannot continue them here (more blocks a round than a search takes)");
  if (fits && !dict.held_on_device() && dict.fresh() && device_learning_allowed())
    dict.hold_on_device(backend.hold_dictionary(dict.id()));
  const bool device_learns = dict.held_on_device();
  const int BL = p.block_log, B = 1 << BL;
  Lesson batch;
  std::vector<RoundBlock> blocks;
  std::vector<BlockChoices> choices;
  std::vector<BlockWork> work(most);
  for (size_t r = 0; r < rounds.size(); ++r) {
    const std::vector<RoundItem>& items = rounds[r];
    if (items.empty()) continue;
    const int64_t t0 = now_ns();
    Tile& first = tiles[static_cast<size_t>(items[0].tile)];
    const auto [fx, fy] = block_corner(first, items[0].k, B);
    BlockQuery q = block_query(first, fx, fy, p);  // the plane's models
    q.learn = device_learns;
    const int n = static_cast<int>(items.size());
    blocks.resize(static_cast<size_t>(n));
    choices.resize(static_cast<size_t>(n));
    for (int j = 0; j < n; ++j) {
      const RoundItem& it = items[static_cast<size_t>(j)];
      const Tile& t = tiles[static_cast<size_t>(it.tile)];
      RoundBlock& b = blocks[static_cast<size_t>(j)];
      std::tie(b.bx, b.by) = block_corner(t, it.k, B);
      b.W = t.w, b.H = t.h, b.src = t.src.data(), b.rec = t.rec.data(), b.done = t.done.data();
    }
    for (int j0 = 0; j0 < n; j0 += cap)
      backend.search_round(q, blocks.data() + j0, std::min(cap, n - j0), choices.data() + j0);
    const int64_t searched = now_ns();
    first.stats.search_s += seconds_between(t0, searched);
    for_round_items(items, 0, items.size(), [&](int j) {
      Tile& t = tiles[static_cast<size_t>(items[static_cast<size_t>(j)].tile)];
      BlockWork& bw = work[static_cast<size_t>(j)];
      const int64_t t1 = now_ns();
      const RoundBlock& b = blocks[static_cast<size_t>(j)];
      take_choices(backend, choices[static_cast<size_t>(j)], t, b.bx, b.by, BL, bw.area);
      code_block(t, bw.area, BL, bw, true);
      t.stats.coding_s += seconds_between(t1, now_ns());
    });
    const int64_t coded = now_ns();
    end_round(tiles, items, work, p, batch);
    if (RoundTrace& tr = round_trace(); tr.f) {
      std::lock_guard<std::mutex> lk(tr.mu);
      std::fprintf(tr.f, "%p %d %d %lld %lld %lld %lld\n", static_cast<void*>(&tiles), static_cast<int>(r), n,
                   static_cast<long long>(t0), static_cast<long long>(searched), static_cast<long long>(coded),
                   static_cast<long long>(now_ns()));
    }
  }
  return true;
}

// `ic`: the index costs of the block's models (null when the backend searches whole blocks).
void encode_block(Tile& t, int k, BlockWork& work, bool frozen, const IndexCosts* ic, const Params& p) {
  const int BL = p.block_log, B = 1 << BL;
  const auto [bx, by] = block_corner(t, k, B);
  Area& area = work.area;
  const int64_t t0 = now_ns();
  if (!ic) {
    search_block_on(*p.search, t, bx, by, p, area);
  } else {
    BlockSearch search(t.src, t.rec, t.done, t.w, t.h, *t.dict, *t.models, *ic, p);
    search.area(bx, by, BL, area);  // leaves the block's reconstruction in t.rec
  }
  const int64_t t1 = now_ns();
  code_block(t, area, BL, work, frozen);
  t.stats.search_s += 1e-9 * static_cast<double>(t1 - t0);
  t.stats.coding_s += 1e-9 * static_cast<double>(now_ns() - t1);
}

void decode_block(Tile& t, int k, BlockWork& work, bool frozen, int BL) {
  const int B = 1 << BL;
  const auto [bx, by] = block_corner(t, k, B);
  const int px = t.x0 + bx, py = t.y0 + by;  // in the plane, for the error message
  RangeDecoder& dec = *t.dec;
  SymbolReader in{dec, frozen ? &work.overlay : nullptr};
  Models& models = *t.models;
  const Dictionary& dict = *t.dict;
  work.learned.clear();
  // The block's prediction tree, depth first in Z order, as the encoder wrote it.
  auto area = [&](auto&& self, int x, int y, int L) -> void {
    const int N = 1 << L;
    if (L > kMinLog && in.bit(models.psplit[static_cast<size_t>(L - kMinLog - 1)])) {
      for (int q = 0; q < 4; ++q) self(self, x + (q & 1) * N / 2, y + (q >> 1) * N / 2, L - 1);
      return;
    }
    const int mode = static_cast<int>(in.tree(models.mode[static_cast<size_t>(L - kMinLog)].data(), kModeBits));
    if (mode >= kModes || dec.overrun()) corrupt(px, py);
    int pred[kB * kB];
    predict_block(t.rec.data(), t.done.data(), t.w, t.h, x, y, N, mode, pred);
    Learned& l = work.learned.add(L);
    auto decide = [&](int, int, int lw, int lh, int* kind, int* index) {
      const int s = scale_of(lw, lh);
      *kind = 0;
      if (lw + lh > 0 && in.bit(models.split[static_cast<size_t>(s)])) {
        *kind = lw > 0 && lh > 0 ? 1 + in.bit(models.dir[static_cast<size_t>(s)]) : lw > 0 ? 1 : 2;
        return;
      }
      const uint32_t i = in.tree(models.index[static_cast<size_t>(s)].data(), kIndexBits);
      if (i >= static_cast<uint32_t>(dict.count(s)) || dec.overrun()) corrupt(px, py);
      *index = static_cast<int>(i);
      l.leaves.push_back(static_cast<uint32_t>(s) << 16 | i);
    };
    walk(N, 0, 0, L, L, decide, &dict, l.rres.data(), l.inner, t.stats.leaves);
    if (dec.overrun()) corrupt(px, py);
    int v[kB * kB];
    for (int i = 0; i < N * N; ++i) v[i] = std::clamp(pred[i] + l.rres[static_cast<size_t>(i)], 0, 255);
    put_unit(t.rec, t.done, t.w, x, y, N, v);
  };
  area(area, bx, by, BL);
}

// Tile byte counts are LEB128 varints: 7 bits a byte, low first, high bit = more follow.
void put_varint(std::vector<uint8_t>& v, uint32_t x) {
  while (x >= 0x80) v.push_back(static_cast<uint8_t>(x | 0x80)), x >>= 7;
  v.push_back(static_cast<uint8_t>(x));
}
// Reads a varint of at most 4 bytes (28 bits) at data[*at] (< n); false if it does not end.
bool get_varint(const uint8_t* data, size_t n, size_t* at, uint32_t* out) {
  uint32_t x = 0;
  for (int i = 0; i < 4 && *at < n; ++i) {
    const uint8_t b = data[(*at)++];
    x |= static_cast<uint32_t>(b & 0x7F) << (7 * i);
    if (!(b & 0x80)) return *out = x, true;
  }
  return false;
}

// Sets up the tiles' dictionaries and models from the plane's state.
PlaneState::Impl& attach_state(std::vector<Tile>& tiles, const Params& p, PlaneState* state,
                               std::unique_ptr<PlaneState>& fresh) {
  if (!state) state = (fresh = std::make_unique<PlaneState>(p)).get();
  PlaneState::Impl& st = state->impl();
  st.prepare(p, static_cast<int>(tiles.size()));
  for (size_t i = 0; i < tiles.size(); ++i) {
    tiles[i].dict = &st.dict(static_cast<int>(i));
    tiles[i].models = &st.model(static_cast<int>(i));
  }
  return st;
}

}  // namespace

const char* tile_mode_name(TileMode m) {
  return m == TileMode::Independent ? "independent" : m == TileMode::SyncDictionaries ? "sync-dict" : "sync";
}

bool parse_tile_mode(const std::string& s, TileMode* out) {
  for (TileMode m : {TileMode::Independent, TileMode::SyncDictionaries, TileMode::SyncAll})
    if (s == tile_mode_name(m)) return *out = m, true;
  return false;
}

const char* tile_scan_name(TileScan s) { return s == TileScan::Wavefront ? "wavefront" : "raster"; }

bool parse_tile_scan(const std::string& s, TileScan* out) {
  for (TileScan v : {TileScan::Raster, TileScan::Wavefront})
    if (s == tile_scan_name(v)) return *out = v, true;
  return false;
}

void check_tile_count(int w, int h, const Params& p, ErrorKind kind) {
  if (!p.tiled()) return;
  const int B = 1 << checked_block_log(p);
  const int64_t W = (w + B - 1) / B * B, H = (h + B - 1) / B * B;
  const int64_t count = ((W + p.tile_w - 1) / p.tile_w) * ((H + p.tile_h - 1) / p.tile_h);
  if (count > max_tiles(p.tile_mode))
    throw Error(kind, log::format("MMP: %lld tiles of %dx%d in a %lldx%lld plane; %s tiles are limited to %d per "
                                  "plane (use larger tiles)",
                                  static_cast<long long>(count), p.tile_w, p.tile_h, static_cast<long long>(W),
                                  static_cast<long long>(H), tile_mode_name(p.tile_mode), max_tiles(p.tile_mode)));
}

void parse_tile_size(const std::string& text, Params* p) {
  if (text == "0" || text == "off" || text.empty()) {
    p->tile_w = p->tile_h = 0;
    return;
  }
  const auto number = [&](const std::string& t, int* out) {
    if (t.empty() || t.size() > 5 || t.find_first_not_of("0123456789") != std::string::npos) return false;
    *out = std::stoi(t);
    return true;
  };
  const size_t x = text.find('x');
  int w = 0, h = 0;
  const bool ok = x == std::string::npos ? number(text, &w) && (h = w, true)
                                         : number(text.substr(0, x), &w) && number(text.substr(x + 1), &h);
  if (!ok || w <= 0 || h <= 0)
    throw Error(ErrorKind::Usage, "MMP: tile size '" + text + "' is not WxH or N (e.g. 128x128, 128, or 0 for none)");
  p->tile_w = w, p->tile_h = h;
}

int plane_tile_size(int luma_tile, int shift, int block_log) {
  if (luma_tile <= 0) return 0;
  const int B = 1 << block_log, t = (luma_tile + (1 << shift) - 1) >> shift;
  return (t + B - 1) / B * B;
}

void check_tiles(const Params& p) {
  const int B = 1 << checked_block_log(p);
  if (static_cast<int>(p.tile_scan) > 1) throw Error(ErrorKind::Usage, "MMP: unknown tile scan");
  if (p.tile_scan == TileScan::Wavefront && (!p.tiled() || p.tile_mode == TileMode::Independent))
    throw Error(ErrorKind::Usage,
                "MMP: a wavefront tile scan orders the rounds of synchronized tiles: it needs tiles (e.g. 512x512) "
                "and tile mode sync or sync-dict");
  if (p.tile_w == 0 && p.tile_h == 0) return;
  for (int t : {p.tile_w, p.tile_h})
    if (t <= 0 || t % B != 0 || t > 16384)
      throw Error(ErrorKind::Usage, "MMP: tiles of " + std::to_string(p.tile_w) + "x" + std::to_string(p.tile_h) +
                                        ": each side must be a multiple of the block size " + std::to_string(B) +
                                        " up to 16384");
  if (static_cast<int>(p.tile_mode) > 2) throw Error(ErrorKind::Usage, "MMP: unknown tile mode");
}

std::vector<int16_t> resize_element(const std::vector<int16_t>& e, int lw1, int lh1, int lw2, int lh2) {
  std::vector<int16_t> out(static_cast<size_t>(1) << (lw2 + lh2));
  resize_into(e.data(), lw1, lh1, lw2, lh2, out.data());
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
  check_tiles(p);
  const int BL = checked_block_log(p), B = 1 << BL;
  const int W = (w + B - 1) / B * B, H = (h + B - 1) / B * B;
  const std::vector<uint8_t> src = pad(img, w, h, W, H);
  std::vector<Tile> tiles = make_tiles(W, H, p, ErrorKind::Usage);
  std::unique_ptr<PlaneState> fresh;
  PlaneState::Impl& st = attach_state(tiles, p, state, fresh);
  for (const auto& d : st.dicts)
    if (d->held_on_device() && !(p.search && p.search->learns_rounds()))
      throw Error(ErrorKind::Usage,
                  "MMP: this plane's carried dictionaries learnt on the GPU and cannot continue on the CPU");
  if (!p.search && !p.exhaustive)  // the CPU's pruned search
    for (auto& d : st.dicts) d->keep_sum_order();
  for (Tile& t : tiles) {
    t.src.resize(static_cast<size_t>(t.w) * t.h);
    for (int y = 0; y < t.h; ++y)
      std::memcpy(&t.src[static_cast<size_t>(y) * t.w], &src[static_cast<size_t>(t.y0 + y) * W + t.x0],
                  static_cast<size_t>(t.w));
    t.enc = std::make_unique<RangeEncoder>();
    t.blocks_coded = p.blocks_coded;
  }
  // SyncAll tiles share one model set, unchanged during a round: one table of index costs a round.
  const bool shared_models = p.tiled() && p.tile_mode == TileMode::SyncAll;
  const bool whole_blocks = p.search && p.search->searches_blocks();  // the backend derives the costs itself
  IndexCosts shared_ic;
  // (A dictionary that replaces elements learns on the host only.)
  if (whole_blocks && p.search->learns_blocks() && !p.replace_least_used &&
      (!p.tiled() || p.tile_mode == TileMode::Independent)) {
    std::vector<int> all(tiles.size());
    for (size_t i = 0; i < tiles.size(); ++i) all[i] = static_cast<int>(i);
    for_tiles(all, [&](int i) { encode_tile_learning_on_backend(tiles[static_cast<size_t>(i)], p); });
  } else if (!(whole_blocks && p.tiled() && p.tile_mode != TileMode::Independent &&
               (code_rounds_batched(tiles, p) || code_rounds_in_flight(tiles, p)))) {
    code_tiles(
        tiles, p,
        [&](Tile& t, int k, BlockWork& work, bool frozen) {
          if (whole_blocks) return encode_block(t, k, work, frozen, nullptr, p);
          if (shared_models) return encode_block(t, k, work, frozen, &shared_ic, p);
          thread_local IndexCosts ic;
          index_costs(*t.models, *t.dict, BL, ic);
          encode_block(t, k, work, frozen, &ic, p);
        },
        [&](int) {
          if (shared_models && !whole_blocks) index_costs(*tiles[0].models, *tiles[0].dict, BL, shared_ic);
        });
  }
  // The plane as decoded, cropped; then the post-filter, designed against the original and
  // sent after the blocks (it does not touch the prediction loop above).
  std::vector<uint8_t> decoded(static_cast<size_t>(w) * h);
  for (const Tile& t : tiles)
    for (int y = 0; y < t.h && t.y0 + y < h; ++y)
      std::memcpy(&decoded[static_cast<size_t>(t.y0 + y) * w + t.x0], &t.rec[static_cast<size_t>(y) * t.w],
                  static_cast<size_t>(std::max(0, std::min(t.w, w - t.x0))));
  PlaneResult res;
  res.tiles = static_cast<int>(tiles.size());
  for (const Tile& t : tiles) {
    res.blocks += t.stats.blocks, res.leaves += t.stats.leaves;
    for (int m = 0; m < kModes; ++m) res.modes[m] += t.stats.modes[m];
    for (int u = 0; u < 4; ++u) res.unit_sizes[u] += t.stats.unit_sizes[u];
    for (int d = 0; d < 2; ++d) res.splits[d] += t.stats.splits[d];
    res.search_s += t.stats.search_s, res.coding_s += t.stats.coding_s, res.learning_s += t.stats.learning_s;
  }
  res.recon.resize(decoded.size());
  // Untiled, the post-filter follows the blocks in the plane's one stream; tiled, it has a
  // stream of its own after the tiles'.
  RangeEncoder pf_stream;
  RangeEncoder& pf_enc = p.tiled() ? pf_stream : *tiles[0].enc;
  if (p.post_filter) {
    const int64_t t0 = now_ns();
    PostFilter f;
    if (!(p.search && post_filter_on_device() &&
          p.search->design_post_filter(decoded.data(), img, w, h, p.lambda, &f, res.recon.data())))
      f = design_post_filter(decoded.data(), img, w, h, p.lambda, res.recon.data());
    write_post_filter(pf_enc, f);
    for (int c = 0; c < kPostClasses; ++c) res.post_filter_classes += f.on[c] ? 1 : 0;
    res.post_filter_s = 1e-9 * static_cast<double>(now_ns() - t0);
  } else {
    res.recon = decoded;
  }
  if (!p.tiled()) {
    res.bytes = tiles[0].enc->finish();
  } else {
    // Tile table (each tile's byte count), the tiles' streams, the post-filter's stream;
    // the streams without their first byte, which is always 0.
    std::vector<std::vector<uint8_t>> streams;
    for (Tile& t : tiles) streams.push_back(t.enc->finish(true));
    for (const auto& st : streams) put_varint(res.bytes, static_cast<uint32_t>(st.size()));
    for (const auto& st : streams) res.bytes.insert(res.bytes.end(), st.begin(), st.end());
    if (p.post_filter) {
      const std::vector<uint8_t> pf = pf_stream.finish(true);
      res.bytes.insert(res.bytes.end(), pf.begin(), pf.end());
    }
  }
  for (size_t i = 0; i < decoded.size(); ++i) {
    const double d = static_cast<double>(res.recon[i]) - img[i];
    res.sse += d * d;
  }
  for (const auto& d : fresh ? fresh->impl().dicts : state->impl().dicts) {
    res.dict_elements += d->total();
    res.device_learning = res.device_learning || d->held_on_device();
  }
  return res;
}

size_t min_plane_bytes(int w, int h, int block_log) {
  const int64_t b = int64_t{1} << block_log;
  const int64_t blocks = ((w + b - 1) / b) * ((h + b - 1) / b);
  const double bits = static_cast<double>(blocks) * kModeBits * 0.0220;
  return static_cast<size_t>(bits / 8 * 0.5);
}

std::vector<uint8_t> decode_plane(const uint8_t* data, size_t n, int w, int h, const Params& p, PlaneState* state) {
  check_tiles(p);
  const int BL = checked_block_log(p), B = 1 << BL;
  const int W = (w + B - 1) / B * B, H = (h + B - 1) / B * B;
  std::vector<Tile> tiles = make_tiles(W, H, p, ErrorKind::Input);
  std::unique_ptr<PlaneState> fresh;
  attach_state(tiles, p, state, fresh);
  std::unique_ptr<RangeDecoder> pf_stream;
  if (!p.tiled()) {
    tiles[0].dec = std::make_unique<RangeDecoder>(data, n);
  } else {
    // The tile table must describe streams that lie inside the payload and can hold their
    // tiles' blocks; what follows them is the post-filter's stream (nothing without one).
    size_t at = 0;
    std::vector<uint32_t> lens(tiles.size());
    for (size_t i = 0; i < tiles.size(); ++i)
      if (!get_varint(data, n, &at, &lens[i])) corrupt(tiles[i].x0, tiles[i].y0);
    for (size_t i = 0; i < tiles.size(); ++i) {
      Tile& t = tiles[i];
      if (lens[i] > n - at || lens[i] < min_plane_bytes(t.w, t.h, BL)) corrupt(t.x0, t.y0);
      t.dec = std::make_unique<RangeDecoder>(data + at, lens[i], true);
      at += lens[i];
    }
    if (p.post_filter)
      pf_stream = std::make_unique<RangeDecoder>(data + at, n - at, true);
    else if (at != n)
      corrupt(W, H);
  }
  code_tiles(
      tiles, p, [&](Tile& t, int k, BlockWork& work, bool frozen) { decode_block(t, k, work, frozen, BL); },
      [](int) {});
  std::vector<uint8_t> out(static_cast<size_t>(w) * h);
  for (const Tile& t : tiles)
    for (int y = 0; y < t.h && t.y0 + y < h; ++y)
      std::memcpy(&out[static_cast<size_t>(t.y0 + y) * w + t.x0], &t.rec[static_cast<size_t>(y) * t.w],
                  static_cast<size_t>(std::max(0, std::min(t.w, w - t.x0))));
  if (!p.post_filter) return out;
  RangeDecoder& pf_dec = p.tiled() ? *pf_stream : *tiles[0].dec;
  const PostFilter f = read_post_filter(pf_dec);
  if (pf_dec.overrun()) corrupt(W, H);
  std::vector<uint8_t> filtered(out.size());
  apply_post_filter(f, out.data(), w, h, filtered.data());
  return filtered;
}

}  // namespace vfp::mmp
