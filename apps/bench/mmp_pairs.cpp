// vfpipe-mmp-pairs: how many (segment, element) pairs of the small scales (4, 8 and 16
// samples) a leaf search has to look at under different skip rules, counted on the real
// searches of an encode (docs/perf.md, session 27). A LeafSearch backend searches every
// unit exhaustively (the encoder's answer, so the encode runs as usual) and, knowing each
// segment's final best J, counts the pairs a rule could not rule out:
//   rate order      elements cheapest first, a segment stops at the first whose rate
//                   exceeds its best J (the GPU's small-segment search in rounds);
//   sum, each       pairs whose bound (sum x - sum d)^2 / n + rate is at most the best J
//                   (a pair-by-pair skip: the CPU encoder's pruning);
//   sum, warps      elements in order of sum, in runs of 32 (a warp's lanes): a run is
//                   searched unless every element's bound exceeds the best J;
//   rate, warps     the same runs in rate order.
// Those use the final best J, so each is what a search that finds it first would need: a
// floor for the rule, not a measured kernel (rate order's is also what a walk cheapest
// first needs: every element before the best costs at most the best J). One rule is
// simulated as the GPU's kernel walks it, with the best J found so far:
//   sum, walked     small_rows_sum() in cuda/mmp_search.cu: the --seed cheapest elements
//                   first, then runs of 32 in sum order from sum 0 outward (alternating
//                   sides), a run skipped when the bound of its sums' interval and its
//                   least rate exceeds the best J found so far.
//     vfpipe-mmp-pairs clip.y4m --crop 512x256+704+400 --lambda 25 --tile 256
#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#include "codecs/mmp/mmp.hpp"
#include "codecs/mmp/search.hpp"
#include "codecs/mmp/sum_order.hpp"
#include "core/error.hpp"
#include "core/frame.hpp"
#include "io/open.hpp"

namespace {

using namespace vfp;

struct Counts {
  double total = 0, rate_order = 0, sum_each = 0, sum_warps = 0, rate_warps = 0, sum_walked = 0;
};

// The encoder calls search() from several threads at once (a round's tiles): each call
// works in its own Scratch and adds its counts under the lock.
class CountingSearch final : public mmp::LeafSearch {
 public:
  explicit CountingSearch(int seed) : seed_(seed) {}
  std::array<Counts, 17> counts{};  // by samples a segment (4, 8, 16)

  std::string name() const override { return "exhaustive, counting"; }

  void search(const mmp::LeafQuery& q, double* J, int* index) override {
    const int N = 1 << q.L, table = mmp::leaf_table_size(q.L);
    Scratch sc;
    for (int lh = 0; lh <= q.L; ++lh)
      for (int lw = 0; lw <= q.L; ++lw) scale(q, N, table, lw, lh, J, index, sc);
    std::lock_guard<std::mutex> lk(mu_);
    for (size_t n = 0; n < counts.size(); ++n) {
      Counts& c = counts[n];
      const Counts& d = sc.counts[n];
      c.total += d.total, c.rate_order += d.rate_order, c.sum_each += d.sum_each;
      c.sum_warps += d.sum_warps, c.rate_warps += d.rate_warps, c.sum_walked += d.sum_walked;
    }
  }

 private:
  struct Scratch {
    std::vector<double> rate;
    std::vector<int> sum, norm, by_sum, by_rate;
    std::vector<double> j;  // the segment's J of every element
    std::array<Counts, 17> counts{};
  };

