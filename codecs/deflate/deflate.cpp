#include "codecs/deflate/deflate.hpp"

#include <algorithm>
#include <array>
#include <memory>

namespace vfp::deflate {

namespace {

namespace c = core;

// Previous position of the input with the same hash, as a distance (0: none within the
// window). One chain over the whole input: segments are encoded independently, but the
// data before a segment is the decoder's history too, so matches may reach into it.
std::vector<uint16_t> chain_distances(const uint8_t* data, size_t n) {
  std::vector<uint16_t> dist(n, 0);
  std::vector<int64_t> head(1u << c::kHashBits, -1);
  for (size_t p = 0; p + 3 <= n; ++p) {
    const uint32_t h = c::hash3(data[p], data[p + 1], data[p + 2]);
    if (head[h] >= 0 && p - static_cast<size_t>(head[h]) <= static_cast<size_t>(c::kWindow))
      dist[p] = static_cast<uint16_t>(p - static_cast<size_t>(head[h]));
    head[h] = static_cast<int64_t>(p);
  }
  return dist;
}

// Longest match at p (first found wins ties) with a start at or after `lo`, at most `limit`
// bytes; 0 when none is usable (accept_match).
uint32_t longest_match(const uint8_t* data, const uint16_t* dist, size_t p, size_t lo, uint32_t limit,
                       const c::LevelParams& lp, uint32_t* best_dist) {
  if (limit < static_cast<uint32_t>(c::kMinMatch)) return 0;
  uint32_t best = 0;
  size_t j = p;
  for (int k = 0; k < lp.depth; ++k) {
    const uint32_t d = dist[j];
    if (d == 0 || j < lo + d) break;  // no earlier position, or one before the history
    j -= d;
    if (p - j > static_cast<size_t>(c::kWindow)) break;
    const uint32_t l = c::match_length(data + j, data + p, limit);
    if (l > best) {
      best = l;
      *best_dist = static_cast<uint32_t>(p - j);
      if (best >= static_cast<uint32_t>(lp.nice) || best == limit) break;
    }
  }
  return best ? c::accept_match(best, *best_dist, lp) : 0;
}

// Parses the segment [begin, begin + n) into tokens and its histogram. Matches may start up
// to history_bytes before it.
struct ParsedSegment {
  std::vector<uint32_t> tokens;
  std::vector<uint32_t> hist = std::vector<uint32_t>(c::kNumSyms, 0);
};
ParsedSegment parse_segment(const uint8_t* data, const uint16_t* dist, size_t begin, uint32_t n, size_t history_bytes,
                            const c::LevelParams& lp) {
  ParsedSegment ps;
  const uint8_t* seg = data + begin;
  const size_t lo = begin - history_bytes;
  ps.tokens.reserve(n);
  auto limit_at = [&](uint32_t p) { return std::min<uint32_t>(c::kMaxMatch, n - p); };
  for (uint32_t p = 0; p < n;) {
    uint32_t d = 0;
    uint32_t len = longest_match(data, dist, begin + p, lo, limit_at(p), lp, &d);
    if (len && lp.lazy && p + 1 < n) {
      uint32_t d1 = 0;
      if (longest_match(data, dist, begin + p + 1, lo, limit_at(p + 1), lp, &d1) > len) len = 0;
    }
    if (len) {
      ps.tokens.push_back(c::make_match(len, d));
      ps.hist[257 + static_cast<size_t>(c::len_code(len))]++;
      ps.hist[c::kNumLitLen + static_cast<size_t>(c::dist_code(d))]++;
      p += len;
    } else {
      ps.tokens.push_back(c::make_literal(seg[p]));
      ps.hist[seg[p]]++;
      ++p;
    }
  }
  return ps;
}

// One batch: its segments grouped into blocks (block_starts), each block one dynamic-Huffman
// block over its segments' tokens, bit-contiguous; the batch ends byte-aligned (final: padding;
// else an empty stored block, as zlib's sync flush).
void write_batch(const std::vector<ParsedSegment>& segs, bool final, std::vector<uint8_t>& out) {
  std::vector<uint64_t> ntok(segs.size());
  for (size_t i = 0; i < segs.size(); ++i) ntok[i] = segs[i].tokens.size();
  const std::vector<uint8_t> starts = block_starts(ntok);
  size_t bits_bound = 64;
  for (const auto& sg : segs) bits_bound += sg.tokens.size() * 48 + 8 * 700;
  std::vector<uint32_t> words(bits_bound / 32 + 4, 0);
  c::BitBuf w{words.data(), 0};
  for (size_t b0 = 0; b0 < segs.size();) {
    size_t b1 = b0 + 1;
    while (b1 < segs.size() && !starts[b1]) ++b1;
    std::vector<uint32_t> hist(c::kNumSyms, 0);
    for (size_t i = b0; i < b1; ++i)
      for (int k = 0; k < c::kNumSyms; ++k) hist[k] += segs[i].hist[k];
    hist[c::kEob] = 1;
    c::BlockCode bc{};
    build_block_code(hist.data(), final && b1 == segs.size(), bc);
    for (uint32_t i = 0; i < bc.header_bits; i += 32) {
      const int k = static_cast<int>(std::min<uint32_t>(32, bc.header_bits - i));
      w.put(k == 32 ? bc.header[i / 32] : bc.header[i / 32] & ((1u << k) - 1), k);
    }
    for (size_t i = b0; i < b1; ++i)
      for (uint32_t t : segs[i].tokens) {
        uint64_t pattern = 0;
        const uint32_t bits = c::token_bits(bc, t, &pattern);
        w.put(static_cast<uint32_t>(pattern), static_cast<int>(std::min<uint32_t>(bits, 32)));
        if (bits > 32) w.put(static_cast<uint32_t>(pattern >> 32), static_cast<int>(bits - 32));
      }
    w.put(bc.code[c::kEob], bc.len[c::kEob]);
    b0 = b1;
  }
  if (!final) {
    w.put(0, 3);  // empty stored block: BFINAL 0, BTYPE 00, then align, LEN 0, NLEN 0xFFFF
    w.pos = (w.pos + 7) & ~7u;
    w.put(0, 16);
    w.put(0xFFFF, 16);
  }
  const size_t bytes = (w.pos + 7) / 8;
  const size_t at = out.size();
  out.resize(at + bytes);
  for (size_t i = 0; i < bytes; ++i) out[at + i] = static_cast<uint8_t>(words[i / 4] >> (8 * (i % 4)));
}

}  // namespace

void build_block_code(const uint32_t* hist, bool final, core::BlockCode& bc) {
  c::MergeScratch scratch;
  uint16_t sorted[c::kNumLitLen];
  for (int s = 0; s < c::kNumSyms; ++s) bc.len[s] = 0;
  int m = c::sort_symbols(hist, c::kNumLitLen, sorted);
  c::code_lengths(hist, sorted, m, 15, bc.len, scratch);
  m = c::sort_symbols(hist + c::kNumLitLen, c::kNumDist, sorted);
  c::code_lengths(hist + c::kNumLitLen, sorted, m, 15, bc.len + c::kNumLitLen, scratch);
  c::finish_distance_lengths(bc);
  c::build_header(bc, final, scratch);
}

std::vector<uint8_t> limited_code_lengths(const std::vector<uint32_t>& freq, int max_bits) {
  std::vector<uint8_t> len(freq.size(), 0);
  std::vector<uint16_t> sorted(freq.size());
  auto scratch = std::make_unique<c::MergeScratch>();
  const int m = c::sort_symbols(freq.data(), static_cast<int>(freq.size()), sorted.data());
  c::code_lengths(freq.data(), sorted.data(), m, max_bits, len.data(), *scratch);
  return len;
}

std::vector<uint8_t> block_starts(const std::vector<uint64_t>& tokens) {
  std::vector<uint8_t> start(tokens.size(), 0);
  uint64_t before = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    start[i] = i == 0 || core::block_of(before) != core::block_of(before - tokens[i - 1]);
    before += tokens[i];
  }
  return start;
}

