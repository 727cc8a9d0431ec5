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
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "codecs/mmp/device_code.hpp"

namespace vfp::mmp {

struct PostFilter;

constexpr int kSearchScales = 36;  // (log2 32 + 1)^2 element scales, s = lw + 6 * lh

// One scale of a dictionary as the search sees it: `count` elements of 2^lw x 2^lh
// samples, element i at data + i * size. Elements are only ever appended, unless the
// dictionary replaces its least used elements when full (Params::replace_least_used): then
// `changes` logs every write, appended or replaced: change g (from 0) wrote element
// changes[g % change_ring], and `generation` changes were made so far (a copy that saw
// generation g0 with generation - g0 <= change_ring needs only those elements again).
struct ScaleView {
  int count = 0, size = 0;
  const int16_t* data = nullptr;
  const int* changes = nullptr;  // null: appended only
  int change_ring = 0;
  uint64_t generation = 0;
  // A replacing dictionary's clock (Dictionary's: new elements offered that were not
  // duplicates), which a backend that learns needs to age the elements as the host does.
  uint64_t clock = 0;
};

// What a backend that holds a replacing dictionary found about a round's new elements
// (LeafSearch::round_verdicts()), for Dictionary::add_decided(): for each scale s and new
// element j (in the order of the round's lesson), at(s)[j] packs the index of the element
// equal to it that the scale held when the round began (-1: none) and the first of the
// round's new elements equal to it at that scale (j itself when none comes before it).
struct RoundVerdicts {
  std::array<const int64_t*, kSearchScales> scales{};
  const int64_t* at(int s) const { return scales[static_cast<size_t>(s)]; }
  VFP_MMP_HD static constexpr int64_t pack(int equal_before, int first_equal) {
    return static_cast<int64_t>(first_equal) << 32 | static_cast<uint32_t>(equal_before);
  }
  static constexpr int equal_before(int64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(v)); }
  static constexpr int first_equal(int64_t v) { return static_cast<int>(v >> 32); }
};
// Where a new element goes: element j of the round at scale s into index `index`.
struct Placement {
  int s = 0, j = 0, index = 0;
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
VFP_MMP_HD inline int leaf_scale_offset(int L, int lw, int lh) {
  // Scales before (lw, lh): whole rows lh' < lh (each sum over lw' of N >> lw' = 2N - 1
  // segments wide, N >> lh' high), then lw' < lw in row lh; the geometric sums in closed
  // form (sum over b < k of N >> b = 2N - 2 (N >> k) for k <= L).
  const int N = 1 << L;
  return (2 * N - 1) * (2 * N - 2 * (N >> lh)) + (N >> lh) * (2 * N - 2 * (N >> lw));
}
VFP_MMP_HD inline int leaf_table_size(int L) { return ((2 << L) - 1) * ((2 << L) - 1); }  // entries per residue

// One block's whole search, for a backend that runs it where the dictionaries live (the
// GPU): the encoder's choices for the block (the prediction tree, each unit's mode and
// segmentation) as BlockSearch::area() in mmp.cpp makes them, from the state at the block's
// start. Every cost the search adds is given here as the CPU computes it, so that the
// backend only repeats the same sums (each product and sum rounded once, never fused).
struct BlockQuery {
  int block_log = 4;     // the block is 2^block_log square
  int candidates = 4;    // modes searched fully per unit (Params::mode_candidates, 1..11)
  int min_unit_log = 2;  // the smallest prediction unit is 2^min_unit_log (Params::min_unit), 2..block_log
  double lambda = 0;
  int bx = 0, by = 0;             // the block's corner in its tile
  int W = 0, H = 0;               // the tile's size (multiples of the block size)
  const uint8_t* src = nullptr;   // the tile's source samples, W x H
  const uint8_t* rec = nullptr;   // the tile's decoded samples so far, W x H
  const uint8_t* done = nullptr;  // 1 where rec is decoded
  uint64_t dict_id = 0;
  std::array<ScaleView, kSearchScales> scales{};
  // The index models (12-bit trees of 11-bit probabilities of a 0, entry 0 unused) of every
  // scale the block uses; the backend derives each index's cost from them (root first).
  std::array<const uint16_t*, kSearchScales> index_probs{};
  // Equal stamps of a scale (from any two queries of the process) mean equal index models;
  // 0: unknown. A backend that keeps the models uploads only the scales whose stamp moved.
  std::array<uint64_t, kSearchScales> index_stamp{};
  std::array<double, kSearchScales> leaf_bits{};                // the leaf flag's cost (0 for 1x1)
  std::array<double, kSearchScales> split_bits{};               // the split flag's cost (0 for 1x1)
  std::array<std::array<double, 2>, kSearchScales> dir_bits{};  // left|right, top/bottom
  double mode_bits[4][11] = {};                                 // [L - 2][mode]: a mode's cost in a unit of 2^L
  double psplit_bits[3][2] = {};  // [L - 3][split]: the prediction-tree flag of a 2^L area
  // Learning on the backend. In search_round() (learns_rounds()): the round's new elements
  // and uses go into the backend's copy of a held dictionary (hold_dictionary()), which is
  // then the dictionary. In start_block() (learns_blocks()), for a dictionary only this
  // caller changes that stops when full:
  // `learn` asks the backend to add the block's new elements to its copy of the dictionary
  // itself (Dictionary::add()'s rule, up to max_elements a scale); `pending` says that the
  // caller has not yet added the previous block's to its own (`scales` is the dictionary
  // before them; the backend's copy, which learnt them, is used and checked against it).
  bool learn = false, pending = false;
  int max_elements = 4096;
  // The backend's lane (its stream and buffers) the block runs in: -1, the calling thread's;
  // otherwise one of the lanes the caller reserved (LeafSearch::reserve_lanes()), so that one
  // thread can have several blocks in flight and another can finish them.
  int lane = -1;
  // Where the backend also adds the block's device time in ns (one encode's share, when
  // several encodes share the backend); null: only the backend's total.
  std::atomic<int64_t>* device_ns = nullptr;
};

// A block of a round searched at once (LeafSearch::search_round()): what differs from the
// round's other blocks, its place and its tile (BlockQuery's fields of the same names).
struct RoundBlock {
  int bx = 0, by = 0, W = 0, H = 0;
  const uint8_t* src = nullptr;
  const uint8_t* rec = nullptr;
  const uint8_t* done = nullptr;
};

// The block's choices, areas in pre-order (Z order): an area larger than 4x4 starts with
// its split flag (0 or 1); a split area is followed by its four quarters; an unsplit one by
// its unit: the mode, the number of nodes, then the segmentation tree's nodes in pre-order
// as kind << 16 | index (kind 0 leaf, 1 left|right, 2 top/bottom). `recon` is the block's
// reconstruction, row by row.
struct BlockChoices {
  std::vector<int32_t> code;
  std::vector<uint8_t> recon;
};

class LeafSearch {
 public:
  virtual ~LeafSearch() = default;
  // Fills J[k * leaf_table_size(L) + offset] and index[...] for every residue, scale and
  // segment. Safe to call from several threads.
  virtual void search(const LeafQuery& q, double* J, int* index) = 0;
  virtual std::string name() const = 0;
  // True if the backend searches whole blocks: the encoder then searches every block with
  // start_block() and finish_block() instead of search() for every unit (only then;
  // backends that return true override them). A thread finishes its block before it starts
  // another; between the two it may do other work (the backend searches meanwhile).
  virtual bool searches_blocks() const { return false; }
  virtual void start_block(const BlockQuery& q) { (void)q; }
  // `lane`: the query's BlockQuery::lane.
  virtual void finish_block(BlockChoices* out, int lane) { (void)out, (void)lane; }
  void search_block(const BlockQuery& q, BlockChoices* out) {
    start_block(q);
    finish_block(out, q.lane);
  }
  // Lanes for blocks in flight from any thread (BlockQuery::lane): the first of n lanes the
  // caller holds until release_lanes(first, n), or -1 where the backend has none (blocks
  // then run in the calling thread's lane, one at a time).
  virtual int reserve_lanes(int n) {
    (void)n;
    return -1;
  }
  virtual void release_lanes(int first, int n) { (void)first, (void)n; }
  // A round of synchronized tiles searched at once, each kernel launched once for all its
  // blocks: n blocks (1..round_capacity()) that share the dictionary, the models and the
  // parameters, given once in `shared` (its position, tile and lane are not used; learning
  // is not asked for), each in its own tile. out[i] gets block i's choices, as
  // search_block() would give them. Safe to call from several threads.
  virtual int round_capacity() const { return 0; }  // 0: no round search
  virtual void search_round(const BlockQuery& shared, const RoundBlock* blocks, int n, BlockChoices* out) {
    (void)shared, (void)blocks, (void)n, (void)out;
  }
  // The plane's post-filter designed and applied where the backend's device is: exactly
  // design_post_filter()'s filter and output (postfilter.hpp), or false where the backend
  // has no such device (the caller then designs it on the CPU). Safe to call from several
  // threads.
  virtual bool design_post_filter(const uint8_t* rec, const uint8_t* orig, int w, int h, double lambda, PostFilter* f,
                                  uint8_t* out) {
    (void)rec, (void)orig, (void)w, (void)h, (void)lambda, (void)f, (void)out;
    return false;
  }
  // Rounds that learn on the backend (synchronized tiles with shared models, a dictionary
  // that replaces its least used): true if search_round() with `shared.learn` also finds
  // the duplicates of the round's new elements in the backend's copy of the dictionary
  // (round_verdicts()), which stores them where the caller's Dictionary::add_decided() says
  // (place_round()), so that the host never touches the elements' samples. The caller first
  // takes the dictionary's handle (hold_dictionary()); from then on the backend's copy holds
  // the contents and the caller's Dictionary only the counts, uses and ages (it keeps the
  // handle: Dictionary::held_on_device()).
  virtual bool learns_rounds() const { return false; }
  // The backend's copy of dictionary `dict_id` made the one that learns: a handle that keeps
  // it alive (the caller's Dictionary holds it). The caller's dictionary must not have
  // learnt anything yet (only its flat elements) unless the backend holds it already.
  virtual std::shared_ptr<void> hold_dictionary(uint64_t dict_id) {
    (void)dict_id;
    return nullptr;
  }
  // The verdicts on the last round of a held dictionary (`held`: its handle from
  // hold_dictionary()), once the device has them, and its number of new elements; valid until
  // the dictionary's next round.
  virtual RoundVerdicts round_verdicts(const std::shared_ptr<void>& held, int* n_elements) {
    (void)held;
    *n_elements = 0;
    return {};
  }
  // The round's elements into the held dictionary where add_decided() put them, before the
  // dictionary's next round.
  virtual void place_round(const std::shared_ptr<void>& held, const std::vector<Placement>& placements) {
    (void)held, (void)placements;
  }
  // True if the backend can learn a block's new elements itself (BlockQuery::learn).
  virtual bool learns_blocks() const { return false; }
  // Where the search's time went, one line ("" when there is nothing to say).
  virtual std::string stats() const { return ""; }
  // The device time of every search so far, in seconds (0 for a search on the CPU).
  virtual double device_seconds() const { return 0; }
};

}  // namespace vfp::mmp
