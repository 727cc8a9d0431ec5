#include "codecs/mmp/dictionary.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/error.hpp"
#include "core/parallel.hpp"

namespace vfp::mmp {

namespace {
uint64_t next_id() {
  static std::atomic<uint64_t> n{0};
  return ++n;
}
}  // namespace

Dictionary::Dictionary(int max, int log, bool replace) : id_(next_id()), max_(max), log_(log), replace_(replace) {
  for (int lh = 0; lh <= log_; ++lh)
    for (int lw = 0; lw <= log_; ++lw) {
      Scale& sc = scales_[static_cast<size_t>(scale_of(lw, lh))];
      sc.size = 1 << (lw + lh);
      sc.few_words = (max_ + 63) / 64;
    }
  // Flat elements over the residue range, every 8 levels.
  std::vector<int16_t> flat;
  for (int lh = 0; lh <= log_; ++lh)
    for (int lw = 0; lw <= log_; ++lw)
      for (int v = -252; v <= 252; v += 8) {
        flat.assign(static_cast<size_t>(1) << (lw + lh), static_cast<int16_t>(v));
        insert(scale_of(lw, lh), flat.data());
      }
}

ScaleView Dictionary::view(int s) const {
  const Scale& sc = scales_[static_cast<size_t>(s)];
  ScaleView v{sc.count, sc.size, sc.data.data()};
  if (replace_)
    v.changes = sc.changes.data(), v.change_ring = change_ring(), v.generation = sc.generation, v.clock = sc.clock;
  return v;
}

void Dictionary::keep_sum_order() {
  for (Scale& sc : scales_) {
    if (sc.ordered) continue;
    sc.order.resize(static_cast<size_t>(sc.count));
    for (int i = 0; i < sc.count; ++i) sc.order[static_cast<size_t>(i)] = i;
    std::stable_sort(sc.order.begin(), sc.order.end(),
                     [&](int a, int b) { return sc.sum[static_cast<size_t>(a)] < sc.sum[static_cast<size_t>(b)]; });
    sc.ordered = true;
  }
}

void Dictionary::add(const Lesson& lesson) {
  if (device_) throw Error(ErrorKind::Internal, "MMP: a dictionary that learns on the GPU was asked to learn here");
  if (replace_)
    for (uint32_t u : lesson.uses) use(static_cast<int>(u >> 16), static_cast<int>(u & 0xFFFF));
  const auto& batch = lesson.elements;
  if (batch.empty()) return;
  const int n = log_ + 1;
  auto fill = [&](int lw2, int lh2) {
    const int s = scale_of(lw2, lh2);
    std::vector<int16_t> tmp(static_cast<size_t>(1) << (lw2 + lh2));
    for (const NewElement& ne : batch) {
      if (count(s) >= max_ && !replace_) return;
      if (ne.lw == lw2 && ne.lh == lh2) {
        insert(s, lesson.element(ne));
      } else {
        resize_into(lesson.element(ne), ne.lw, ne.lh, lw2, lh2, tmp.data());
        insert(s, tmp.data());
      }
    }
  };
  if (batch.size() < 4 || cpu_threads() == 1) {
    for (int i = 0; i < n * n; ++i) fill(i % n, i / n);
    return;
  }
  tbb::parallel_for(0, n * n, [&](int i) { fill(i % n, i / n); });
}

void Dictionary::use(int s, int i) {
  Scale& sc = scales_[static_cast<size_t>(s)];
  const uint32_t u = ++sc.uses[static_cast<size_t>(i)];
  if (i < kFlat) return;
  const int at = sc.old_at[static_cast<size_t>(i)];
  if (at == kInFew) {  // to the next bucket, or to the heap
    few_clear(sc, static_cast<int>(u) - 1, i);
    if (u < static_cast<uint32_t>(kFewUses))
      few_set(sc, static_cast<int>(u), i);
    else
      heap_push(sc, i);
  } else if (at >= 0) {
    old_down(sc, static_cast<size_t>(at));  // its key grew
  }
}

// The old enough elements with fewer than kFewUses uses: a bitset of indices per number of
// uses (the least index of the lowest non-empty bucket is their least (uses, index)), and
// each bucket's size.
void Dictionary::few_set(Scale& sc, int b, int i) {
  sc.few[static_cast<size_t>(b * sc.few_words + (i >> 6))] |= uint64_t{1} << (i & 63);
  if (sc.few_size[static_cast<size_t>(b)]++ == 0) sc.few_mask |= 1u << b;
  sc.old_at[static_cast<size_t>(i)] = kInFew;
}
void Dictionary::few_clear(Scale& sc, int b, int i) {
  sc.few[static_cast<size_t>(b * sc.few_words + (i >> 6))] &= ~(uint64_t{1} << (i & 63));
  if (--sc.few_size[static_cast<size_t>(b)] == 0) sc.few_mask &= ~(1u << b);
  sc.old_at[static_cast<size_t>(i)] = -1;
}

// The old enough elements' heap: a before b when it has fewer uses, or as many and a lower
// index (the element replaced first).
bool Dictionary::old_before(const Scale& sc, int a, int b) {
  const uint32_t ua = sc.uses[static_cast<size_t>(a)], ub = sc.uses[static_cast<size_t>(b)];
  return ua != ub ? ua < ub : a < b;
}
// Element i into the heap's place `at`, which it remembers.
void Dictionary::old_place(Scale& sc, size_t at, int i) {
  sc.old[at] = i;
  sc.old_at[static_cast<size_t>(i)] = static_cast<int>(at);
}
void Dictionary::old_up(Scale& sc, size_t at) {
  const int v = sc.old[at];
  while (at > 0) {
    const size_t parent = (at - 1) / 2;
    if (!old_before(sc, v, sc.old[parent])) break;
    old_place(sc, at, sc.old[parent]);
    at = parent;
  }
  old_place(sc, at, v);
}
void Dictionary::old_down(Scale& sc, size_t at) {
  const int v = sc.old[at];
  const size_t n = sc.old.size();
  for (;;) {
    size_t child = 2 * at + 1;
    if (child >= n) break;
    if (child + 1 < n && old_before(sc, sc.old[child + 1], sc.old[child])) ++child;
    if (!old_before(sc, sc.old[child], v)) break;
    old_place(sc, at, sc.old[child]);
    at = child;
  }
  old_place(sc, at, v);
}
void Dictionary::heap_push(Scale& sc, int i) {
  sc.old.push_back(i);
  old_up(sc, sc.old.size() - 1);
}
// Element i becomes old enough.
void Dictionary::old_push(Scale& sc, int i) {
  if (sc.few.empty()) sc.few.assign(static_cast<size_t>(kFewUses * sc.few_words), 0);
  const uint32_t u = sc.uses[static_cast<size_t>(i)];
  if (u < static_cast<uint32_t>(kFewUses))
    few_set(sc, static_cast<int>(u), i);
  else
    heap_push(sc, i);
}
// The old enough element of least (uses, index), taken out.
int Dictionary::old_pop(Scale& sc) {
  if (sc.few_mask) {
    const int b = __builtin_ctz(sc.few_mask);
    const uint64_t* w = sc.few.data() + static_cast<size_t>(b * sc.few_words);
    int k = 0;
    while (!w[k]) ++k;
    const int v = (k << 6) + __builtin_ctzll(w[k]);
    few_clear(sc, b, v);
    return v;
  }
  const int v = sc.old.front();
  sc.old_at[static_cast<size_t>(v)] = -1;
  sc.old.front() = sc.old.back();
  sc.old.pop_back();
  if (!sc.old.empty()) old_down(sc, 0);
  return v;
}

// Index i into the sum order, after the equal sums already there.
void Dictionary::order_insert(Scale& sc, int i) {
  const int sum = sc.sum[static_cast<size_t>(i)];
  sc.order.insert(std::upper_bound(sc.order.begin(), sc.order.end(), sum,
                                   [&](int v, int k) { return v < sc.sum[static_cast<size_t>(k)]; }),
                  i);
}

// Marks index i changed (the mirrors' log).
void Dictionary::changed(Scale& sc, int i) {
  if (!replace_) return;
  const size_t at = static_cast<size_t>(sc.generation % static_cast<uint64_t>(change_ring()));
  if (at == sc.changes.size())  // the ring grows to its size as the changes come
    sc.changes.push_back(i);
  else
    sc.changes[at] = i;
  ++sc.generation;
}

void Dictionary::insert(int s, const int16_t* e) {
  Scale& sc = scales_[static_cast<size_t>(s)];
  if (sc.count >= max_ && !replace_) return;
  const size_t n = static_cast<size_t>(sc.size);
  // The content hash only finds candidates (they are compared): any mixing will do. Four
  // samples a word, four independent words a step (a single chain of multiplies would
  // make the hash most of an insertion).
  uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
  int sum = 0;
  size_t k = 0;
  if (n >= 16) {
    uint64_t lane[4] = {h, h + 1, h + 2, h + 3};
    for (; k + 16 <= n; k += 16)
      for (int j = 0; j < 4; ++j) {
        uint64_t word;
        std::memcpy(&word, e + k + 4 * j, sizeof word);
        lane[j] = (lane[j] ^ word) * 0xFF51AFD7ED558CCDull;
        lane[j] ^= lane[j] >> 32;
      }
    h = ((lane[0] * 31 + lane[1]) * 31 + lane[2]) * 31 + lane[3];
  }
  for (; k + 4 <= n; k += 4) {
    uint64_t word;
    std::memcpy(&word, e + k, sizeof word);
    h = (h ^ word) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
  }
  for (; k < n; ++k) h = (h ^ static_cast<uint16_t>(e[k])) * 0xC4CEB9FE1A85EC53ull;
  h ^= h >> 29;
  for (k = 0; k < n; ++k) sum += e[k];
  if (2 * (static_cast<size_t>(sc.count) + 1) > sc.table.size()) {  // double the table
    std::vector<int> bigger(std::max<size_t>(64, 2 * sc.table.size()), 0);
    for (int i = 0; i < sc.count; ++i) {
      size_t at = sc.hash[static_cast<size_t>(i)] & (bigger.size() - 1);
      while (bigger[at]) at = (at + 1) & (bigger.size() - 1);
      bigger[at] = i + 1;
    }
    sc.table.swap(bigger);
  }
  const size_t mask = sc.table.size() - 1;
  size_t at = h & mask;
  for (; sc.table[at]; at = (at + 1) & mask) {
    const int i = sc.table[at] - 1;
    if (sc.hash[static_cast<size_t>(i)] == h && std::equal(e, e + n, elem(s, i))) return;
  }
  if (replace_) {
    const int v = tick(sc);
    if (v < 0) return;
    renew(sc, v);
    if (v < sc.count) {
      replace(sc, v, e, h, sum);
      return;
    }
  }
  const int idx = sc.count++;
  sc.table[at] = idx + 1;
  sc.hash.push_back(h);
  sc.data.insert(sc.data.end(), e, e + n);
  sc.sum.push_back(sum);
  if (sc.ordered) order_insert(sc, idx);
  changed(sc, idx);
}

// Element v (not in `old`) becomes e, of hash h and sum `sum`, with no uses, born now.
void Dictionary::replace(Scale& sc, int v, const int16_t* e, uint64_t h, int sum) {
  const size_t n = static_cast<size_t>(sc.size), mask = sc.table.size() - 1;
  // Out of the duplicate table: backward-shift deletion keeps every probe chain whole.
  size_t hole = sc.hash[static_cast<size_t>(v)] & mask;
  while (sc.table[hole] != v + 1) hole = (hole + 1) & mask;
  for (size_t j = (hole + 1) & mask; sc.table[j]; j = (j + 1) & mask) {
    const size_t home = sc.hash[static_cast<size_t>(sc.table[j] - 1)] & mask;
    // Entry j may move back to the hole unless its home lies cyclically in (hole, j].
    const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (!stays) sc.table[hole] = sc.table[j], hole = j;
  }
  sc.table[hole] = 0;
  size_t at = h & mask;
  while (sc.table[at]) at = (at + 1) & mask;
  sc.table[at] = v + 1;
  sc.hash[static_cast<size_t>(v)] = h;
  std::copy(e, e + n, sc.data.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(v) * n));
  if (sc.ordered) {  // out of the order under its old sum, back in under the new one
    const auto lo = std::lower_bound(sc.order.begin(), sc.order.end(), sc.sum[static_cast<size_t>(v)],
                                     [&](int i, int val) { return sc.sum[static_cast<size_t>(i)] < val; });
    sc.order.erase(std::find(lo, sc.order.end(), v));
  }
  sc.sum[static_cast<size_t>(v)] = sum;
  if (sc.ordered) order_insert(sc, v);
  changed(sc, v);
}