size_t batch_size(const Options& opt) {
  const size_t seg = segment_size(opt);
  return std::max<size_t>(opt.batch_bytes / seg, 1) * seg;
}

size_t segment_size(const Options& opt) {
  const size_t s = std::clamp<size_t>(opt.segment_bytes, c::kChunk, c::kMaxSegment);
  return s / c::kChunk * c::kChunk;
}

std::vector<uint8_t> compress(const uint8_t* data, size_t n, const Options& opt) {
  if (n == 0) return {0x03, 0x00};  // one final fixed-Huffman block holding only end-of-block
  std::vector<uint8_t> out;
  out.reserve(n / 2 + 64);
  if (opt.level <= 0) {  // stored blocks of 65535 bytes
    for (size_t p = 0; p < n; p += 65535) {
      const size_t k = std::min<size_t>(65535, n - p);
      out.push_back(p + k == n ? 1 : 0);
      out.push_back(static_cast<uint8_t>(k));
      out.push_back(static_cast<uint8_t>(k >> 8));
      out.push_back(static_cast<uint8_t>(~k));
      out.push_back(static_cast<uint8_t>(~k >> 8));
      out.insert(out.end(), data + p, data + p + k);
    }
    return out;
  }
  const size_t seg = segment_size(opt), batch = batch_size(opt);
  const c::LevelParams lp = c::level_params(std::min(opt.level, 9), opt.filtered);
  const std::vector<uint16_t> dist = chain_distances(data, n);
  for (size_t b0 = 0; b0 < n; b0 += batch) {
    const size_t bn = std::min(batch, n - b0);
    std::vector<ParsedSegment> segs;
    for (size_t begin = b0; begin < b0 + bn; begin += seg) {
      const size_t len = std::min(seg, b0 + bn - begin);
      segs.push_back(parse_segment(data, dist.data(), begin, static_cast<uint32_t>(len),
                                   lp.history ? c::history_bytes(begin, seg) : 0, lp));
    }
    write_batch(segs, b0 + bn == n, out);
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
  std::vector<uint8_t> out{
      0x1f, 0x8b, 8, 0, 0, 0, 0, 0, static_cast<uint8_t>(opt.level >= 9 ? 2 : opt.level <= 1 ? 4 : 0), 255};
  const std::vector<uint8_t> body = compress(data, n, opt);
  out.insert(out.end(), body.begin(), body.end());
  const uint32_t c = crc32(data, n), size = static_cast<uint32_t>(n);
  for (int s = 0; s < 32; s += 8) out.push_back(static_cast<uint8_t>(c >> s));
  for (int s = 0; s < 32; s += 8) out.push_back(static_cast<uint8_t>(size >> s));
  return out;
}

}  // namespace vfp::deflate
