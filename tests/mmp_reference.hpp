// The leaf search by its definition (codecs/mmp/search.hpp): every element tried, with the
// arithmetic the header fixes. Any LeafSearch backend must give its table; the encoder's
// bytes must not change when it is plugged in.
#pragma once
#include <atomic>
#include <cstdint>
#include <limits>
#include <string>

#include "codecs/mmp/search.hpp"

namespace vfp::test {

class ExhaustiveSearch final : public mmp::LeafSearch {
 public:
  void search(const mmp::LeafQuery& q, double* J, int* index) override {
    ++calls;
    const int N = 1 << q.L, table = mmp::leaf_table_size(q.L);
    for (int k = 0; k < q.K; ++k)
      for (int lh = 0; lh <= q.L; ++lh)
        for (int lw = 0; lw <= q.L; ++lw) {
          const int s = lw + 6 * lh, w = 1 << lw, h = 1 << lh;
          const mmp::ScaleView& v = q.scales[static_cast<size_t>(s)];
          for (int iy = 0; iy < N >> lh; ++iy)
            for (int ix = 0; ix < N >> lw; ++ix) {
              double bj = std::numeric_limits<double>::infinity();
              int bi = -1;
              for (int i = 0; i < v.count; ++i) {
                int64_t sse = 0;
                for (int y = 0; y < h; ++y)
                  for (int x = 0; x < w; ++x) {
                    const int d =
                        q.residues[k * N * N + (iy * h + y) * N + ix * w + x] - v.data[i * v.size + y * w + x];
                    sse += d * d;
                  }
                const double j = static_cast<double>(sse) +
                                 q.lambda * (q.bits[static_cast<size_t>(s)][i] + q.leaf_bits[static_cast<size_t>(s)]);
                if (j < bj) bj = j, bi = i;
              }
              const int at = k * table + mmp::leaf_scale_offset(q.L, lw, lh) + ix + iy * (N >> lw);
              J[at] = bj;
              index[at] = bi;
            }
        }
  }
  std::string name() const override { return "exhaustive"; }
  std::atomic<int64_t> calls{0};
};

}  // namespace vfp::test