// A new element that is not a duplicate offered to a replacing scale: the clock ticks, the
// elements it makes old enough join the heap, and the element takes the index returned:
// `count` while there is room, else the least used old element (taken off the heap), or none
// (-1: dropped).
int Dictionary::tick(Scale& sc) {
  ++sc.clock;
  const uint64_t window = static_cast<uint64_t>((max_ - kFlat) / 2);
  while (sc.young_head < sc.young.size() && sc.born[static_cast<size_t>(sc.young[sc.young_head])] + window < sc.clock)
    old_push(sc, sc.young[sc.young_head++]);
  if (sc.young_head >= 64 && 2 * sc.young_head >= sc.young.size()) {  // the queue's dead front
    sc.young.erase(sc.young.begin(), sc.young.begin() + static_cast<std::ptrdiff_t>(sc.young_head));
    sc.young_head = 0;
  }
  if (sc.count < max_) return sc.count;
  return sc.few_mask == 0 && sc.old.empty() ? -1 : old_pop(sc);
}

// Index v (tick()'s answer) starts again: no uses, born now, young.
void Dictionary::renew(Scale& sc, int v) {
  if (v == sc.count) {
    sc.uses.push_back(0);
    sc.born.push_back(sc.clock);
    sc.old_at.push_back(-1);
  } else {
    sc.uses[static_cast<size_t>(v)] = 0;
    sc.born[static_cast<size_t>(v)] = sc.clock;
  }
  if (v >= kFlat) sc.young.push_back(v);
}