  void scale(const mmp::LeafQuery& q, int N, int table, int lw, int lh, double* J, int* index, Scratch& sc) {
    const int s = lw + 6 * lh, n = 1 << (lw + lh), count = q.scales[static_cast<size_t>(s)].count;
    const int16_t* data = q.scales[static_cast<size_t>(s)].data;
    sc.rate.resize(static_cast<size_t>(count));
    sc.sum.resize(static_cast<size_t>(count));
    sc.norm.resize(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) {
      // The search's arithmetic (codecs/mmp/search.hpp): each product and sum rounded once.
      sc.rate[static_cast<size_t>(i)] =
          q.lambda * (q.bits[static_cast<size_t>(s)][i] + q.leaf_bits[static_cast<size_t>(s)]);
      int a = 0, b = 0;
      for (int t = 0; t < n; ++t) {
        const int d = data[static_cast<size_t>(i) * n + t];
        a += d, b += d * d;
      }
      sc.sum[static_cast<size_t>(i)] = a, sc.norm[static_cast<size_t>(i)] = b;
    }
    const bool counted = n >= 4 && n <= 16;
    if (counted) {
      sc.by_sum.resize(static_cast<size_t>(count));
      sc.by_rate.resize(static_cast<size_t>(count));
      std::iota(sc.by_sum.begin(), sc.by_sum.end(), 0);
      std::iota(sc.by_rate.begin(), sc.by_rate.end(), 0);
      std::stable_sort(sc.by_sum.begin(), sc.by_sum.end(),
                       [&](int a, int b) { return sc.sum[static_cast<size_t>(a)] < sc.sum[static_cast<size_t>(b)]; });
      std::stable_sort(sc.by_rate.begin(), sc.by_rate.end(),
                       [&](int a, int b) { return sc.rate[static_cast<size_t>(a)] < sc.rate[static_cast<size_t>(b)]; });
    }
    const int nx = N >> lw, ny = N >> lh;
    std::vector<int> x(static_cast<size_t>(n));
    for (int k = 0; k < q.K; ++k)
      for (int iy = 0; iy < ny; ++iy)
        for (int ix = 0; ix < nx; ++ix) {
          int sx = 0, sq = 0;
          for (int yy = 0; yy < (1 << lh); ++yy)
            for (int xx = 0; xx < (1 << lw); ++xx) {
              const int v = q.residues[static_cast<size_t>(k) * N * N + static_cast<size_t>(iy * (1 << lh) + yy) * N +
                                       ix * (1 << lw) + xx];
              x[static_cast<size_t>(yy * (1 << lw) + xx)] = v, sx += v, sq += v * v;
            }
          double bj = INFINITY;
          int bi = -1;
          sc.j.resize(static_cast<size_t>(count));
          for (int i = 0; i < count; ++i) {  // ties to the lower index: strict <
            long long dot = 0;
            for (int t = 0; t < n; ++t)
              dot += static_cast<long long>(x[static_cast<size_t>(t)]) * data[static_cast<size_t>(i) * n + t];
            const double j =
                static_cast<double>(sq + sc.norm[static_cast<size_t>(i)] - 2 * dot) + sc.rate[static_cast<size_t>(i)];
            sc.j[static_cast<size_t>(i)] = j;
            if (j < bj) bj = j, bi = i;
          }
          const size_t o = static_cast<size_t>(k) * table + mmp::leaf_scale_offset(q.L, lw, lh) + ix + iy * nx;
          J[o] = bj, index[o] = bi;
          if (counted) tally(sc.counts[static_cast<size_t>(n)], sc, n, count, sx, bj);
        }
  }

  void tally(Counts& c, const Scratch& sc, int n, int count, int sx, double bj) const {
    const auto bound = [&](int i) {
      const double d = sx - sc.sum[static_cast<size_t>(i)];
      return d * d / n + sc.rate[static_cast<size_t>(i)];
    };
    c.total += count;
    for (int i = 0; i < count; ++i) {
      c.rate_order += sc.rate[static_cast<size_t>(i)] <= bj ? 1 : 0;
      c.sum_each += bound(i) <= bj ? 1 : 0;
    }
    for (int r = 0; r < count; r += 32) {
      const int m = std::min(32, count - r);
      bool by_sum = false, by_rate = false;
      for (int t = 0; t < m; ++t) {
        by_sum = by_sum || bound(sc.by_sum[static_cast<size_t>(r + t)]) <= bj;
        by_rate = by_rate || bound(sc.by_rate[static_cast<size_t>(r + t)]) <= bj;
      }
      c.sum_warps += by_sum ? m : 0;
      c.rate_warps += by_rate ? m : 0;
    }
    // The walk of the GPU's sum-order search, its warps taking turns (the model of
    // codecs/mmp/sum_order.hpp): the seed's cheapest elements, then the runs from sum 0 out.
    namespace so = mmp::sum_order;
    double seed_best = INFINITY;
    const int seed = std::min(seed_, count);
    for (int t = 0; t < seed; ++t)
      seed_best = std::min(seed_best, sc.j[static_cast<size_t>(sc.by_rate[static_cast<size_t>(t)])]);
    c.sum_walked += seed;
    int zero = 0;
    while (zero < count && sc.sum[static_cast<size_t>(sc.by_sum[static_cast<size_t>(zero)])] < 0) ++zero;
    double least = INFINITY;
    for (int i = 0; i < count; ++i) least = std::min(least, sc.rate[static_cast<size_t>(i)]);
    const auto at = [&](int p) { return static_cast<size_t>(sc.by_sum[static_cast<size_t>(p)]); };
    int turn = 0;
    so::model_walk(
        count, zero, n, sx, seed_best, count ? so::rate_floor(least) : 0, 0, 1, [&](int p) { return sc.sum[at(p)]; },
        [&](int p) { return sc.rate[at(p)]; },
        [&](int p) {
          c.sum_walked += 1;
          return sc.j[at(p)];
        },
        [&](unsigned ready) {  // round robin
          while (!(ready >> turn & 1u)) turn = (turn + 1) % 4;
          const int w = turn;
          turn = (turn + 1) % 4;
          return w;
        });
  }

