// The parts of the DEFLATE encoder that the CPU reference (deflate.cpp) and the CUDA encoder
// (cuda/deflate.cu) share, compiled for both (VFP_HD): the hash, the match rules of each level,
// token and symbol coding, package-merge code lengths and the block header. One definition is
// what makes the two encoders byte-identical; docs/deflate.md describes the algorithm.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/hd.hpp"

namespace vfp::deflate::core {

constexpr int kWindow = 32768, kMaxMatch = 258, kMinMatch = 3, kHashBits = 13;
// Parse chunk: the GPU's unit of parallel parsing (one warp each; the parse of a segment is
// one sequential parse, which the GPU rebuilds from per-chunk speculative parses). Matches reach
// back anywhere in the segment (window 32 KiB).
constexpr uint32_t kChunk = 4096;
constexpr uint32_t kMaxSegment = 65536;  // positions fit 16 bits
constexpr int kNumLitLen = 286, kNumDist = 30, kNumSyms = kNumLitLen + kNumDist, kNumCl = 19;
constexpr int kEob = 256;
constexpr int kHeaderWords = 160;
// Segments share a block (one Huffman table) until the block holds about this many tokens
// (zlib's blocks hold 16 Ki symbols): segment s opens a block when the tokens before it cross
// a multiple of it. Compressible data gets few headers, varied data adaptive tables.
constexpr uint64_t kBlockTokens = 16384;
VFP_HD uint64_t block_of(uint64_t tokens_before) {
  return tokens_before / kBlockTokens;
}  // worst-case block header: 74 + 316 * 14 bits < 160 * 32

// How far before a segment its matches may start: the 32 KiB window, but never more than one
// segment back (so that, on the GPU, a segment needs only its own chains and the previous
// segment's last-occurrence table to know its history).
VFP_HD size_t history_bytes(size_t segment_begin, size_t segment_size) {
  size_t h = segment_begin < static_cast<size_t>(kWindow) ? segment_begin : static_cast<size_t>(kWindow);
  return h < segment_size ? h : segment_size;
}

struct LevelParams {
  int depth;     // chain candidates tried per position
  int nice;      // stop searching once a match this long is found
  bool lazy;     // emit a literal when the next position has a longer match
  int min_len;   // shorter matches are not used (3; 6 for filtered data, as zlib's Z_FILTERED)
  bool history;  // matches may start before the segment (history_bytes); level 1 keeps to it
};

// filtered: data that is mostly small residuals (PNG rows after their filter), where short
// matches cost more bits than the literals they replace.
VFP_HD LevelParams level_params(int level, bool filtered = false) {
  const int m = filtered ? 6 : 3;
  switch (level) {
    case 1:
      return {4, 32, false, m, false};
    case 2:
      return {4, 32, false, m, true};
    case 3:
      return {16, 128, false, m, true};
    case 4:
      return {16, 64, true, m, true};
    case 5:
      return {32, 128, true, m, true};
    case 6:
      return {64, 128, true, m, true};
    case 7:
      return {128, 258, true, m, true};
    case 8:
      return {512, 258, true, m, true};
    default:
      return {2048, 258, true, m, true};
  }
}

// The longest match found at a position is used only if it is long enough, and a 3-byte
// match only within 4 KiB (farther, its distance code costs more than 3 literals: zlib's
// TOO_FAR rule). Returns the length to use, 0 for none.
VFP_HD uint32_t accept_match(uint32_t len, uint32_t dist, const LevelParams& lp) {
  if (len < static_cast<uint32_t>(lp.min_len)) return 0;
  if (len == 3 && dist > 4096) return 0;
  return len;
}

// Hash of the 3 bytes at p (multiplicative, top kHashBits bits).
VFP_HD uint32_t hash3(uint32_t b0, uint32_t b1, uint32_t b2) {
  return (((b0 << 16) | (b1 << 8) | b2) * 2654435761u) >> (32 - kHashBits);
}

// Token: literal = its byte (bits 0..7); match = length << 16 | distance (length 3..258).
VFP_HD uint32_t make_literal(uint32_t byte) { return byte; }
VFP_HD uint32_t make_match(uint32_t len, uint32_t dist) { return (len << 16) | dist; }
VFP_HD uint32_t token_len(uint32_t t) { return t >> 16; }
VFP_HD uint32_t token_low(uint32_t t) { return t & 0xFFFFu; }

VFP_HD int popcount32(uint32_t v) {
#if defined(__CUDA_ARCH__)
  return __popc(v);
#else
  return __builtin_popcount(v);
#endif
}

VFP_HD int floor_log2(uint32_t v) {
  int r = 0;
  while (v >>= 1) ++r;
  return r;
}
// Length 3..258 -> code 0..28 (symbol 257 + code) and its extra bits.
VFP_HD int len_code(uint32_t len) {
  const uint32_t l = len - 3;
  if (l < 8) return static_cast<int>(l);
  if (l == 255) return 28;
  const int nb = floor_log2(l) - 2;
  return 4 * nb + 4 + static_cast<int>((l >> nb) & 3u);
}
VFP_HD int len_extra_bits(int code) { return (code < 8 || code == 28) ? 0 : (code - 4) / 4; }
VFP_HD uint32_t len_base(int code) {
  if (code < 8) return static_cast<uint32_t>(code) + 3;
  if (code == 28) return 258;
  const int nb = (code - 4) / 4;
  return 3 + ((4u + static_cast<uint32_t>(code & 3)) << nb);
}
// Distance 1..32768 -> code 0..29 and its extra bits.
VFP_HD int dist_code(uint32_t dist) {
  const uint32_t d = dist - 1;
  if (d < 4) return static_cast<int>(d);
  const int nb = floor_log2(d) - 1;
  return 2 * nb + 2 + static_cast<int>((d >> nb) & 1u);
}
VFP_HD int dist_extra_bits(int code) { return code < 4 ? 0 : (code - 2) / 2; }
VFP_HD uint32_t dist_base(int code) {
  if (code < 4) return static_cast<uint32_t>(code) + 1;
  const int nb = (code - 2) / 2;
  return 1 + ((2u + static_cast<uint32_t>(code & 1)) << nb);
}
// Extra bits of symbol s of the combined alphabet (0..285 literal/length, 286..315 distance).
VFP_HD int symbol_extra_bits(int s) {
  if (s < 257) return 0;
  if (s < kNumLitLen) return len_extra_bits(s - 257);
  return dist_extra_bits(s - kNumLitLen);
}

// Common prefix of a[0..] and b[0..], at most `limit` bytes.
VFP_HD uint32_t match_length(const uint8_t* a, const uint8_t* b, uint32_t limit) {
  uint32_t l = 0;
  while (l < limit && a[l] == b[l]) ++l;
  return l;
}

// Orders the used symbols of freq[0..n) by (frequency, symbol); returns how many there are.
VFP_HD int sort_symbols(const uint32_t* freq, int n, uint16_t* sorted) {
  int m = 0;
  for (int s = 0; s < n; ++s) {
    if (!freq[s]) continue;
    int i = m++;
    while (i > 0 && freq[sorted[i - 1]] > freq[s]) {
      sorted[i] = sorted[i - 1];
      --i;
    }
    sorted[i] = static_cast<uint16_t>(s);
  }
  return m;
}

struct MergeScratch {
  uint32_t weight[2][2 * kNumLitLen];
  uint32_t is_leaf[15][(2 * kNumLitLen + 31) / 32];
};

// Optimal code lengths of at most max_bits (<= 15) by package-merge, for the m used symbols
// `sorted` (ascending by (frequency, symbol)). len[] must be zero on entry. On equal weight a
// leaf goes before a package. One used symbol gets length 1.
VFP_HD void package_merge(const uint32_t* freq, const uint16_t* sorted, int m, int max_bits, uint8_t* len,
                          MergeScratch& s) {
  if (m == 0) return;
  if (m == 1) {
    len[sorted[0]] = 1;
    return;
  }
  int size = m;
  for (int i = 0; i < m; ++i) s.weight[0][i] = freq[sorted[i]];
  for (int level = 1; level < max_bits; ++level) {
    const uint32_t* prev = s.weight[(level - 1) & 1];
    uint32_t* cur = s.weight[level & 1];
    uint32_t* leaf_bits = s.is_leaf[level];
    for (int w = 0; w < (2 * kNumLitLen + 31) / 32; ++w) leaf_bits[w] = 0;
    const int pairs = size / 2;
    int a = 0, b = 0, k = 0;
    while (a < m || b < pairs) {
      const uint32_t pw = b < pairs ? prev[2 * b] + prev[2 * b + 1] : 0;
      if (b >= pairs || (a < m && freq[sorted[a]] <= pw)) {
        cur[k] = freq[sorted[a++]];
        leaf_bits[k >> 5] |= 1u << (k & 31);
      } else {
        cur[k] = pw;
        ++b;
      }
      ++k;
    }
    size = k;
  }
  // The first 2m-2 items of the last list: their leaves get one bit each; their packages
  // stand for the first 2p items of the list below.
  int take = 2 * m - 2;
  for (int level = max_bits - 1; level >= 0; --level) {
    int leaves = take;
    if (level > 0) {
      leaves = 0;
      const uint32_t* leaf_bits = s.is_leaf[level];
      for (int w = 0; w < (take >> 5); ++w) leaves += popcount32(leaf_bits[w]);
      if (take & 31) leaves += popcount32(leaf_bits[take >> 5] & ((1u << (take & 31)) - 1));
    }
    for (int i = 0; i < leaves; ++i) len[sorted[i]]++;
    take = 2 * (take - leaves);
  }
}

// Code lengths for the m used symbols `sorted` (ascending by (frequency, symbol)), at most
// max_bits: a Huffman code by Moffat and Katajainen's in-place algorithm (linear after the
// sort; on equal weights a leaf is taken before an internal node), and package-merge only
// when that code is deeper than max_bits (rare in 64 KiB segments). Both CPU and GPU call it.
VFP_HD void code_lengths(const uint32_t* freq, const uint16_t* sorted, int m, int max_bits, uint8_t* len,
                         MergeScratch& s) {
  if (m <= 2) {
    for (int i = 0; i < m; ++i) len[sorted[i]] = 1;
    return;
  }
  uint32_t* a = s.weight[0];
  for (int i = 0; i < m; ++i) a[i] = freq[sorted[i]];
  // Internal nodes' weights, then parent pointers.
  a[0] += a[1];
  int root = 0, leaf = 2;
  for (int next = 1; next < m - 1; ++next) {
    if (leaf >= m || a[root] < a[leaf]) {
      a[next] = a[root];
      a[root++] = static_cast<uint32_t>(next);
    } else {
      a[next] = a[leaf++];
    }
    if (leaf >= m || (root < next && a[root] < a[leaf])) {
      a[next] += a[root];
      a[root++] = static_cast<uint32_t>(next);
    } else {
      a[next] += a[leaf++];
    }
  }
  // Depths of the internal nodes, then of the leaves.
  a[m - 2] = 0;
  for (int next = m - 3; next >= 0; --next) a[next] = a[a[next]] + 1;
  int avail = 1, used = 0, depth = 0, next = m - 1;
  root = m - 2;
  while (avail > 0) {
    while (root >= 0 && a[root] == static_cast<uint32_t>(depth)) {
      ++used;
      --root;
    }
    while (avail > used) {
      a[next--] = static_cast<uint32_t>(depth);
      --avail;
    }
    avail = 2 * used;
    ++depth;
    used = 0;
  }
  if (a[0] > static_cast<uint32_t>(max_bits)) {  // the rarest symbol is the deepest
    package_merge(freq, sorted, m, max_bits, len, s);
    return;
  }
  for (int i = 0; i < m; ++i) len[sorted[i]] = static_cast<uint8_t>(a[i]);
}

VFP_HD uint32_t reverse_bits(uint32_t code, int len) {
  uint32_t r = 0;
  for (int i = 0; i < len; ++i) r |= ((code >> i) & 1u) << (len - 1 - i);
  return r;
}

// Canonical codes (RFC 1951 3.2.2), bit-reversed because DEFLATE writes bits LSB first.
VFP_HD void canonical_codes(const uint8_t* len, int n, uint16_t* code) {
  int count[16] = {0};
  for (int s = 0; s < n; ++s) count[len[s]]++;
  count[0] = 0;
  uint32_t next[16] = {0}, c = 0;
  for (int b = 1; b < 16; ++b) {
    c = (c + static_cast<uint32_t>(count[b - 1])) << 1;
    next[b] = c;
  }
  for (int s = 0; s < n; ++s) code[s] = len[s] ? static_cast<uint16_t>(reverse_bits(next[len[s]]++, len[s])) : 0;
}

// LSB-first bit writer into zeroed 32-bit words.
struct BitBuf {
  uint32_t* words;
  uint32_t pos;
  VFP_HD void put(uint32_t bits, int n) {
    if (n == 0) return;
    const uint32_t w = pos >> 5, o = pos & 31;
    words[w] |= bits << o;
    if (o + static_cast<uint32_t>(n) > 32) words[w + 1] |= bits >> (32 - o);
    pos += static_cast<uint32_t>(n);
  }
};

// A segment's dynamic-Huffman block: code lengths and codes of the combined alphabet and the
// header bits (BFINAL, BTYPE, HLIT/HDIST/HCLEN, code-length code, run-length coded lengths).
struct BlockCode {
  uint8_t len[kNumSyms];
  uint16_t code[kNumSyms];
  uint32_t header[kHeaderWords];
  uint32_t header_bits;
};

// Order in which the code-length code's lengths are sent (RFC 1951 3.2.7).
VFP_HD int cl_order(int i) {
  constexpr int order[kNumCl] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};
  return order[i];
}