void Dictionary::add_decided(const std::vector<uint32_t>& uses, int n, const RoundVerdicts& verdicts,
                             std::vector<Placement>* out) {
  if (!replace_ || !device_)
    throw Error(ErrorKind::Internal, "MMP: only a replacing dictionary held on a device learns from verdicts");
  for (uint32_t u : uses) use(static_cast<int>(u >> 16), static_cast<int>(u & 0xFFFF));
  out->clear();
  if (n <= 0) return;
  const int sides = log_ + 1;
  std::atomic<bool> malformed{false};
  auto walk = [&](int lw, int lh) {
    const int s = scale_of(lw, lh);
    Scale& sc = scales_[static_cast<size_t>(s)];
    std::vector<Placement>& placed = sc.placed;
    placed.clear();
    const int64_t* v = verdicts.at(s);
    if (!v) {
      malformed = true;
      return;
    }
    // Each class of equal new elements (named by its first member) and the index that holds
    // its content now (-1: none); per index the class it holds for this round, whether it
    // lost the content it had when the round began, and where its last placement is.
    thread_local std::vector<int> holder, owner;
    thread_local std::vector<uint8_t> gone;
    thread_local std::vector<size_t> written;
    holder.resize(static_cast<size_t>(n));
    owner.assign(static_cast<size_t>(max_), -1);
    gone.assign(static_cast<size_t>(max_), 0);
    written.assign(static_cast<size_t>(max_), SIZE_MAX);
    const int count0 = sc.count;
    for (int j = 0; j < n; ++j) {
      const int was = RoundVerdicts::equal_before(v[j]), cls = RoundVerdicts::first_equal(v[j]);
      if (was >= count0 || cls < 0 || cls > j || (cls < j && RoundVerdicts::first_equal(v[cls]) != cls)) {
        malformed = true;
        return;
      }
      if (cls == j) {
        const bool there = was >= 0 && !gone[static_cast<size_t>(was)];
        holder[static_cast<size_t>(j)] = there ? was : -1;
        if (there) owner[static_cast<size_t>(was)] = j;
      }
      if (holder[static_cast<size_t>(cls)] >= 0) continue;  // a duplicate
      const int idx = tick(sc);
      if (idx < 0) continue;
      renew(sc, idx);
      const size_t at = static_cast<size_t>(idx);
      if (idx == sc.count) {
        ++sc.count;
      } else {
        if (owner[at] >= 0) holder[static_cast<size_t>(owner[at])] = -1;
        gone[at] = 1;
      }
      owner[at] = cls;
      holder[static_cast<size_t>(cls)] = idx;
      if (written[at] != SIZE_MAX) placed[written[at]].index = -1;  // written again: the last one counts
      written[at] = placed.size();
      placed.push_back({s, j, idx});
    }
  };
  // Scales are independent: in parallel, as in add().
  if (n < 4 || cpu_threads() == 1)
    for (int i = 0; i < sides * sides; ++i) walk(i % sides, i / sides);
  else
    tbb::parallel_for(0, sides * sides, [&](int i) { walk(i % sides, i / sides); });
  if (malformed) throw Error(ErrorKind::Gpu, "MMP: malformed duplicate verdicts from the device");
  for (int i = 0; i < sides * sides; ++i)
    for (const Placement& pl : scales_[static_cast<size_t>(scale_of(i % sides, i / sides))].placed)
      if (pl.index >= 0) out->push_back(pl);
}

