// The MMP encoder's leaf search, the part of its work that grows with the dictionaries:
// for residues of one prediction unit (one per candidate mode), the dictionary element
// that codes each segment best at every scale, by J = SSE + lambda * (index bits + leaf
// flag bits), ties to the lower index. The encoder's segmentation choice (a small dynamic
// programme over the segments) and everything else follow from this table.
//
// The CPU search (in mmp.cpp) prunes by element sums; a LeafSearch backend (the CUDA one:
// cuda/mmp_search.hpp) may search differently, but must give the same table, bit for bit:
// the encoder's bytes do not depend on where the search ran. The arithmetic that makes
// this possible is fixed here: SSE is an exact integer, rate = lambda * (bits + leaf_bits)
// and J = double(SSE) + rate, each rounded once (no fused multiply-add).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>

namespace vfp::mmp {

constexpr int kSearchScales = 36;  // (log2 32 + 1)^2 element scales, s = lw + 6 * lh

// One scale of a dictionary as the search sees it: `count` elements of 2^lw x 2^lh
// samples, element i at data + i * size. Elements are only ever appended.
struct ScaleView {
  int count = 0, size = 0;
  const int16_t* data = nullptr;
};

struct LeafQuery {
  int L = 0;                      // unit size 2^L (2..5)
  int K = 0;                      // residues (candidate modes), 1..11
  const int* residues = nullptr;  // K residues of 2^L x 2^L, row-major, one after another
  uint64_t dict_id = 0;           // identifies the dictionary set (unique per process)
  std::array<ScaleView, kSearchScales> scales{};
  uint64_t costs_id = 0;                            // identifies `bits`: a new id whenever the index costs change
  std::array<const double*, kSearchScales> bits{};  // bits[s][i]: index i's cost at scale s
  std::array<double, kSearchScales> leaf_bits{};    // the leaf flag's cost at scale s (0 for 1x1)
  double lambda = 0;
};

// Where segment (ix, iy) of scale (lw, lh) of residue k lies in a leaf table: scales in
// order lh = 0..L, lw = 0..L within, segments row by row (ix + iy * (N >> lw)).
int leaf_scale_offset(int L, int lw, int lh);
int leaf_table_size(int L);  // entries per residue

class LeafSearch {
 public:
  virtual ~LeafSearch() = default;
  // Fills J[k * leaf_table_size(L) + offset] and index[...] for every residue, scale and
  // segment. Safe to call from several threads.
  virtual void search(const LeafQuery& q, double* J, int* index) = 0;
  virtual std::string name() const = 0;
  // Where the search's time went, one line ("" when there is nothing to say).
  virtual std::string stats() const { return ""; }
};

}  // namespace vfp::mmp