// Header of a block whose lengths ll (286 entries) / dl (30) are set in bc.len. The
// code-length alphabet's lengths come from code_lengths (7 bits) over the run-length symbols.
// make_codes: also fill bc.code (the GPU computes them in parallel instead).
VFP_HD void build_header(BlockCode& bc, bool final, MergeScratch& scratch, bool make_codes = true) {
  const uint8_t* ll = bc.len;
  const uint8_t* dl = bc.len + kNumLitLen;
  int hlit = kNumLitLen, hdist = kNumDist;
  while (hlit > 257 && ll[hlit - 1] == 0) --hlit;
  while (hdist > 1 && dl[hdist - 1] == 0) --hdist;
  const int total = hlit + hdist;
  auto length_at = [&](int i) -> uint8_t { return i < hlit ? ll[i] : dl[i - hlit]; };
  // Run-length symbols (value | extra << 8), counted then written.
  uint16_t rle[kNumSyms];
  int nrle = 0;
  for (int i = 0; i < total;) {
    const uint8_t v = length_at(i);
    int run = 1;
    while (i + run < total && length_at(i + run) == v) ++run;
    int left = run;
    if (v == 0) {
      while (left >= 11) {
        const int k = left < 138 ? left : 138;
        rle[nrle++] = static_cast<uint16_t>(18 | ((k - 11) << 8));
        left -= k;
      }
      if (left >= 3) {
        rle[nrle++] = static_cast<uint16_t>(17 | ((left - 3) << 8));
        left = 0;
      }
    } else {
      rle[nrle++] = v;
      --left;
      while (left >= 3) {
        const int k = left < 6 ? left : 6;
        rle[nrle++] = static_cast<uint16_t>(16 | ((k - 3) << 8));
        left -= k;
      }
    }
    while (left-- > 0) rle[nrle++] = v;
    i += run;
  }
  uint32_t cf[kNumCl] = {0};
  for (int i = 0; i < nrle; ++i) cf[rle[i] & 0xFF]++;
  uint16_t sorted[kNumCl];
  const int m = sort_symbols(cf, kNumCl, sorted);
  uint8_t cl[kNumCl] = {0};
  code_lengths(cf, sorted, m, 7, cl, scratch);
  uint16_t cc[kNumCl];
  canonical_codes(cl, kNumCl, cc);
  int hclen = kNumCl;
  while (hclen > 4 && cl[cl_order(hclen - 1)] == 0) --hclen;

  for (int w = 0; w < kHeaderWords; ++w) bc.header[w] = 0;
  BitBuf b{bc.header, 0};
  b.put(final ? 1 : 0, 1);
  b.put(2, 2);  // dynamic Huffman
  b.put(static_cast<uint32_t>(hlit - 257), 5);
  b.put(static_cast<uint32_t>(hdist - 1), 5);
  b.put(static_cast<uint32_t>(hclen - 4), 4);
  for (int i = 0; i < hclen; ++i) b.put(cl[cl_order(i)], 3);
  for (int i = 0; i < nrle; ++i) {
    const int sym = rle[i] & 0xFF, extra = rle[i] >> 8;
    b.put(cc[sym], cl[sym]);
    if (sym == 16) b.put(static_cast<uint32_t>(extra), 2);
    if (sym == 17) b.put(static_cast<uint32_t>(extra), 3);
    if (sym == 18) b.put(static_cast<uint32_t>(extra), 7);
  }
  bc.header_bits = b.pos;
  if (!make_codes) return;
  canonical_codes(ll, kNumLitLen, bc.code);
  canonical_codes(dl, kNumDist, bc.code + kNumLitLen);
}