// Sizes are powers of two: the index arithmetic is shifts, and floor((2 sum + k) / 2k) for
// k = 2^d is an arithmetic shift of 2 sum + k by d + 1 (it rounds toward minus infinity).
// Every new element is resized into every scale, so this is most of a dictionary update:
// the averaging loops are instantiated for each d (unrolled, vectorized), and a pass that
// keeps its size only copies. Samples and their averages stay within int16.
namespace {

template <int D>  // each output sample the rounded mean of 2^D neighbours in a row
void shrink_row(const int16_t* in, int n_out, int16_t* out) {
  constexpr int k = 1 << D;
  for (int x = 0; x < n_out; ++x) {
    int sum = 0;
    for (int i = 0; i < k; ++i) sum += in[x * k + i];
    out[x] = static_cast<int16_t>((2 * sum + k) >> (D + 1));
  }
}

template <int D>  // each output row the rounded mean of 2^D rows of w samples
void shrink_rows(const int16_t* in, int w, int h_out, int16_t* out) {
  constexpr int k = 1 << D;
  for (int y = 0; y < h_out; ++y) {
    const int16_t* r = in + static_cast<size_t>(y) * k * w;
    int16_t* o = out + static_cast<size_t>(y) * w;
    for (int x = 0; x < w; ++x) {
      int sum = 0;
      for (int i = 0; i < k; ++i) sum += r[i * w + x];
      o[x] = static_cast<int16_t>((2 * sum + k) >> (D + 1));
    }
  }
}

template <int S>  // each input sample repeated 2^S times
void widen_row(const int16_t* in, int n_in, int16_t* out) {
  constexpr int k = 1 << S;
  for (int x = 0; x < n_in; ++x)
    for (int i = 0; i < k; ++i) out[x * k + i] = in[x];
}

// fn(std::integral_constant<int, d>) for d in 1..5 (a shift of the scale transform), so
// that each loop is instantiated for its d.
template <typename Fn>
void with_shift(int d, Fn&& fn) {
  switch (d) {
    case 1:
      return fn(std::integral_constant<int, 1>{});
    case 2:
      return fn(std::integral_constant<int, 2>{});
    case 3:
      return fn(std::integral_constant<int, 3>{});
    case 4:
      return fn(std::integral_constant<int, 4>{});
    default:
      return fn(std::integral_constant<int, 5>{});
  }
}

// One row of 2^lw1 samples to 2^lw2.
void resize_row(const int16_t* in, int lw1, int lw2, int16_t* out) {
  const int w1 = 1 << lw1, w2 = 1 << lw2;
  if (lw2 == lw1)
    std::memcpy(out, in, sizeof(int16_t) * static_cast<size_t>(w1));
  else if (lw2 > lw1)
    with_shift(lw2 - lw1, [&](auto S) { widen_row<S>(in, w1, out); });
  else
    with_shift(lw1 - lw2, [&](auto D) { shrink_row<D>(in, w2, out); });
}

}  // namespace

void resize_into(const int16_t* e, int lw1, int lh1, int lw2, int lh2, int16_t* out) {
  const int w2 = 1 << lw2, h1 = 1 << lh1, h2 = 1 << lh2;
  const size_t row_bytes = sizeof(int16_t) * static_cast<size_t>(w2);
  // Rows first (into `out` itself when the height does not shrink), then columns.
  int16_t tmp[32 * 32];  // w2 x h1
  const int16_t* t = e;
  if (lw1 != lw2) {
    int16_t* rows = lh2 >= lh1 ? out : tmp;
    for (int y = 0; y < h1; ++y) resize_row(e + (static_cast<size_t>(y) << lw1), lw1, lw2, rows + y * w2);
    t = rows;
  }
  if (lh2 >= lh1) {
    // Row y of the output is row y >> s of t; from the last row up, as t may be `out` itself.
    const int s = lh2 - lh1;
    for (int y = h2 - 1; y >= 0; --y)
      if (t + (y >> s) * w2 != out + y * w2) std::memcpy(out + y * w2, t + (y >> s) * w2, row_bytes);
    return;
  }
  with_shift(lh1 - lh2, [&](auto D) { shrink_rows<D>(t, w2, h2, out); });
}

}  // namespace vfp::mmp
