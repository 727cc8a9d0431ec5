#include "pipeline/deflate/deflate.hpp"

#include <algorithm>
#include <array>

namespace vfp::deflate {

namespace {

constexpr int kLenBase[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                              31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
constexpr int kLenExtra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
constexpr int kDistBase[30] = {1,   2,   3,   4,   5,   7,    9,    13,   17,   25,   33,   49,   65,    97,    129,
                               193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
constexpr int kDistExtra[30] = {0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};
constexpr int kClOrder[19] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};
constexpr int kWindow = 32768, kMaxMatch = 258, kHashBits = 15;

// LSB-first bit writer (DEFLATE's bit order); Huffman codes are reversed before writing.
class BitWriter {
 public:
  void put(uint32_t bits, int n) {
    acc_ |= static_cast<uint64_t>(bits) << n_;
    n_ += n;
    while (n_ >= 8) {
      out_.push_back(static_cast<uint8_t>(acc_));
      acc_ >>= 8;
      n_ -= 8;
    }
  }
  void align() {
    if (n_ > 0) put(0, 8 - n_);
  }
  std::vector<uint8_t>& bytes() { return out_; }

 private:
  std::vector<uint8_t> out_;
  uint64_t acc_ = 0;
  int n_ = 0;
};

uint32_t reverse(uint32_t code, int len) {
  uint32_t r = 0;
  for (int i = 0; i < len; ++i) r |= ((code >> i) & 1u) << (len - 1 - i);
  return r;
}

// Canonical codes (RFC 1951 3.2.2), bit-reversed for the writer.
std::vector<uint32_t> canonical(const std::vector<uint8_t>& len) {
  int bl_count[16] = {0};
  for (uint8_t l : len) bl_count[l]++;
  bl_count[0] = 0;
  uint32_t next[16] = {0}, code = 0;
  for (int b = 1; b < 16; ++b) {
    code = (code + static_cast<uint32_t>(bl_count[b - 1])) << 1;
    next[b] = code;
  }
  std::vector<uint32_t> c(len.size(), 0);
  for (size_t s = 0; s < len.size(); ++s)
    if (len[s]) c[s] = reverse(next[len[s]]++, len[s]);
  return c;
}

int len_code(int len) {  // index into kLenBase
  int i = 28;
  while (kLenBase[i] > len) --i;
  return i;
}
int dist_code(int dist) {
  int i = 29;
  while (kDistBase[i] > dist) --i;
  return i;
}

struct Token {
  uint16_t len;   // 0: literal
  uint16_t dist;  // or the literal byte
};

// Greedy LZ77 over [begin, end) of `data`, matches inside the segment only.
std::vector<Token> match(const uint8_t* data, size_t begin, size_t end, int depth) {
  std::vector<Token> t;
  const size_t n = end - begin;
  t.reserve(n / 2 + 16);
  std::vector<int32_t> head(1u << kHashBits, -1), prev(n, -1);
  auto hash = [&](size_t i) {
    const uint32_t v = (static_cast<uint32_t>(data[i]) << 16) | (static_cast<uint32_t>(data[i + 1]) << 8) | data[i + 2];
    return (v * 2654435761u) >> (32 - kHashBits);
  };
  auto insert = [&](size_t i) {
    if (i + 3 > end) return;
    const uint32_t h = hash(i);
    prev[i - begin] = head[h];
    head[h] = static_cast<int32_t>(i - begin);
  };
  size_t i = begin;
  while (i < end) {
    int best = 0, best_dist = 0;
    if (depth > 0 && i + 3 <= end) {
      const size_t limit = std::min<size_t>(kMaxMatch, end - i);
      int32_t j = head[hash(i)];
      for (int d = 0; d < depth && j >= 0; ++d, j = prev[static_cast<size_t>(j)]) {
        const size_t cand = begin + static_cast<size_t>(j);
        if (i - cand > kWindow) break;
        size_t l = 0;
        while (l < limit && data[cand + l] == data[i + l]) ++l;
        if (static_cast<int>(l) > best) {
          best = static_cast<int>(l);
          best_dist = static_cast<int>(i - cand);
          if (l == limit) break;
        }
      }
    }
    if (best >= 3) {
      t.push_back({static_cast<uint16_t>(best), static_cast<uint16_t>(best_dist)});
      for (int k = 0; k < best; ++k) insert(i + static_cast<size_t>(k));
      i += static_cast<size_t>(best);
    } else {
      t.push_back({0, data[i]});
      insert(i);
      ++i;
    }
  }
  return t;
}

// One dynamic-Huffman block of `tokens`.
void write_block(BitWriter& w, const std::vector<Token>& tokens, bool final) {
  std::vector<uint32_t> lf(286, 0), df(30, 0);
  for (const Token& t : tokens) {
    if (t.len == 0) {
      lf[t.dist]++;
    } else {
      lf[257 + static_cast<size_t>(len_code(t.len))]++;
      df[static_cast<size_t>(dist_code(t.dist))]++;
    }
  }
  lf[256] = 1;
  std::vector<uint8_t> ll = limited_code_lengths(lf, 15), dl = limited_code_lengths(df, 15);
  if (std::all_of(dl.begin(), dl.end(), [](uint8_t l) { return l == 0; })) dl[0] = 1;  // one unused code
  int hlit = 286, hdist = 30;
  while (hlit > 257 && ll[static_cast<size_t>(hlit - 1)] == 0) --hlit;
  while (hdist > 1 && dl[static_cast<size_t>(hdist - 1)] == 0) --hdist;
  // Run-length code of the code lengths (symbols 16, 17, 18).
  std::vector<uint8_t> all(ll.begin(), ll.begin() + hlit);
  all.insert(all.end(), dl.begin(), dl.begin() + hdist);
  struct Rle {
    uint8_t sym, extra;
  };
  std::vector<Rle> rle;
  for (size_t i = 0; i < all.size();) {
    size_t run = 1;
    while (i + run < all.size() && all[i + run] == all[i]) ++run;
    const uint8_t v = all[i];
    size_t left = run;
    if (v == 0) {
      while (left >= 11) {
        const size_t k = std::min<size_t>(left, 138);
        rle.push_back({18, static_cast<uint8_t>(k - 11)});
        left -= k;
      }
      if (left >= 3) {
        rle.push_back({17, static_cast<uint8_t>(left - 3)});
        left = 0;
      }
    } else {
      rle.push_back({v, 0});
      --left;
      while (left >= 3) {
        const size_t k = std::min<size_t>(left, 6);
        rle.push_back({16, static_cast<uint8_t>(k - 3)});
        left -= k;
      }
    }
    while (left-- > 0) rle.push_back({v, 0});
    i += run;
  }
  std::vector<uint32_t> cf(19, 0);
  for (const Rle& r : rle) cf[r.sym]++;
  std::vector<uint8_t> cl = limited_code_lengths(cf, 7);
  int hclen = 19;
  while (hclen > 4 && cl[static_cast<size_t>(kClOrder[hclen - 1])] == 0) --hclen;
  const std::vector<uint32_t> lc = canonical(ll), dc = canonical(dl), cc = canonical(cl);

  w.put(final ? 1 : 0, 1);
  w.put(2, 2);  // dynamic Huffman
  w.put(static_cast<uint32_t>(hlit - 257), 5);
  w.put(static_cast<uint32_t>(hdist - 1), 5);
  w.put(static_cast<uint32_t>(hclen - 4), 4);
  for (int i = 0; i < hclen; ++i) w.put(cl[static_cast<size_t>(kClOrder[i])], 3);
  for (const Rle& r : rle) {
    w.put(cc[r.sym], cl[r.sym]);
    if (r.sym == 16) w.put(r.extra, 2);
    if (r.sym == 17) w.put(r.extra, 3);
    if (r.sym == 18) w.put(r.extra, 7);
  }
  for (const Token& t : tokens) {
    if (t.len == 0) {
      w.put(lc[t.dist], ll[t.dist]);
      continue;
    }
    const int lci = len_code(t.len), dci = dist_code(t.dist);
    w.put(lc[257 + static_cast<size_t>(lci)], ll[257 + static_cast<size_t>(lci)]);
    if (kLenExtra[lci]) w.put(static_cast<uint32_t>(t.len - kLenBase[lci]), kLenExtra[lci]);
    w.put(dc[static_cast<size_t>(dci)], dl[static_cast<size_t>(dci)]);
    if (kDistExtra[dci]) w.put(static_cast<uint32_t>(t.dist - kDistBase[dci]), kDistExtra[dci]);
  }
  w.put(lc[256], ll[256]);
}

void write_stored(BitWriter& w, const uint8_t* p, size_t n, bool final) {
  w.put(final ? 1 : 0, 1);
  w.put(0, 2);
  w.align();
  w.put(static_cast<uint32_t>(n & 0xFFFF), 16);
  w.put(static_cast<uint32_t>(~n & 0xFFFF), 16);
  for (size_t i = 0; i < n; ++i) w.put(p[i], 8);
}

}  // namespace

int chain_depth(int level) {
  static const int depth[10] = {0, 4, 8, 16, 32, 64, 128, 256, 1024, 4096};
  return depth[std::clamp(level, 0, 9)];
}

std::vector<uint8_t> limited_code_lengths(const std::vector<uint32_t>& freq, int max_bits) {
  std::vector<uint8_t> len(freq.size(), 0);
  struct Item {
    uint64_t weight;
    std::vector<uint16_t> syms;
  };
  std::vector<Item> leaves;
  for (size_t s = 0; s < freq.size(); ++s)
    if (freq[s]) leaves.push_back({freq[s], {static_cast<uint16_t>(s)}});
  if (leaves.empty()) return len;
  if (leaves.size() == 1) {
    len[leaves[0].syms[0]] = 1;
    return len;
  }
  std::stable_sort(leaves.begin(), leaves.end(), [](const Item& a, const Item& b) { return a.weight < b.weight; });
  // Package-merge: each level merges the leaves with the pairs of the level below.
  std::vector<Item> list = leaves;
  for (int level = 1; level < max_bits; ++level) {
    std::vector<Item> pairs;
    for (size_t i = 0; i + 1 < list.size(); i += 2) {
      Item p{list[i].weight + list[i + 1].weight, list[i].syms};
      p.syms.insert(p.syms.end(), list[i + 1].syms.begin(), list[i + 1].syms.end());
      pairs.push_back(std::move(p));
    }
    std::vector<Item> merged;
    merged.reserve(leaves.size() + pairs.size());
    size_t a = 0, b = 0;
    while (a < leaves.size() || b < pairs.size()) {  // stable: leaves first on equal weight
      if (b >= pairs.size() || (a < leaves.size() && leaves[a].weight <= pairs[b].weight))
        merged.push_back(leaves[a++]);
      else
        merged.push_back(std::move(pairs[b++]));
    }
    list = std::move(merged);
  }
  for (size_t i = 0; i < 2 * leaves.size() - 2 && i < list.size(); ++i)
    for (uint16_t s : list[i].syms) len[s]++;
  return len;
}

std::vector<uint8_t> compress(const uint8_t* data, size_t n, const Options& opt) {
  std::vector<uint8_t> out;
  if (n == 0) return {0x03, 0x00};  // one final fixed-Huffman block holding only end-of-block
  const size_t seg = std::max<size_t>(opt.segment_bytes, 1024);
  for (size_t begin = 0; begin < n; begin += seg) {
    const size_t end = std::min(n, begin + seg);
    const bool last = end == n;
    BitWriter w;
    if (opt.level <= 0) {
      for (size_t p = begin; p < end; p += 65535) {
        const size_t k = std::min<size_t>(65535, end - p);
        write_stored(w, data + p, k, last && p + k == end);
      }
    } else {
      write_block(w, match(data, begin, end, chain_depth(opt.level)), last);
      if (!last) write_stored(w, nullptr, 0, false);  // byte-align: the next segment starts on a byte
    }
    w.align();
    out.insert(out.end(), w.bytes().begin(), w.bytes().end());
  }
  return out;
}

uint32_t adler32(const uint8_t* p, size_t n, uint32_t adler) {
  uint32_t a = adler & 0xFFFF, b = adler >> 16;
  while (n > 0) {
    const size_t k = std::min<size_t>(n, 5552);  // no overflow before the modulo
    for (size_t i = 0; i < k; ++i) {
      a += p[i];
      b += a;
    }
    a %= 65521;
    b %= 65521;
    p += k;
    n -= k;
  }
  return (b << 16) | a;
}

uint32_t crc32(const uint8_t* p, size_t n, uint32_t crc) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

std::vector<uint8_t> compress_zlib(const uint8_t* data, size_t n, const Options& opt) {
  // CMF 0x78 (deflate, 32K window); FLG's level bits, and a check making CMF*256+FLG % 31 == 0.
  const uint8_t flevel = opt.level <= 1 ? 0 : opt.level <= 5 ? 1 : opt.level == 6 ? 2 : 3;
  uint8_t flg = static_cast<uint8_t>(flevel << 6);
  flg = static_cast<uint8_t>(flg + (31 - (0x78 * 256 + flg) % 31) % 31);
  std::vector<uint8_t> out{0x78, flg};
  const std::vector<uint8_t> body = compress(data, n, opt);
  out.insert(out.end(), body.begin(), body.end());
  const uint32_t a = adler32(data, n);
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(a >> s));
  return out;
}

std::vector<uint8_t> compress_gzip(const uint8_t* data, size_t n, const Options& opt) {
  std::vector<uint8_t> out{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, static_cast<uint8_t>(opt.level >= 9 ? 2 : opt.level <= 1 ? 4 : 0),
                           255};
  const std::vector<uint8_t> body = compress(data, n, opt);
  out.insert(out.end(), body.begin(), body.end());
  const uint32_t c = crc32(data, n), size = static_cast<uint32_t>(n);
  for (int s = 0; s < 32; s += 8) out.push_back(static_cast<uint8_t>(c >> s));
  for (int s = 0; s < 32; s += 8) out.push_back(static_cast<uint8_t>(size >> s));
  return out;
}

}  // namespace vfp::deflate