// Lengths of both alphabets from a segment's histogram (hist[256], the end-of-block symbol,
// must be 1) given each alphabet's sorted used symbols; a block without matches still gets
// one distance code (inflate wants at least one).
VFP_HD void finish_distance_lengths(BlockCode& bc) {
  uint8_t* dl = bc.len + kNumLitLen;
  bool any = false;
  for (int i = 0; i < kNumDist; ++i) any = any || dl[i] != 0;
  if (!any) dl[0] = 1;
}

// Bits of one token under a block's codes, and the token's bit pattern (LSB first, <= 48 bits).
VFP_HD uint32_t token_bits(const BlockCode& bc, uint32_t t, uint64_t* pattern) {
  const uint32_t len = token_len(t);
  if (len == 0) {
    const uint32_t s = token_low(t);
    *pattern = bc.code[s];
    return bc.len[s];
  }
  const int lc = len_code(len), dc = dist_code(token_low(t));
  const int ls = 257 + lc, ds = kNumLitLen + dc;
  uint64_t p = bc.code[ls];
  uint32_t n = bc.len[ls];
  const int le = len_extra_bits(lc);
  p |= static_cast<uint64_t>(len - len_base(lc)) << n;
  n += static_cast<uint32_t>(le);
  p |= static_cast<uint64_t>(bc.code[ds]) << n;
  n += bc.len[ds];
  p |= static_cast<uint64_t>(token_low(t) - dist_base(dc)) << n;
  n += static_cast<uint32_t>(dist_extra_bits(dc));
  *pattern = p;
  return n;
}

}  // namespace vfp::deflate::core
