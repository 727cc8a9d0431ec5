// MMP's multiscale dictionaries (docs/mmp.md, "Dictionaries"): one per element scale
// 2^lw x 2^lh, each starting with 64 flat elements and learning the concatenations its
// blocks code. The encoder, the decoder and (through ScaleView) the search backends share
// this one implementation of the update rule.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "codecs/mmp/mmp.hpp"
#include "codecs/mmp/search.hpp"

namespace vfp::mmp {

// Scales are bounded by the largest block (32x32: 36 scales); a plane uses the scales up to
// its block's size.
constexpr int kScales = (kMaxBlockLog + 1) * (kMaxBlockLog + 1);
inline int scale_of(int lw, int lh) { return lw + (kMaxBlockLog + 1) * lh; }

// The scale transform of a 2^lw1 x 2^lh1 element into `out` (2^lw2 x 2^lh2;
// resize_element()'s arithmetic).
void resize_into(const int16_t* e, int lw1, int lh1, int lw2, int lh2, int16_t* out);

// A new dictionary element: the concatenation of a coded segment's children, of scale
// (lw, lh). It enters its own scale and, resized, every other one.
struct NewElement {
  size_t at = 0;  // its samples in Lesson::samples, 2^lw x 2^lh row by row
  int lw = 0, lh = 0;
};

// What one block (untiled, independent tiles) or one round (synchronized tiles) teaches the
// dictionaries: its new elements in order, and the leaves it coded (scale << 16 | index),
// which count as uses of those elements when a full scale replaces its least used.
// The samples of all its elements share one array, kept allocated from lesson to lesson.
struct Lesson {
  std::vector<NewElement> elements;
  std::vector<int16_t> samples;
  std::vector<uint32_t> uses;
  // A new element of 2^lw x 2^lh samples, to fill at once (the next add() may move it).
  int16_t* add(int lw, int lh) {
    elements.push_back({samples.size(), lw, lh});
    samples.resize(samples.size() + (size_t{1} << (lw + lh)));
    return samples.data() + elements.back().at;
  }
  const int16_t* element(const NewElement& ne) const { return samples.data() + ne.at; }
  void clear() { elements.clear(), samples.clear(), uses.clear(); }
};

// The dictionaries of one plane (or of one independent tile). Exact duplicates are not
// inserted. A full scale takes no more, or with `replace` (Params::replace_least_used) a
// new element takes the index of the learnt element (index >= 64) used least often among
// those old enough, ties to the lower index, with no uses: an element is old enough when
// more than (size - 64) / 2 newer elements were offered to its scale since it came (the
// scale's clock, advanced by every new element that is not a duplicate, stored or not).
// Uses count every time an index is coded as a leaf; a lesson's uses count before its
// elements enter. Without an old enough element the new one is dropped.
// A scale's elements lie in one array (element i at i * size). Each scale also keeps its
// element sums and, once keep_sum_order() asked for it, its indices ordered by sum, which
// the CPU encoder's search uses to skip elements that cannot win (the decoder and the GPU
// encoder do without: keeping the order is a memmove per insertion).
class Dictionary {
 public:
  static constexpr int kFlat = 64;  // the flat elements every scale starts with (never replaced)
  // `max` elements per scale (64..4096), scales up to 2^log x 2^log.
  Dictionary(int max, int log, bool replace);
  int count(int s) const { return scales_[static_cast<size_t>(s)].count; }
  uint64_t id() const { return id_; }
  ScaleView view(int s) const;
  const int16_t* elem(int s, int i) const {
    const Scale& sc = scales_[static_cast<size_t>(s)];
    return sc.data.data() + static_cast<size_t>(i) * static_cast<size_t>(sc.size);
  }
  // Times element i of scale s was coded as a leaf since it came (0 without replacement).
  uint32_t uses(int s, int i) const {
    return replace_ ? scales_[static_cast<size_t>(s)].uses[static_cast<size_t>(i)] : 0;
  }
  const std::vector<int>& sums(int s) const { return scales_[static_cast<size_t>(s)].sum; }
  const std::vector<int>& by_sum(int s) const { return scales_[static_cast<size_t>(s)].order; }
  // Orders every scale's indices by sum, and keeps them ordered from then on. Not safe
  // while another thread reads the dictionary.
  void keep_sum_order();
  // The lesson's uses, then its new elements in order, each into its own scale and resized
  // into every other. Scales are independent, so they are filled in parallel; the result is
  // the serial one.
  void add(const Lesson& lesson);
  // A round's lesson for a dictionary held on a device that searches and stores its elements
  // there (LeafSearch::round_verdicts()): the lesson's uses, then its n new elements, whose
  // duplicates the device found (`verdicts`), each into every scale by add()'s rule. The
  // elements' contents stay on the device; this copy keeps the counts, uses and ages, and
  // says in `out` where each element that enters goes (one placement an index: an index a
  // round writes twice keeps the later element).
  void add_decided(const std::vector<uint32_t>& uses, int n, const RoundVerdicts& verdicts,
                   std::vector<Placement>* out);
  // The device's handle where a search backend holds this dictionary
  // (LeafSearch::hold_dictionary()): the backend's copy holds the elements from then on, and
  // this one only their counts, uses and ages (add() throws; add_decided() learns; the
  // samples stay those the backend took). The handle keeps the backend's copy alive as long
  // as this dictionary.
  void hold_on_device(std::shared_ptr<void> handle) { device_ = std::move(handle); }
  bool held_on_device() const { return device_ != nullptr; }
  const std::shared_ptr<void>& device_handle() const { return device_; }
  // True while no element beyond the flat ones came.
  bool fresh() const {
    for (const Scale& sc : scales_)
      if (sc.count > kFlat) return false;
    return true;
  }
  int64_t total() const {
    int64_t t = 0;
    for (const Scale& sc : scales_) t += sc.count;
    return t;
  }

