#include "pipeline/mmp/mmp.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <unordered_map>

#include "pipeline/error.hpp"
#include "pipeline/mmp/range_coder.hpp"

namespace vfp::mmp {

namespace {

constexpr int kLog = 4, kB = 1 << kLog, kScales = 25, kIndexBits = 12, kModeBits = 2;
using Elem = std::vector<int16_t>;

int scale_of(int lw, int lh) { return lw + 5 * lh; }
int floor_div(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// One dictionary per scale; exact duplicates are not inserted; a full scale takes no more.
class Dictionary {
 public:
  explicit Dictionary(int max) : max_(max) {
    // Flat elements over the residue range, every 8 levels.
    for (int lh = 0; lh <= kLog; ++lh)
      for (int lw = 0; lw <= kLog; ++lw)
        for (int v = -252; v <= 252; v += 8) insert(scale_of(lw, lh), Elem(static_cast<size_t>(1) << (lw + lh), static_cast<int16_t>(v)));
  }
  const std::vector<Elem>& at(int s) const { return e_[static_cast<size_t>(s)]; }
  // A new element of scale (lw, lh), and its resized versions at every other scale.
  void add_everywhere(const Elem& e, int lw, int lh) {
    for (int lh2 = 0; lh2 <= kLog; ++lh2)
      for (int lw2 = 0; lw2 <= kLog; ++lw2)
        insert(scale_of(lw2, lh2), lw2 == lw && lh2 == lh ? e : resize_element(e, lw, lh, lw2, lh2));
  }
  int64_t total() const {
    int64_t t = 0;
    for (const auto& v : e_) t += static_cast<int64_t>(v.size());
    return t;
  }

 private:
  void insert(int s, Elem e) {
    auto& list = e_[static_cast<size_t>(s)];
    if (static_cast<int>(list.size()) >= max_) return;
    uint64_t h = 1469598103934665603ull;
    for (int16_t v : e) h = (h ^ static_cast<uint16_t>(v)) * 1099511628211ull;
    auto range = index_[static_cast<size_t>(s)].equal_range(h);
    for (auto it = range.first; it != range.second; ++it)
      if (list[static_cast<size_t>(it->second)] == e) return;
    index_[static_cast<size_t>(s)].emplace(h, static_cast<int>(list.size()));
    list.push_back(std::move(e));
  }
  int max_;
  std::array<std::vector<Elem>, kScales> e_;
  std::array<std::unordered_multimap<uint64_t, int>, kScales> index_;
};

struct Models {
  std::array<Prob, 1 << kModeBits> mode{};
  std::array<Prob, kScales> split{}, dir{};
  std::array<std::vector<Prob>, kScales> index;
  Models() {
    for (auto& t : index) t.assign(size_t(1) << kIndexBits, Prob{});
  }
};

// Prediction of block (bx, by) from the decoded plane: 0 none (128), 1 DC, 2 vertical, 3 horizontal.
void predict(const std::vector<uint8_t>& rec, int W, int bx, int by, int mode, int* pred) {
  const bool top = by > 0, left = bx > 0;
  const uint8_t* up = top ? &rec[static_cast<size_t>(by - 1) * W + bx] : nullptr;
  auto lft = [&](int y) { return rec[static_cast<size_t>(by + y) * W + bx - 1]; };
  int dc = 128;
  if (mode == 1 && (top || left)) {
    int sum = 0, n = 0;
    for (int i = 0; i < kB; ++i) {
      if (top) sum += up[i], ++n;
      if (left) sum += lft(i), ++n;
    }
    dc = (sum + n / 2) / n;
  }
  for (int y = 0; y < kB; ++y)
    for (int x = 0; x < kB; ++x)
      pred[y * kB + x] = mode == 1 ? dc : mode == 2 ? (top ? up[x] : 128) : mode == 3 ? (left ? lft(y) : 128) : 128;
}

// Costs in bits of every index of every scale under the current models (tree walk).
void index_costs(const Models& m, const Dictionary& d, std::array<std::vector<double>, kScales>& out) {
  for (int s = 0; s < kScales; ++s) {
    const size_t n = d.at(s).size();
    out[static_cast<size_t>(s)].assign(n, 0);
    for (size_t i = 0; i < n; ++i) out[static_cast<size_t>(s)][i] = tree_cost(m.index[static_cast<size_t>(s)].data(), kIndexBits, static_cast<uint32_t>(i));
  }
}

// The best segmentation of one 16x16 residue: for every segment (scale, position) the best
// J, its choice (0 leaf, 1 split into left|right, 2 into top|bottom) and leaf index.
struct Plan {
  double J[kLog + 1][kLog + 1][kB * kB];
  uint8_t kind[kLog + 1][kLog + 1][kB * kB];
  int index[kLog + 1][kLog + 1][kB * kB];
};

void optimise(const int* r, const Dictionary& d, const Models& m, const std::array<std::vector<double>, kScales>& icost,
              double lambda, Plan& plan) {
  for (int sum = 0; sum <= 2 * kLog; ++sum)
    for (int lw = std::max(0, sum - kLog); lw <= std::min(kLog, sum); ++lw) {
      const int lh = sum - lw, s = scale_of(lw, lh), w = 1 << lw, h = 1 << lh, nx = kB >> lw, ny = kB >> lh;
      const bool flag = lw + lh > 0, both = lw > 0 && lh > 0;
      const double leaf_bits = flag ? bit_cost(m.split[static_cast<size_t>(s)], 0) : 0;
      const double split_bits = flag ? bit_cost(m.split[static_cast<size_t>(s)], 1) : 0;
      const auto& elems = d.at(s);
      const auto& ic = icost[static_cast<size_t>(s)];
      for (int iy = 0; iy < ny; ++iy)
        for (int ix = 0; ix < nx; ++ix) {
          const int at = ix + iy * nx, x0 = ix * w, y0 = iy * h;
          double best = std::numeric_limits<double>::infinity();
          int best_i = 0;
          for (size_t i = 0; i < elems.size(); ++i) {
            const double rate = lambda * (ic[i] + leaf_bits);
            if (rate >= best) continue;
            const int16_t* e = elems[i].data();
            double dsum = 0;
            for (int y = 0; y < h && dsum + rate < best; ++y)
              for (int x = 0; x < w; ++x) {
                const int diff = r[(y0 + y) * kB + x0 + x] - e[y * w + x];
                dsum += static_cast<double>(diff * diff);
              }
            if (dsum + rate < best) {
              best = dsum + rate;
              best_i = static_cast<int>(i);
            }
          }
          uint8_t kind = 0;
          if (lw > 0) {  // left | right
            const int nx2 = kB >> (lw - 1);
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
          plan.index[lw][lh][at] = best_i;
        }
    }
}

// Walks a block's tree (from the plan when encoding, from the stream when decoding): codes or
// reads each decision, fills the residue reconstruction and collects the internal nodes
// (post-order) whose concatenations become new dictionary elements.
struct Internal {
  int x0, y0, lw, lh;
};

template <typename Decide>
void walk(int x0, int y0, int lw, int lh, Decide&& decide, const Dictionary& d, int* rec, std::vector<Internal>& inner,
          int64_t& leaves) {
  int kind = 0, index = 0;
  decide(x0, y0, lw, lh, &kind, &index);
  if (kind == 0) {
    const Elem& e = d.at(scale_of(lw, lh))[static_cast<size_t>(index)];
    const int w = 1 << lw, h = 1 << lh;
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) rec[(y0 + y) * kB + x0 + x] = e[static_cast<size_t>(y * w + x)];
    ++leaves;
    return;
  }
  if (kind == 1) {
    walk(x0, y0, lw - 1, lh, decide, d, rec, inner, leaves);
    walk(x0 + (1 << (lw - 1)), y0, lw - 1, lh, decide, d, rec, inner, leaves);
  } else {
    walk(x0, y0, lw, lh - 1, decide, d, rec, inner, leaves);
    walk(x0, y0 + (1 << (lh - 1)), lw, lh - 1, decide, d, rec, inner, leaves);
  }
  inner.push_back({x0, y0, lw, lh});
}

void learn(const std::vector<Internal>& inner, const int* rec, Dictionary& d) {
  for (const Internal& n : inner) {
    const int w = 1 << n.lw, h = 1 << n.lh;
    Elem e(static_cast<size_t>(w * h));
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) e[static_cast<size_t>(y * w + x)] = static_cast<int16_t>(rec[(n.y0 + y) * kB + n.x0 + x]);
    d.add_everywhere(e, n.lw, n.lh);
  }
}

// The plane padded to whole blocks by repeating its last column and row.
std::vector<uint8_t> pad(const uint8_t* img, int w, int h, int W, int H) {
  std::vector<uint8_t> p(static_cast<size_t>(W) * H);
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) p[static_cast<size_t>(y) * W + x] = img[static_cast<size_t>(std::min(y, h - 1)) * w + std::min(x, w - 1)];
  return p;
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

PlaneResult encode_plane(const uint8_t* img, int w, int h, const Params& p) {
  const int W = (w + kB - 1) / kB * kB, H = (h + kB - 1) / kB * kB;
  const std::vector<uint8_t> src = pad(img, w, h, W, H);
  std::vector<uint8_t> rec(src.size(), 0);
  Dictionary dict(p.max_dict);
  Models models;
  RangeEncoder enc;
  PlaneResult res;
  auto plan = std::make_unique<Plan>(), trial = std::make_unique<Plan>();  // the best mode's, the one tried
  std::array<std::vector<double>, kScales> icost;
  int pred[kB * kB], trial_pred[kB * kB], r[kB * kB], rres[kB * kB];
  for (int by = 0; by < H; by += kB)
    for (int bx = 0; bx < W; bx += kB) {
      index_costs(models, dict, icost);
      // Mode and tree jointly: the tree of each mode, then the mode of least J.
      int best_mode = 0;
      double best_j = std::numeric_limits<double>::infinity();
      for (int mode = 0; mode < (1 << kModeBits); ++mode) {
        predict(rec, W, bx, by, mode, trial_pred);
        for (int i = 0; i < kB * kB; ++i) r[i] = src[static_cast<size_t>(by + i / kB) * W + bx + i % kB] - trial_pred[i];
        optimise(r, dict, models, icost, p.lambda, *trial);
        const double j = trial->J[kLog][kLog][0] + p.lambda * tree_cost(models.mode.data(), kModeBits, static_cast<uint32_t>(mode));
        if (j < best_j) {  // keep this mode's plan and prediction
          best_j = j;
          best_mode = mode;
          std::swap(plan, trial);
          std::copy(trial_pred, trial_pred + kB * kB, pred);
        }
      }
      enc.encode_tree(models.mode.data(), kModeBits, static_cast<uint32_t>(best_mode));
      std::vector<Internal> inner;
      auto decide = [&](int x0, int y0, int lw, int lh, int* kind, int* index) {
        const int s = scale_of(lw, lh), at = (x0 >> lw) + (y0 >> lh) * (kB >> lw);
        *kind = plan->kind[lw][lh][at];
        *index = plan->index[lw][lh][at];
        if (lw + lh > 0) {
          enc.encode(models.split[static_cast<size_t>(s)], *kind != 0);
          if (*kind != 0 && lw > 0 && lh > 0) enc.encode(models.dir[static_cast<size_t>(s)], *kind == 2);
        }
        if (*kind == 0) enc.encode_tree(models.index[static_cast<size_t>(s)].data(), kIndexBits, static_cast<uint32_t>(*index));
        else ++res.splits[*kind - 1];
      };
      walk(0, 0, kLog, kLog, decide, dict, rres, inner, res.leaves);
      for (int i = 0; i < kB * kB; ++i) {
        const int v = std::clamp(pred[i] + rres[i], 0, 255);
        rec[static_cast<size_t>(by + i / kB) * W + bx + i % kB] = static_cast<uint8_t>(v);
      }
      learn(inner, rres, dict);
      ++res.blocks;
      ++res.modes[best_mode];
    }
  res.bytes = enc.finish();
  res.recon.resize(static_cast<size_t>(w) * h);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const uint8_t v = rec[static_cast<size_t>(y) * W + x];
      res.recon[static_cast<size_t>(y) * w + x] = v;
      const double d = static_cast<double>(v) - img[static_cast<size_t>(y) * w + x];
      res.sse += d * d;
    }
  res.dict_elements = dict.total();
  return res;
}

std::vector<uint8_t> decode_plane(const uint8_t* data, size_t n, int w, int h, const Params& p) {
  const int W = (w + kB - 1) / kB * kB, H = (h + kB - 1) / kB * kB;
  std::vector<uint8_t> rec(static_cast<size_t>(W) * H, 0);
  Dictionary dict(p.max_dict);
  Models models;
  RangeDecoder dec(data, n);
  int pred[kB * kB], rres[kB * kB];
  int64_t leaves = 0;
  for (int by = 0; by < H; by += kB)
    for (int bx = 0; bx < W; bx += kB) {
      const int mode = static_cast<int>(dec.decode_tree(models.mode.data(), kModeBits));
      predict(rec, W, bx, by, mode, pred);
      std::vector<Internal> inner;
      auto decide = [&](int, int, int lw, int lh, int* kind, int* index) {
        const int s = scale_of(lw, lh);
        *kind = 0;
        if (lw + lh > 0 && dec.decode(models.split[static_cast<size_t>(s)])) {
          *kind = lw > 0 && lh > 0 ? 1 + dec.decode(models.dir[static_cast<size_t>(s)]) : lw > 0 ? 1 : 2;
          return;
        }
        const uint32_t i = dec.decode_tree(models.index[static_cast<size_t>(s)].data(), kIndexBits);
        if (i >= dict.at(s).size() || dec.overrun())
          throw Error(ErrorKind::Input, "MMP: corrupt or truncated data (block at " + std::to_string(bx) + "," +
                                            std::to_string(by) + ")");
        *index = static_cast<int>(i);
      };
      walk(0, 0, kLog, kLog, decide, dict, rres, inner, leaves);
      if (dec.overrun()) throw Error(ErrorKind::Input, "MMP: truncated data");
      for (int i = 0; i < kB * kB; ++i)
        rec[static_cast<size_t>(by + i / kB) * W + bx + i % kB] = static_cast<uint8_t>(std::clamp(pred[i] + rres[i], 0, 255));
      learn(inner, rres, dict);
    }
  std::vector<uint8_t> out(static_cast<size_t>(w) * h);
  for (int y = 0; y < h; ++y) std::memcpy(&out[static_cast<size_t>(y) * w], &rec[static_cast<size_t>(y) * W], static_cast<size_t>(w));
  return out;
}

}  // namespace vfp::mmp