  int seed_;
  std::mutex mu_;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Pairs of the small scales an MMP leaf search must look at, by skip rule (luma of the first frame)");
  std::string input, crop;
  double lambda = 25;
  std::string tile = "256";
  int dict = 512;
  app.add_option("input", input, "any vfpipe input (its first frame's luma)")->required();
  app.add_option("--crop", crop, "WxH+X+Y of the luma (default: all of it)");
  app.add_option("--lambda", lambda, "the encoder's lambda")->capture_default_str();
  app.add_option("--tile", tile, "tile size, WxH or N (0: untiled)")->capture_default_str();
  app.add_option("--dict", dict, "elements a scale (they replace their least used)")->capture_default_str();
  int seed = 32;
  app.add_option("--seed", seed, "sum, walked: the cheapest elements searched first")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    auto src = open_source(input, SourceOptions{});
    HostFrame f(src->spec(), false);
    if (!src->read(f)) throw Error(ErrorKind::Input, input + ": no frames");
    const ImageView v = f.view();
    int w = src->spec().width, h = src->spec().height, x0 = 0, y0 = 0;
    if (!crop.empty() && (std::sscanf(crop.c_str(), "%dx%d+%d+%d", &w, &h, &x0, &y0) != 4 || w < 1 || h < 1 || x0 < 0 ||
                          y0 < 0 || x0 + w > src->spec().width || y0 + h > src->spec().height))
      throw Error(ErrorKind::Usage, "--crop: WxH+X+Y inside the frame, got '" + crop + "'");
    std::vector<uint8_t> luma(static_cast<size_t>(w) * h);
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) luma[static_cast<size_t>(y) * w + x] = v.row(0, y0 + y)[x0 + x];
    mmp::Params p;
    p.lambda = lambda;
    p.max_dict = dict;
    p.replace_least_used = true;
    mmp::parse_tile_size(tile, &p);
    mmp::check_tiles(p);
    auto search = std::make_shared<CountingSearch>(std::max(0, seed));
    p.search = search;
    const mmp::PlaneResult r = mmp::encode_plane(luma.data(), w, h, p);
    std::printf("%dx%d luma at %d,%d, lambda %g, tile %s, %d elements: %.4f bpp\n", w, h, x0, y0, lambda, tile.c_str(),
                dict, 8.0 * static_cast<double>(r.bytes.size()) / (static_cast<double>(w) * h));
    std::printf("pairs searched, as a share of all (a floor: each segment's final best J known)\n");
    std::printf("%8s %14s %11s %11s %11s %11s %11s\n", "samples", "pairs", "rate order", "sum, each", "sum, warps",
                "rate, warps", "sum, walked");
    for (int n : {4, 8, 16}) {
      const Counts& c = search->counts[static_cast<size_t>(n)];
      if (c.total == 0) continue;
      std::printf("%8d %14.0f %10.1f%% %10.1f%% %10.1f%% %10.1f%% %10.1f%%\n", n, c.total, 100 * c.rate_order / c.total,
                  100 * c.sum_each / c.total, 100 * c.sum_warps / c.total, 100 * c.rate_warps / c.total,
                  100 * c.sum_walked / c.total);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vfpipe-mmp-pairs: %s\n", e.what());
    return 1;
  }
  return 0;
}