 private:
  // Old enough elements with fewer uses than this sit in bitsets (Scale::few), the others in
  // a heap; kInFew marks the former in Scale::old_at.
  static constexpr int kFewUses = 32, kInFew = -2;
  static_assert(kFewUses <= 32, "one bit of few_mask a bitset");
  struct Scale {
    int size = 1, count = 0;
    std::vector<int16_t> data;
    std::vector<int> sum, order;
    bool ordered = false;  // `order` is kept
    // The duplicate check: each element's content hash, and an open-addressed table (linear
    // probing) of element index + 1 (0: empty) by hash, at most half full.
    std::vector<uint64_t> hash;
    std::vector<int> table;
    // With replacement: each element's uses and birth (clock reading); the learnt elements
    // not yet old enough, in birth order (a queue from young_head), and the old enough ones:
    // those of fewer than kFewUses uses in bitsets by uses (few_set()), the others in a
    // binary min-heap by (uses, index), with each element's place (-1: not old enough,
    // kInFew: in a bitset, else its place in the heap). Flat arrays: every round changes
    // them on the pool's threads, and a tree's nodes allocated on one thread and freed on
    // another cost more than the update.
    std::vector<uint32_t> uses;
    std::vector<uint64_t> born;
    uint64_t clock = 0;
    std::vector<int> young;
    size_t young_head = 0;
    std::vector<int> old, old_at;
    int few_words = 0;          // 64-bit words a bitset
    std::vector<uint64_t> few;  // kFewUses bitsets of few_words
    std::array<int, kFewUses> few_size{};
    uint32_t few_mask = 0;  // the non-empty bitsets
    // With replacement, every write (an element appended or replaced) in order, for mirrors
    // of the dictionary (ScaleView::changes).
    std::vector<int> changes;
    uint64_t generation = 0;
    std::vector<Placement> placed;  // add_decided()'s, kept allocated from round to round
  };
  // Enough for the changes of a round of many tiles between two syncs of a mirror (a mirror
  // that falls further behind copies the whole scale again).
  int change_ring() const { return std::max(2 * max_, 4096); }
  void use(int s, int i);
  static void few_set(Scale& sc, int b, int i);
  static void few_clear(Scale& sc, int b, int i);
  static void heap_push(Scale& sc, int i);
  static bool old_before(const Scale& sc, int a, int b);
  static void old_place(Scale& sc, size_t at, int i);
  static void old_up(Scale& sc, size_t at);
  static void old_down(Scale& sc, size_t at);
  static void old_push(Scale& sc, int i);
  static int old_pop(Scale& sc);
  int tick(Scale& sc);
  void renew(Scale& sc, int v);
  void insert(int s, const int16_t* e);
  void replace(Scale& sc, int v, const int16_t* e, uint64_t h, int sum);
  static void order_insert(Scale& sc, int i);
  void changed(Scale& sc, int i);
  uint64_t id_;
  int max_, log_;
  bool replace_;
  std::array<Scale, kScales> scales_;
  std::shared_ptr<void> device_;
};

}  // namespace vfp::mmp
