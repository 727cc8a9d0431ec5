// CUDA DEFLATE encoder, GPU checksums and PNG (see cuda/deflate.hpp for the structure and
// docs/deflate.md for the algorithm). Everything that decides a bit of the output comes
// from codecs/deflate/deflate_core.hpp, shared with the CPU reference.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <cub/device/device_scan.cuh>
#include <mutex>

#include "codecs/deflate/deflate_core.hpp"
#include "codecs/deflate/png.hpp"
#include "codecs/deflate/png_filter.hpp"
#include "core/error.hpp"
#include "cuda/deflate.hpp"

namespace vfp::cuda {

namespace c = deflate::core;

namespace {

constexpr unsigned kFull = 0xFFFFFFFFu;
constexpr int kChunksPerSeg = c::kMaxSegment / c::kChunk;  // 16 warps per block
constexpr uint16_t kNoPos = 0xFFFF;                        // the last position of a 64 KiB segment has no hash

// ------------------------------------------------------------------ chains
// One warp per segment: dist[p] = p - (previous position of the segment with the same hash),
// 0 if none or farther than the window; then the segment's last position of every hash
// (`last`, the next segment's history). The reference's chain is over the whole input: the
// parse kernel completes it from `last` (see there). Positions whose 3 bytes run past the
// input's end (avail) have no hash; lanes without one get unique dummy keys.
__global__ void __launch_bounds__(32)
    chains_kernel(const uint8_t* __restrict__ in, size_t n, size_t avail, uint32_t seg_size,
                  uint16_t* __restrict__ dist, uint16_t* __restrict__ last) {
  extern __shared__ uint16_t head[];
  const size_t begin = static_cast<size_t>(blockIdx.x) * seg_size;
  const uint32_t len = static_cast<uint32_t>(std::min<size_t>(seg_size, n - begin));
  const size_t seg_avail = avail - begin;
  const unsigned lane = threadIdx.x;
  for (uint32_t i = lane; i < (1u << c::kHashBits); i += 32) head[i] = kNoPos;
  __syncwarp();
  const uint8_t* seg = in + begin;
  const unsigned lower = (1u << lane) - 1;
  // Four steps' hashes are loaded at once (their loads overlap), then the steps run in order.
  constexpr int kAhead = 4;
  for (uint32_t base0 = 0; base0 < len; base0 += 32 * kAhead) {
    uint32_t hv[kAhead];
#pragma unroll
    for (int k = 0; k < kAhead; ++k) {
      const uint32_t p = base0 + 32 * k + lane;
      hv[k] = p < len && p + 3 <= seg_avail ? c::hash3(seg[p], seg[p + 1], seg[p + 2]) : (1u << 16) + lane;
    }
#pragma unroll
    for (int k = 0; k < kAhead; ++k) {
      const uint32_t base = base0 + 32 * k;
      if (base >= len) break;
      const uint32_t p = base + lane, h = hv[k];
      const bool has = h < (1u << 16);
      const unsigned group = __match_any_sync(kFull, h);
      const unsigned below = group & lower;
      uint16_t d = 0;
      if (has) {
        uint32_t q;
        bool found = true;
        if (below) {
          q = base + 31 - __clz(below);
        } else {
          const uint16_t hv0 = head[h];
          found = hv0 != kNoPos;
          q = hv0;
        }
        if (found && p - q <= static_cast<uint32_t>(c::kWindow)) d = static_cast<uint16_t>(p - q);
      }
      __syncwarp();
      if (has && (group >> lane) == 1u) head[h] = static_cast<uint16_t>(p);  // last of its group
      __syncwarp();
      if (p < len) dist[begin + p] = d;
    }
  }
  if (!last) return;
  // The table keeps positions that can reach the next segment (the last 32 KiB), as
  // offset - base + 1 (0: none). A 64 KiB segment's last position is also the head's
  // "none" value, so it is set after the copy.
  __syncwarp();
  const uint32_t base = seg_size > static_cast<uint32_t>(c::kWindow) ? seg_size - c::kWindow : 0;
  uint16_t* out = last + (static_cast<size_t>(blockIdx.x + 1) << c::kHashBits);
  for (uint32_t i = lane; i < (1u << c::kHashBits); i += 32) {
    const uint16_t q = head[i];
    out[i] = q != kNoPos && q >= base ? static_cast<uint16_t>(q - base + 1) : 0;
  }
  __syncwarp();
  if (lane == 0 && len == 65536 && 65535 + 3 <= seg_avail)
    out[c::hash3(seg[65535], seg[65536], seg[65537])] = static_cast<uint16_t>(65535 - base + 1);
}

// ------------------------------------------------------------------ parse
__device__ __forceinline__ uint32_t load32(const uint8_t* s, uint32_t i) {
  const uint32_t* w = reinterpret_cast<const uint32_t*>(s);
  return __funnelshift_r(w[i >> 2], w[(i >> 2) + 1], (i & 3) * 8);
}

// Common prefix of s[a..] and s[b..] up to limit, four bytes at a time.
__device__ __forceinline__ uint32_t match_len_smem(const uint8_t* s, uint32_t a, uint32_t b, uint32_t limit) {
  uint32_t l = 0;
  while (l < limit) {
    const uint32_t x = load32(s, a + l) ^ load32(s, b + l);
    if (x) return min(limit, l + ((__ffs(x) - 1) >> 3));
    l += 4;
  }
  return limit;
}

// The reference's longest_match (deflate.cpp) on shared memory: s[0, H) is the history,
// s[H, ...) the segment; the segment's chains are in sdist, the history's in hdist (global:
// the previous segment's own chains, which are all that a walk from here can use).
// cap (<= limit): compare no further than this; with cap = nice the same candidate wins (the
// walk stops at the first one reaching nice) and only its length is short, which the caller
// extends when it needs it (window_step).
__device__ uint32_t longest_match_smem(const uint8_t* s, const uint16_t* sdist, const uint16_t* hdist, int H, int p,
                                       uint32_t limit, c::LevelParams lp, uint32_t* best_dist, uint32_t cap) {
  if (limit < static_cast<uint32_t>(c::kMinMatch)) return 0;
  uint32_t best = 0;
  int j = p;
  for (int k = 0; k < lp.depth; ++k) {
    const int d = j >= H ? sdist[j - H] : hdist[j];
    if (d == 0 || j < d) break;  // no earlier position, or one before the history
    j -= d;
    if (p - j > c::kWindow) break;
    if (s[j + best] != s[p + best]) continue;  // cannot beat best (best < cap here)
    const uint32_t l = match_len_smem(s, static_cast<uint32_t>(j), static_cast<uint32_t>(p), cap);
    if (l > best) {
      best = l;
      *best_dist = static_cast<uint32_t>(p - j);
      if (best >= static_cast<uint32_t>(lp.nice) || best == cap) break;
    }
  }
  return best ? c::accept_match(best, *best_dist, lp) : 0;
}

// Common prefix of s[a..] and s[b..] up to limit, known to be at least `from`, by the warp.
__device__ uint32_t coop_extend(const uint8_t* s, uint32_t a, uint32_t b, uint32_t from, uint32_t limit) {
  const unsigned lane = threadIdx.x & 31;
  for (uint32_t off = from; off < limit; off += 128) {
    const uint32_t at = off + 4 * lane;
    const uint32_t x = at < limit ? load32(s, a + at) ^ load32(s, b + at) : 0;
    const unsigned diff = __ballot_sync(kFull, x != 0);
    if (diff) {
      const int f = __ffs(diff) - 1;
      const uint32_t xf = __shfl_sync(kFull, x, f);
      return min(limit, off + 4 * f + ((__ffs(xf) - 1) >> 3));
    }
  }
  return limit;
}

// longest_match_smem by a whole warp for one position: each candidate is compared 128 bytes
// per round (4 per lane, the first differing lane found by ballot). Same result.
__device__ uint32_t coop_longest_match(const uint8_t* s, const uint16_t* sdist, const uint16_t* hdist, int H, int p,
                                       uint32_t limit, c::LevelParams lp, uint32_t* best_dist) {
  if (limit < static_cast<uint32_t>(c::kMinMatch)) return 0;
  uint32_t best = 0;
  int j = p;
  for (int k = 0; k < lp.depth; ++k) {
    const int d = j >= H ? sdist[j - H] : hdist[j];
    if (d == 0 || j < d) break;
    j -= d;
    if (p - j > c::kWindow) break;
    if (s[j + best] != s[p + best]) continue;
    const uint32_t l = coop_extend(s, static_cast<uint32_t>(j), static_cast<uint32_t>(p), 0, limit);
    if (l > best) {
      best = l;
      *best_dist = static_cast<uint32_t>(p - j);
      if (best >= static_cast<uint32_t>(lp.nice) || best == limit) break;
    }
  }
  return best ? c::accept_match(best, *best_dist, lp) : 0;
}

// One step of the parse: the longest matches at the 32 positions base..base+31 (matches may
// run to the segment's end), then the parse's path through them from lane 0 by pointer
// doubling. advance: how far the window moves after it (31 when lane 31 waits for the lazy
// check of the next position).
struct Window {
  uint32_t L, D;       // this lane's match (L = 0: literal)
  bool take;           // this lane's position emits its match (else a literal)
  unsigned path;       // lanes on the path from lane 0
  unsigned undecided;  // lane 31 when its lazy decision needs position base+32
  uint32_t advance;
};
__device__ Window window_step(const uint8_t* s, const uint16_t* dist, const uint16_t* hdist, int H, uint32_t base,
                              uint32_t len, const c::LevelParams& lp) {
  const unsigned lane = threadIdx.x & 31;
  const uint32_t p = base + lane;
  Window w{};
  const uint32_t limit = p < len ? min(static_cast<uint32_t>(c::kMaxMatch), len - p) : 0;
  // Greedy levels compare only up to `nice`: a longer match leaves the window, so at most the
  // path's last lane needs its full length (extended below by the whole warp).
  const uint32_t cap = lp.lazy ? limit : min(limit, static_cast<uint32_t>(lp.nice));
  if (p < len) w.L = longest_match_smem(s, dist, hdist, H, H + static_cast<int>(p), limit, lp, &w.D, cap);
  const bool capped = w.L != 0 && w.L == cap && cap < limit;
  const uint32_t Lnext = __shfl_down_sync(kFull, w.L, 1);
  w.take = w.L != 0 && !(lp.lazy && lane < 31 && Lnext > w.L);
  const bool undecided = lp.lazy && lane == 31 && w.L != 0 && p + 1 < len;
  w.undecided = __ballot_sync(kFull, undecided);
  const int nxt = p >= len ? 64 : undecided ? 31 : static_cast<int>(lane + (w.take ? w.L : 1));
  // After round r the path holds the lanes reached from lane 0 in < 2^(r+1) steps.
  unsigned path = 1;
  int jump = nxt;
  for (int r = 0; r < 5; ++r) {
    const unsigned mine = ((path >> lane) & 1u) && jump < 32 ? (1u << jump) : 0u;
    path |= __reduce_or_sync(kFull, mine);
    const int j2 = __shfl_sync(kFull, jump, jump & 31);
    jump = jump < 32 ? j2 : jump;
  }
  w.path = path;
  const int last = 31 - __clz(path);
  w.advance = static_cast<uint32_t>(__shfl_sync(kFull, nxt, last));
  if (__shfl_sync(kFull, capped, last)) {  // only a capped lane can jump out: it is the last
    const uint32_t pl = base + last, dl = __shfl_sync(kFull, w.D, last), cl = __shfl_sync(kFull, cap, last);
    const uint32_t ll = __shfl_sync(kFull, limit, last);
    const uint32_t full = coop_extend(s, static_cast<uint32_t>(H) + pl - dl, static_cast<uint32_t>(H) + pl, cl, ll);
    if (lane == static_cast<unsigned>(last)) w.L = full;
    w.advance = static_cast<uint32_t>(last) + full;
  }
  return w;
}

// Writes the tokens of the lanes in `emit` after the n already in out[], and counts them.
__device__ __forceinline__ void emit_tokens(const Window& w, unsigned emit, const uint8_t* s, int H, uint32_t base,
                                            uint32_t* out, uint32_t n, uint32_t* hist) {
  const unsigned lane = threadIdx.x & 31;
  if (!((emit >> lane) & 1u)) return;
  const uint32_t idx = n + __popc(emit & ((1u << lane) - 1));
  const uint32_t p = base + lane;
  if (w.take) {
    out[idx] = c::make_match(w.L, w.D);
    atomicAdd(&hist[257 + c::len_code(w.L)], 1u);
    atomicAdd(&hist[c::kNumLitLen + c::dist_code(w.D)], 1u);
  } else {
    out[idx] = c::make_literal(s[H + p]);
    atomicAdd(&hist[s[H + p]], 1u);
  }
}
__device__ __forceinline__ void unhist(uint32_t t, uint32_t* hist) {
  if (c::token_len(t)) {
    atomicSub(&hist[257 + c::len_code(c::token_len(t))], 1u);
    atomicSub(&hist[c::kNumLitLen + c::dist_code(c::token_low(t))], 1u);
  } else {
    atomicSub(&hist[c::token_low(t)], 1u);
  }
}

// A chunk's speculative path as a bitmap of its 4096 positions (global memory, zeroed first).
constexpr int kBitmapWords = c::kChunk / 32;
__device__ __forceinline__ void mark_path(uint32_t* bm, uint32_t rel, unsigned lanes) {
  if ((threadIdx.x & 31) != 0 || !lanes) return;
  const uint32_t w = rel >> 5, o = rel & 31;
  atomicOr(&bm[w], lanes << o);
  if (o && (lanes >> (32 - o)) && w + 1 < kBitmapWords) atomicOr(&bm[w + 1], lanes >> (32 - o));
}
__device__ __forceinline__ bool on_path(const uint32_t* bm, uint32_t rel) {
  return rel < c::kChunk && ((bm[rel >> 5] >> (rel & 31)) & 1u);
}
// Path positions before rel (= the index of the token starting at rel), by the whole warp.
__device__ uint32_t path_rank(const uint32_t* bm, uint32_t rel) {
  const unsigned lane = threadIdx.x & 31;
  uint32_t n = 0;
  for (uint32_t w = lane; w < kBitmapWords; w += 32) {
    const uint32_t bits = w < (rel >> 5) ? bm[w] : w == (rel >> 5) ? bm[w] & ((1u << (rel & 31)) - 1) : 0;
    n += __popc(bits);
  }
  for (int o = 16; o > 0; o >>= 1) n += __shfl_xor_sync(kFull, n, o);
  return n;
}

// One block per segment, one warp per 4 KiB chunk. Tokens of chunk k go to tokens[chunk
// start ...] (a chunk never has more tokens than bytes); the count to chunk_ntok.
// `in` is the batch's first byte, batch_begin its offset in the input, avail the input's bytes
// from `in` on (history before it is readable: the whole input is in device memory); gdist
// holds the chains from 32 KiB before the batch; last[seg] the previous segment's table.
__global__ void __launch_bounds__(32 * kChunksPerSeg)
    parse_kernel(const uint8_t* __restrict__ in, size_t n, size_t avail, size_t batch_begin, uint32_t seg_size,
                 const uint16_t* __restrict__ gdist, const uint16_t* __restrict__ last, c::LevelParams lp,
                 uint32_t* __restrict__ tokens, uint32_t* __restrict__ chunk_ntok, uint32_t* __restrict__ seg_hist,
                 unsigned long long* __restrict__ seg_ntok, uint32_t* __restrict__ bitmap,
                 uint32_t* __restrict__ pre_tokens, uint32_t* __restrict__ chunk_start,
                 uint32_t* __restrict__ chunk_pre) {
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ uint32_t hist[c::kNumSyms];

  const size_t begin = static_cast<size_t>(blockIdx.x) * seg_size;
  const uint32_t len = static_cast<uint32_t>(std::min<size_t>(seg_size, n - begin));
  const int H = lp.history ? static_cast<int>(c::history_bytes(batch_begin + begin, seg_size)) : 0;
  uint8_t* s = smem;  // history, segment, 16 bytes of padding
  uint16_t* dist = reinterpret_cast<uint16_t*>(smem + (lp.history ? c::kWindow : 0) + seg_size + 16);  // its chains
  const uint16_t* hdist = gdist + begin - H;  // the history's chains, indexed like s
  for (uint32_t i = threadIdx.x; i < c::kNumSyms; i += blockDim.x) hist[i] = 0;
  const size_t readable = std::min<size_t>(static_cast<size_t>(H) + len + 16, H + (avail - begin));
  for (uint32_t i = threadIdx.x; i < static_cast<uint32_t>(H) + len + 16; i += blockDim.x)
    s[i] = i < readable ? in[static_cast<int64_t>(begin) - H + i] : 0;
  __syncthreads();
  // The chains across the segment start: a position of the first 32 KiB with no earlier
  // position of its hash in the segment links to the previous segment's last one, if in reach.
  const uint16_t* prev_last = last + (static_cast<size_t>(blockIdx.x) << c::kHashBits);
  for (uint32_t o = threadIdx.x; o < len; o += blockDim.x) {
    uint16_t d = gdist[begin + o];
    if (d == 0 && H > 0 && o < static_cast<uint32_t>(c::kWindow) && o + 3 <= avail - begin) {
      const uint16_t v = prev_last[c::hash3(s[H + o], s[H + o + 1], s[H + o + 2])];
      const uint32_t base = seg_size > static_cast<uint32_t>(c::kWindow) ? seg_size - c::kWindow : 0;
      const uint32_t back = seg_size - (base + v - 1);  // from the segment start to that position
      if (v != 0 && back + o <= static_cast<uint32_t>(c::kWindow)) d = static_cast<uint16_t>(back + o);
    }
    dist[o] = d;
  }
  __syncthreads();

  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t nchunks = (len + c::kChunk - 1) / c::kChunk;
  const size_t chunk0 = begin / c::kChunk;  // the segment's first chunk in the batch
  // Phase 1, one warp per chunk: the parse as if it began at the chunk's start ("speculative"),
  // up to the first path position at or past the chunk's end (its exit). Path positions are
  // marked in the chunk's bitmap.
  __shared__ uint32_t exits[kChunksPerSeg];
  const uint32_t cstart = warp * c::kChunk;
  if (cstart < len) {
    const uint32_t cend = min(len, cstart + c::kChunk);
    uint32_t* out = tokens + begin + cstart;
    uint32_t* bm = bitmap + (chunk0 + warp) * kBitmapWords;
    uint32_t ntok = 0, base = cstart;
    for (;;) {
      const Window w = window_step(s, dist, hdist, H, base, len, lp);
      const unsigned beyond = __ballot_sync(kFull, base + lane >= cend);
      const unsigned stop = w.path & beyond;
      unsigned emit = w.path & ~beyond & ~w.undecided;
      if (stop) emit &= (stop & (0u - stop)) - 1;  // path lanes before the first one past the end
      emit_tokens(w, emit, s, H, base, out, ntok, hist);
      mark_path(bm, base - cstart, emit);
      ntok += __popc(emit);
      if (stop) {
        base += __ffs(stop) - 1;
        break;
      }
      base += w.advance;
      if (base >= cend) break;
    }
    if (lane == 0) {
      exits[warp] = base;
      chunk_ntok[chunk0 + warp] = ntok;
      chunk_start[chunk0 + warp] = 0;
      chunk_pre[chunk0 + warp] = 0;
    }
  }
  __syncthreads();
  // Phase 2, one warp, chunk after chunk: the true parse enters chunk k where chunk k-1's
  // left it. From there it is parsed again until it meets a position of the speculative
  // path (the parse has no memory: from a common position on the two are the same), whose
  // tokens from there on are kept; the earlier ones are dropped.
  if (warp == 0) {
    uint32_t e = exits[0];
    for (uint32_t k = 1; k < nchunks; ++k) {
      const uint32_t cstart_k = k * c::kChunk, cend_k = min(len, cstart_k + c::kChunk);
      const uint32_t* bm = bitmap + (chunk0 + k) * kBitmapWords;
      uint32_t* pre = pre_tokens + begin + cstart_k;
      const uint32_t spec_n = chunk_ntok[chunk0 + k];
      uint32_t npre = 0, start = spec_n, exit = e, base = e;
      for (;;) {
        if (base >= cend_k) {  // left the chunk without meeting the speculative path
          exit = base;
          break;
        }
        if (on_path(bm, base - cstart_k)) {
          start = path_rank(bm, base - cstart_k);
          exit = exits[k];
          break;
        }
        // One position at a time, the whole warp on its match search: a path that is out
        // of step with the speculative one (long runs) moves a match per step.
        uint32_t D = 0;
        uint32_t L = coop_longest_match(s, dist, hdist, H, H + static_cast<int>(base),
                                        min(static_cast<uint32_t>(c::kMaxMatch), len - base), lp, &D);
        if (L && lp.lazy && base + 1 < len) {
          uint32_t D1 = 0;
          if (coop_longest_match(s, dist, hdist, H, H + static_cast<int>(base) + 1,
                                 min(static_cast<uint32_t>(c::kMaxMatch), len - base - 1), lp, &D1) > L)
            L = 0;
        }
        if (lane == 0) {
          if (L) {
            pre[npre] = c::make_match(L, D);
            atomicAdd(&hist[257 + c::len_code(L)], 1u);
            atomicAdd(&hist[c::kNumLitLen + c::dist_code(D)], 1u);
          } else {
            pre[npre] = c::make_literal(s[H + base]);
            atomicAdd(&hist[s[H + base]], 1u);
          }
        }
        ++npre;
        base += L ? L : 1;
      }
      // Drop the speculative tokens before the meeting point from the histogram.
      const uint32_t* spec_tok = tokens + begin + cstart_k;
      for (uint32_t i = lane; i < start; i += 32) unhist(spec_tok[i], hist);
      if (lane == 0) {
        chunk_start[chunk0 + k] = start;
        chunk_pre[chunk0 + k] = npre;
      }
      e = exit;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long total = 0;
    for (uint32_t k = 0; k < nchunks; ++k)
      total += chunk_pre[chunk0 + k] + chunk_ntok[chunk0 + k] - chunk_start[chunk0 + k];
    seg_ntok[blockIdx.x] = total;
  }
  for (uint32_t i = threadIdx.x; i < c::kNumSyms; i += blockDim.x) seg_hist[blockIdx.x * c::kNumSyms + i] = hist[i];
}

// ------------------------------------------------------------------ blocks
// One thread: which block each segment of the batch belongs to (the reference's
// block_starts), each block's first segment (block_first[nblocks] = nseg), nblocks.
__global__ void blocks_kernel(const unsigned long long* __restrict__ seg_ntok, uint32_t nseg,
                              uint32_t* __restrict__ seg_block, uint32_t* __restrict__ block_first,
                              uint32_t* __restrict__ nblocks) {
  unsigned long long before = 0;
  uint32_t b = 0;
  for (uint32_t i = 0; i < nseg; ++i) {
    if (i > 0 && c::block_of(before) != c::block_of(before - seg_ntok[i - 1])) ++b;
    if (i == 0 || block_first[b] == 0xFFFFFFFFu) block_first[b] = i;
    seg_block[i] = b;
    before += seg_ntok[i];
  }
  *nblocks = b + 1;
  block_first[b + 1] = nseg;
}

// ------------------------------------------------------------------ codes
// One small block of threads per DEFLATE block (64 threads, ~9 KB of shared memory, so a
// whole batch is resident at once): the histogram of its segments, then the reference's
// build_block_code, with the symbol sort done by ranking (the same order: by frequency,
// then symbol) and the canonical codes computed per symbol in parallel; the code lengths
// and header by one thread. Grid: one per segment (the most blocks there can be).
constexpr int kCodesThreads = 64;
__global__ void __launch_bounds__(kCodesThreads)
    codes_kernel(const uint32_t* __restrict__ seg_hist, const uint32_t* __restrict__ block_first,
                 const uint32_t* __restrict__ nblocks_ptr, bool last_batch, uint32_t* __restrict__ block_code,
                 uint32_t* __restrict__ block_header, uint32_t* __restrict__ block_hbits,
                 unsigned long long* __restrict__ block_bits) {
  __shared__ uint32_t hist[c::kNumSyms];
  __shared__ uint16_t sorted[c::kNumSyms];
  __shared__ c::BlockCode bc;
  __shared__ c::MergeScratch scratch;
  __shared__ unsigned long long bits;
  __shared__ int used[2];
  __shared__ uint32_t next_code[2][16];
  const unsigned t = threadIdx.x;
  const uint32_t blk = blockIdx.x;  // the DEFLATE block this CUDA block builds
  const uint32_t nblocks = *nblocks_ptr;
  if (blk >= nblocks) {
    if (t == 0) block_bits[blk] = 0;
    return;
  }
  const uint32_t s0 = block_first[blk], s1 = block_first[blk + 1];  // its segments
  for (unsigned i = t; i < c::kNumSyms; i += kCodesThreads) {
    uint32_t f = 0;
    for (uint32_t k = s0; k < s1; ++k) f += seg_hist[static_cast<size_t>(k) * c::kNumSyms + i];
    hist[i] = i == c::kEob ? 1u : f;
    bc.len[i] = 0;
  }
  if (t == 0) {
    bits = 0;
    used[0] = used[1] = 0;
  }
  __syncthreads();
  for (unsigned i = t; i < c::kNumSyms; i += kCodesThreads) {
    if (!hist[i]) continue;
    const bool ll = i < c::kNumLitLen;
    const uint32_t lo = ll ? 0 : c::kNumLitLen, hi = ll ? c::kNumLitLen : c::kNumSyms, f = hist[i];
    uint32_t r = 0;
    for (uint32_t q = lo; q < hi; ++q) r += hist[q] != 0 && (hist[q] < f || (hist[q] == f && q < i));
    sorted[lo + r] = static_cast<uint16_t>(i - lo);
    atomicAdd(&used[ll ? 0 : 1], 1);
  }
  __syncthreads();
  const bool final = last_batch && blk == nblocks - 1;
  if (t == 0) {
    c::code_lengths(hist, sorted, used[0], 15, bc.len, scratch);
    c::code_lengths(hist + c::kNumLitLen, sorted + c::kNumLitLen, used[1], 15, bc.len + c::kNumLitLen, scratch);
    c::finish_distance_lengths(bc);
    c::build_header(bc, final, scratch, false);
    // First canonical code of each length, per alphabet (RFC 1951 3.2.2).
    for (int a = 0; a < 2; ++a) {
      int count[16] = {0};
      const int lo = a ? c::kNumLitLen : 0, hi = a ? c::kNumSyms : c::kNumLitLen;
      for (int i = lo; i < hi; ++i) count[bc.len[i]]++;
      count[0] = 0;
      uint32_t code = 0;
      next_code[a][0] = 0;
      for (int l = 1; l < 16; ++l) next_code[a][l] = code = (code + static_cast<uint32_t>(count[l - 1])) << 1;
    }
  }
  __syncthreads();
  for (unsigned i = t; i < c::kNumSyms; i += kCodesThreads) {
    const int l = bc.len[i];
    uint32_t code = 0;
    if (l) {
      const int a = i < c::kNumLitLen ? 0 : 1;
      uint32_t k = next_code[a][l];
      for (unsigned q = a ? c::kNumLitLen : 0; q < i; ++q) k += bc.len[q] == l;
      code = __brev(k) >> (32 - l);
    }
    const unsigned long long b =
        static_cast<unsigned long long>(hist[i]) * (l + c::symbol_extra_bits(static_cast<int>(i)));
    if (b) atomicAdd(&bits, b);
    block_code[blk * c::kNumSyms + i] = code | (static_cast<uint32_t>(l) << 16);
  }
  for (unsigned w = t; w < c::kHeaderWords; w += kCodesThreads) block_header[blk * c::kHeaderWords + w] = bc.header[w];
  __syncthreads();
  if (t == 0) {
    block_hbits[blk] = bc.header_bits;
    block_bits[blk] = bc.header_bits + bits;  // the block's bits, end-of-block included
  }
}

// Bits of each segment's tokens under its block's code (one warp per segment).
__global__ void seg_bits_kernel(const uint32_t* __restrict__ seg_hist, const uint32_t* __restrict__ seg_block,
                                const uint32_t* __restrict__ block_code, uint32_t nseg,
                                unsigned long long* __restrict__ seg_bits) {
  const uint32_t seg = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (seg >= nseg) return;
  const uint32_t* code = block_code + static_cast<size_t>(seg_block[seg]) * c::kNumSyms;
  unsigned long long b = 0;
  for (int i = static_cast<int>(lane); i < c::kNumSyms; i += 32)
    b += static_cast<unsigned long long>(seg_hist[static_cast<size_t>(seg) * c::kNumSyms + i]) *
         ((code[i] >> 16) + c::symbol_extra_bits(i));
  for (int o = 16; o > 0; o >>= 1) b += __shfl_xor_sync(kFull, b, o);
  if (lane == 0) seg_bits[seg] = b;
}

// ------------------------------------------------------------------ pack
__device__ __forceinline__ void or_bits_global(uint32_t* out, unsigned long long pos, unsigned long long pattern,
                                               int n) {
  if (n == 0) return;
  const unsigned long long w = pos >> 5;
  const int o = static_cast<int>(pos & 31);
  const unsigned long long v = pattern << o;  // o + n <= 31 + 48 < 96: up to three words
  atomicOr(out + w, static_cast<uint32_t>(v));
  if (o + n > 32) atomicOr(out + w + 1, static_cast<uint32_t>(v >> 32));
  if (o + n > 64) atomicOr(out + w + 2, static_cast<uint32_t>(pattern >> (64 - o)));
}

// One block per segment. `out` is word-aligned device memory; base_bit = bit offset of the
// batch's first segment in it.
__global__ void __launch_bounds__(32 * kChunksPerSeg)
    pack_kernel(const uint32_t* __restrict__ tokens, const uint32_t* __restrict__ chunk_ntok,
                const uint32_t* __restrict__ pre_tokens, const uint32_t* __restrict__ chunk_start,
                const uint32_t* __restrict__ chunk_pre, size_t n, uint32_t seg_size,
                const uint32_t* __restrict__ seg_block, const uint32_t* __restrict__ block_first,
                const uint32_t* __restrict__ block_code, const uint32_t* __restrict__ block_header,
                const uint32_t* __restrict__ block_hbits, const unsigned long long* __restrict__ block_off,
                const unsigned long long* __restrict__ seg_scan, uint32_t nseg, bool last_batch,
                uint32_t* __restrict__ out, unsigned long long base_bit) {
  __shared__ c::BlockCode bc;  // len and code used; the header is read from global
  __shared__ unsigned long long chunk_bits[kChunksPerSeg + 1];
  __shared__ uint32_t stage[kChunksPerSeg][64];
  const unsigned t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const uint32_t seg = blockIdx.x;
  const size_t begin = static_cast<size_t>(seg) * seg_size;
  const uint32_t len = static_cast<uint32_t>(std::min<size_t>(seg_size, n - begin));
  const uint32_t nchunks = (len + c::kChunk - 1) / c::kChunk;
  const uint32_t blk = seg_block[seg], first = block_first[blk];
  const bool block_end = seg + 1 == nseg || seg_block[seg + 1] != blk;
  for (unsigned i = t; i < c::kNumSyms; i += blockDim.x) {
    const uint32_t v = block_code[static_cast<size_t>(blk) * c::kNumSyms + i];
    bc.code[i] = static_cast<uint16_t>(v);
    bc.len[i] = static_cast<uint8_t>(v >> 16);
  }
  __syncthreads();
  const size_t chunk0 = begin / c::kChunk;
  // A chunk's tokens: the re-parsed ones (pre), then the speculative ones from `start`.
  const uint32_t npre = warp < nchunks ? chunk_pre[chunk0 + warp] : 0;
  const uint32_t start = warp < nchunks ? chunk_start[chunk0 + warp] : 0;
  const uint32_t ntok = warp < nchunks ? npre + chunk_ntok[chunk0 + warp] - start : 0;
  const uint32_t* spec = tokens + begin + static_cast<size_t>(warp) * c::kChunk + start - npre;
  const uint32_t* pre = pre_tokens + begin + static_cast<size_t>(warp) * c::kChunk;
  auto token = [&](uint32_t i) { return i < npre ? pre[i] : spec[i]; };
  unsigned long long mybits = 0;
  for (uint32_t i = lane; i < ntok; i += 32) {
    uint64_t pat;
    mybits += c::token_bits(bc, token(i), &pat);
  }
  for (int o = 16; o > 0; o >>= 1) mybits += __shfl_xor_sync(kFull, mybits, o);
  if (lane == 0) chunk_bits[warp + 1] = mybits;
  __syncthreads();
  if (t == 0) {
    chunk_bits[0] = 0;
    for (int k = 1; k <= kChunksPerSeg; ++k) chunk_bits[k] += chunk_bits[k - 1];  // now: start of chunk k
  }
  __syncthreads();
  // Where this segment's tokens start: its block's start, header, earlier segments of the block.
  const unsigned long long block_bit = base_bit + block_off[blk];
  const uint32_t hbits = block_hbits[blk];
  const unsigned long long seg_bit = block_bit + hbits + (seg_scan[seg] - seg_scan[first]);
  if (seg == first)  // the block's header (words of its header buffer, shifted into place)
    for (uint32_t w = t; w * 32 < hbits; w += blockDim.x) {
      const int k = static_cast<int>(std::min<uint32_t>(32, hbits - w * 32));
      const uint32_t v = block_header[static_cast<size_t>(blk) * c::kHeaderWords + w];
      or_bits_global(out, block_bit + w * 32ull, k == 32 ? v : v & ((1u << k) - 1), k);
    }
  // Tokens, 32 at a time per warp: a warp scan gives each its bit position; bits are ORed
  // into a shared staging line, then each touched word goes out with one global OR.
  uint32_t* st = stage[warp];
  unsigned long long pos = seg_bit + chunk_bits[warp];
  for (uint32_t g = 0; g < ntok; g += 32) {
    const uint32_t i = g + lane;
    uint64_t pat = 0;
    const uint32_t nb = i < ntok ? c::token_bits(bc, token(i), &pat) : 0;
    uint32_t incl = nb;
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t v = __shfl_up_sync(kFull, incl, o);
      if (lane >= static_cast<unsigned>(o)) incl += v;
    }
    const uint32_t group_bits = __shfl_sync(kFull, incl, 31);
    const unsigned long long w0 = pos >> 5;
    st[lane] = 0;
    st[lane + 32] = 0;
    __syncwarp();
    if (nb) {
      const uint32_t rel = static_cast<uint32_t>(pos & 31) + (incl - nb);
      const unsigned long long v = pat << (rel & 31);
      const uint32_t w = rel >> 5;
      atomicOr(&st[w], static_cast<uint32_t>(v));
      if ((rel & 31) + nb > 32) atomicOr(&st[w + 1], static_cast<uint32_t>(v >> 32));
      if ((rel & 31) + nb > 64) atomicOr(&st[w + 2], static_cast<uint32_t>(pat >> (64 - (rel & 31))));
    }
    __syncwarp();
    const uint32_t nwords = static_cast<uint32_t>((pos & 31) + group_bits + 31) >> 5;
    for (uint32_t w = lane; w < nwords; w += 32)
      if (st[w]) atomicOr(out + w0 + w, st[w]);
    __syncwarp();
    pos += group_bits;
  }
  if (t == 0 && block_end) {
    unsigned long long p = seg_bit + chunk_bits[nchunks];
    or_bits_global(out, p, bc.code[c::kEob], bc.len[c::kEob]);
    p += bc.len[c::kEob];
    if (seg == nseg - 1 && !last_batch) {  // batch end: empty stored block, 3 zero bits, align, 0000 FFFF
      p = (p + 3 + 7) & ~7ull;
      or_bits_global(out, p + 16, 0xFFFFull, 16);
    }
  }
}

__global__ void zero_kernel(uint32_t* p, size_t words) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    p[i] = 0;
}

// Level 0: stored blocks of 65535 bytes at `out` (byte addressed).
__global__ void stored_kernel(const uint8_t* __restrict__ in, size_t n, uint8_t* __restrict__ out) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t b = i / 65535, o = i - b * 65535;
    uint8_t* blk = out + b * 65540;
    blk[5 + o] = in[i];
    if (o == 0) {
      const size_t k = std::min<size_t>(65535, n - b * 65535);
      blk[0] = b * 65535 + k == n ? 1 : 0;
      blk[1] = static_cast<uint8_t>(k);
      blk[2] = static_cast<uint8_t>(k >> 8);
      blk[3] = static_cast<uint8_t>(~k);
      blk[4] = static_cast<uint8_t>(~k >> 8);
    }
  }
}

// ------------------------------------------------------------------ checksums
constexpr uint32_t kAdlerMod = 65521;
constexpr size_t kPiece = 128;

// Adler-32: a = 1 + sum b_i, b = n + sum (n - i) b_i (mod 65521). Each thread sums one
// 128-byte piece; its share of b is its weighted sum plus its plain sum times the bytes after it.
__global__ void adler_kernel(const uint8_t* __restrict__ d, size_t n, unsigned long long* acc) {
  const size_t piece = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  unsigned long long s1 = 0, s2 = 0;
  const size_t start = piece * kPiece;
  if (start < n) {
    const size_t end = min(n, start + kPiece);
    const uint32_t l = static_cast<uint32_t>(end - start);
    for (uint32_t j = 0; j < l; ++j) {
      const uint32_t b = d[start + j];
      s1 += b;
      s2 += static_cast<unsigned long long>(l - j) * b;
    }
    const unsigned long long after = n - end;
    s2 = (s2 + (after % kAdlerMod) * s1) % kAdlerMod;
    s1 %= kAdlerMod;
  }
  for (int o = 16; o > 0; o >>= 1) {
    s1 += __shfl_xor_sync(kFull, s1, o);
    s2 += __shfl_xor_sync(kFull, s2, o);
  }
  if ((threadIdx.x & 31) == 0 && (s1 | s2)) {
    atomicAdd(acc, s1);
    atomicAdd(acc + 1, s2);
  }
}

// CRC-32 arithmetic modulo the polynomial (reflected), as zlib's crc32_combine.
constexpr uint32_t kPoly = 0xEDB88320u;
__device__ __host__ uint32_t multmodp(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = b & 1 ? (b >> 1) ^ kPoly : b >> 1;
  }
  return p;
}
__constant__ uint32_t c_x2n[32];  // x^(2^k) mod p
__constant__ uint32_t c_crc_table[256];

__device__ uint32_t x8nmodp(unsigned long long n) {  // x^(8n) mod p
  uint32_t p = 1u << 31;
  int k = 3;
  while (n) {
    if (n & 1) p = multmodp(c_x2n[k & 31], p);
    n >>= 1;
    ++k;
  }
  return p;
}

// CRC of each 128-byte piece, moved to its place: crc(A|B) = shift(crc(A), |B|) ^ crc(B),
// so the stream's CRC is the XOR of every piece's CRC shifted by the bytes after it.
__global__ void crc_kernel(const uint8_t* __restrict__ d, size_t n, unsigned int* acc) {
  __shared__ uint32_t table[256];
  for (unsigned i = threadIdx.x; i < 256; i += blockDim.x) table[i] = c_crc_table[i];
  __syncthreads();
  const size_t start = (blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x) * kPiece;
  uint32_t v = 0;
  if (start < n) {
    const size_t end = min(n, start + kPiece);
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = start; i < end; ++i) crc = table[(crc ^ d[i]) & 0xFF] ^ (crc >> 8);
    crc = ~crc;
    v = n - end ? multmodp(x8nmodp(n - end), crc) : crc;
  }
  for (int o = 16; o > 0; o >>= 1) v ^= __shfl_xor_sync(kFull, v, o);
  if ((threadIdx.x & 31) == 0 && v) atomicXor(acc, v);
}

// Once per process, and landed before any kernel reads them (copy_to_device_now()).
void init_crc_tables() {
  static std::once_flag once;
  std::call_once(once, [] {
    uint32_t table[256], x2n[32];
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t v = i;
      for (int k = 0; k < 8; ++k) v = (v & 1) ? kPoly ^ (v >> 1) : v >> 1;
      table[i] = v;
    }
    uint32_t p = 1u << 30;  // x^1
    x2n[0] = p;
    for (int k = 1; k < 32; ++k) x2n[k] = p = multmodp(p, p);
    void *table_at = nullptr, *x2n_at = nullptr;
    VFP_CUDA(cudaGetSymbolAddress(&table_at, c_crc_table));
    VFP_CUDA(cudaGetSymbolAddress(&x2n_at, c_x2n));
    copy_to_device_now(table_at, table, sizeof(table));
    copy_to_device_now(x2n_at, x2n, sizeof(x2n));
  });
}

unsigned grid_for(size_t items, unsigned block) {
  return static_cast<unsigned>(std::max<size_t>(1, std::min<size_t>((items + block - 1) / block, 65535u * 8)));
}

// Adler-32 from the kernel's accumulated sums of n bytes (a = 1 + sum, b = n + weighted sum).
__host__ __device__ inline uint32_t adler_value(const unsigned long long* acc, size_t n) {
  const uint32_t a = static_cast<uint32_t>((1 + acc[0]) % kAdlerMod);
  const uint32_t b = static_cast<uint32_t>((n % kAdlerMod + acc[1]) % kAdlerMod);
  return (b << 16) | a;
}

// The checksum kernels over n bytes, one thread per 128-byte piece, into `acc` (zeroed by
// the caller).
void launch_adler(const uint8_t* d, size_t n, unsigned long long* acc, StreamHandle s) {
  if (!n) return;
  adler_kernel<<<grid_for((n + kPiece - 1) / kPiece, 256), 256, 0, s>>>(d, n, acc);
  VFP_CUDA_LAUNCHED("adler_kernel");
}
void launch_crc(const uint8_t* d, size_t n, unsigned int* acc, StreamHandle s) {
  if (!n) return;
  crc_kernel<<<grid_for((n + kPiece - 1) / kPiece, 256), 256, 0, s>>>(d, n, acc);
  VFP_CUDA_LAUNCHED("crc_kernel");
}

// Writes the container around the body once the checksums are in: zlib trailer (Adler-32,
// big-endian) or gzip trailer (CRC-32, size mod 2^32, little-endian).
__global__ void trailer_kernel(uint8_t* out, const unsigned long long* adler_acc, const unsigned int* crc_acc, size_t n,
                               DeflateContainer c) {
  if (c == DeflateContainer::Zlib) {
    const uint32_t v = adler_value(adler_acc, n);
    for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(v >> (24 - 8 * i));
  } else {
    const uint32_t v = *crc_acc, sz = static_cast<uint32_t>(n);
    for (int i = 0; i < 4; ++i) {
      out[i] = static_cast<uint8_t>(v >> (8 * i));
      out[4 + i] = static_cast<uint8_t>(sz >> (8 * i));
    }
  }
}

// ------------------------------------------------------------------ PNG rows
// One block per row: the five filtered versions' sums of |signed byte| (libpng's heuristic,
// lowest filter type on ties), then the chosen one written after its filter-type byte.
__device__ __forceinline__ uint8_t px(const uint8_t* row, int i, int ch, bool swap) {
  if (!swap || ch < 3) return row[i];
  const int k = i % ch;
  return k == 3 ? row[i] : row[i - k + 2 - k];
}
__global__ void png_filter_kernel(const uint8_t* __restrict__ img, size_t pitch, int width, int height, int ch,
                                  bool swap, uint8_t* __restrict__ outrows) {
  const int y = blockIdx.x;
  const int rowbytes = width * ch;
  const uint8_t* row = img + static_cast<size_t>(y) * pitch;
  const uint8_t* up = y > 0 ? row - pitch : nullptr;
  uint32_t sums[5] = {0, 0, 0, 0, 0};
  for (int i = threadIdx.x; i < rowbytes; i += blockDim.x) {
    const int x = px(row, i, ch, swap), a = i >= ch ? px(row, i - ch, ch, swap) : 0;
    const int b = up ? px(up, i, ch, swap) : 0, cc = up && i >= ch ? px(up, i - ch, ch, swap) : 0;
    for (int f = 0; f < 5; ++f) {
      sums[f] += png::signed_magnitude(png::filtered(f, x, a, b, cc));
    }
  }
  __shared__ uint32_t tot[5];
  if (threadIdx.x < 5) tot[threadIdx.x] = 0;
  __syncthreads();
  for (int f = 0; f < 5; ++f) {
    uint32_t v = sums[f];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(&tot[f], v);
  }
  __syncthreads();
  int best = 0;
  for (int f = 1; f < 5; ++f)
    if (tot[f] < tot[best]) best = f;
  uint8_t* o = outrows + static_cast<size_t>(y) * (rowbytes + 1);
  if (threadIdx.x == 0) o[0] = static_cast<uint8_t>(best);
  for (int i = threadIdx.x; i < rowbytes; i += blockDim.x) {
    const int x = px(row, i, ch, swap), a = i >= ch ? px(row, i - ch, ch, swap) : 0;
    const int b = up ? px(up, i, ch, swap) : 0, cc = up && i >= ch ? px(up, i - ch, ch, swap) : 0;
    o[1 + i] = png::filtered(best, x, a, b, cc);
  }
}

struct PngFrame {    // the bytes around the zlib stream
  uint8_t head[41];  // signature, IHDR chunk, IDAT length (patched on the device) and type
};
__global__ void png_finish_kernel(uint8_t* out, PngFrame f, const unsigned long long* zlen_ptr,
                                  const unsigned int* crc) {
  const unsigned long long z = *zlen_ptr;
  for (int i = 0; i < 41; ++i) out[i] = f.head[i];
  for (int i = 0; i < 4; ++i) out[33 + i] = static_cast<uint8_t>(z >> (24 - 8 * i));
  uint8_t* tail = out + 41 + z;
  for (int i = 0; i < 4; ++i) tail[i] = static_cast<uint8_t>(*crc >> (24 - 8 * i));
  const uint8_t iend[12] = {0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xAE, 0x42, 0x60, 0x82};
  for (int i = 0; i < 12; ++i) tail[4 + i] = iend[i];
}

}  // namespace

// ------------------------------------------------------------------ encoder
struct DeflateEncoder::Impl {
  DeviceBuffer in, dist, last, tokens, pre_tokens, chunk_start, chunk_pre, bitmap, seg_ntok, seg_block, block_first,
      seg_bits, seg_scan, ntok, hist, code, header, hbits, bytes, off, scan_tmp, small, png_rows;
  Event e[6];
  Stream side;  // checksums
  uint8_t* pinned = nullptr;
  size_t pinned_size = 0;
  ~Impl() {
    if (pinned) host_free_pinned(pinned);
  }
  uint8_t* host(size_t need) {
    if (pinned_size < need) {
      if (pinned) host_free_pinned(pinned);
      pinned = nullptr;
      pinned_size = std::max(need, pinned_size + pinned_size / 2);
      pinned = static_cast<uint8_t*>(host_alloc_pinned(pinned_size));
    }
    return pinned;
  }
  void grow(DeviceBuffer& b, size_t need, const char* what) {
    if (b.size() < need) b = DeviceBuffer(std::max(need, b.size() + b.size() / 2), what);
  }
};

DeflateEncoder::DeflateEncoder() : impl_(new Impl) { init_crc_tables(); }
DeflateEncoder::~DeflateEncoder() { delete impl_; }

size_t DeflateEncoder::compress_device(const uint8_t* d_in, size_t n, const deflate::Options& opt, DeflateContainer ct,
                                       StreamHandle s, size_t prefix) {
  Impl& m = *impl_;
  const int level = std::clamp(opt.level, 0, 9);
  const size_t seg = deflate::segment_size(opt);
  const size_t head = ct == DeflateContainer::Zlib ? 2 : ct == DeflateContainer::Gzip ? 10 : 0;
  const size_t trail = ct == DeflateContainer::Zlib ? 4 : ct == DeflateContainer::Gzip ? 8 : 0;
  const size_t nseg_all = (n + seg - 1) / seg;
  const size_t worst = level == 0 ? n + 5 * (n / 65535 + 1) : 2 * n + nseg_all * 700 + 64;
  const size_t cap = (prefix + head + worst + trail + 64 + 3) / 4 * 4;
  if (out_.size() < cap) out_ = DeviceBuffer(cap, "DEFLATE output");
  m.grow(m.small, 64, "DEFLATE checksums and counters");
  auto* adler_acc = reinterpret_cast<unsigned long long*>(m.small.get());
  auto* crc_acc = reinterpret_cast<unsigned int*>(m.small.get() + 16);
  auto* total_dev = reinterpret_cast<unsigned long long*>(m.small.get() + 24);
  uint8_t* out = out_.get();
  m.e[0].record(s);
  // The packer ORs bits into zeroed words (from the word holding the body's first byte; the
  // container header is written after this).
  if (n && level > 0) {
    zero_kernel<<<grid_for(cap / 4, 256), 256, 0, s>>>(reinterpret_cast<uint32_t*>(out) + (prefix + head) / 4,
                                                       cap / 4 - (prefix + head) / 4);
    VFP_CUDA_LAUNCHED("zero_kernel");
  }
  // Container header.
  if (head) {
    uint8_t h[10];
    if (ct == DeflateContainer::Zlib) {
      const uint8_t flevel = level <= 1 ? 0 : level <= 5 ? 1 : level == 6 ? 2 : 3;
      uint8_t flg = static_cast<uint8_t>(flevel << 6);
      flg = static_cast<uint8_t>(flg + (31 - (0x78 * 256 + flg) % 31) % 31);
      h[0] = 0x78;
      h[1] = flg;
    } else {
      const uint8_t g[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, static_cast<uint8_t>(level >= 9 ? 2 : level <= 1 ? 4 : 0),
                             255};
      std::memcpy(h, g, 10);
    }
    VFP_CUDA(cudaMemcpyAsync(out + prefix, h, head, cudaMemcpyHostToDevice, s));
  }
  // Checksums of the input, on a side stream: they overlap the encoder's kernels (which leave
  // most of the memory bandwidth unused) and join before the trailer.
  memset_async(m.small.get(), 0, 24, s);
  m.e[1].record(s);
  stream_wait(m.side.get(), m.e[1]);
  if (ct == DeflateContainer::Zlib) launch_adler(d_in, n, adler_acc, m.side.get());
  if (ct == DeflateContainer::Gzip) launch_crc(d_in, n, crc_acc, m.side.get());
  m.e[2].record(m.side.get());
  const size_t body = prefix + head;
  size_t written = 0;
  float t_chain = 0, t_parse = 0, t_codes = 0, t_pack = 0;
  if (n == 0) {
    const uint8_t empty[2] = {0x03, 0x00};
    VFP_CUDA(cudaMemcpyAsync(out + body, empty, 2, cudaMemcpyHostToDevice, s));
    written = 2;
  } else if (level == 0) {
    stored_kernel<<<grid_for(n, 256), 256, 0, s>>>(d_in, n, out + body);
    VFP_CUDA_LAUNCHED("stored_kernel");
    written = n + 5 * ((n + 65534) / 65535);
  } else {
    const c::LevelParams lp = c::level_params(level, opt.filtered);
    const size_t batch = std::min(n, deflate::batch_size(opt));
    const size_t bseg = (batch + seg - 1) / seg;
    // Chains with 32 KiB in front (the previous batch's tail: the next batch's history), and
    // the segments' last-position tables (entry 0: the previous batch's last segment).
    m.grow(m.dist, (c::kWindow + batch) * 2, "DEFLATE chains");
    m.grow(m.last, (bseg + 1) * (size_t(2) << c::kHashBits), "DEFLATE history tables");
    m.grow(m.tokens, batch * 4, "DEFLATE tokens");
    m.grow(m.ntok, (batch / c::kChunk + 2) * 4, "DEFLATE chunk token counts");
    m.grow(m.chunk_start, (batch / c::kChunk + 2) * 4, "DEFLATE chunk token starts");
    m.grow(m.chunk_pre, (batch / c::kChunk + 2) * 4, "DEFLATE chunk re-parsed counts");
    m.grow(m.pre_tokens, batch * 4, "DEFLATE re-parsed tokens");
    m.grow(m.bitmap, (batch / c::kChunk + 2) * kBitmapWords * 4, "DEFLATE path bitmaps");
    m.grow(m.hist, bseg * c::kNumSyms * 4, "DEFLATE histograms");
    m.grow(m.code, bseg * c::kNumSyms * 4, "DEFLATE codes");
    m.grow(m.header, bseg * c::kHeaderWords * 4, "DEFLATE headers");
    m.grow(m.hbits, bseg * 4, "DEFLATE header sizes");
    m.grow(m.bytes, (bseg + 1) * 8, "DEFLATE block sizes");
    m.grow(m.off, (bseg + 1) * 8, "DEFLATE block offsets");
    m.grow(m.seg_ntok, (bseg + 1) * 8, "DEFLATE segment token counts");
    m.grow(m.seg_block, (bseg + 1) * 4, "DEFLATE segment blocks");
    m.grow(m.block_first, (bseg + 2) * 4, "DEFLATE block starts");
    m.grow(m.seg_bits, (bseg + 1) * 8, "DEFLATE segment bits");
    m.grow(m.seg_scan, (bseg + 1) * 8, "DEFLATE segment bit offsets");
    size_t scan_bytes = 0;
    VFP_CUDA(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, reinterpret_cast<unsigned long long*>(m.bytes.get()),
                                           reinterpret_cast<unsigned long long*>(m.off.get()), bseg + 1, s));
    m.grow(m.scan_tmp, scan_bytes, "DEFLATE scan");
    // history + segment + pad, the segment's chains
    const size_t parse_smem = (lp.history ? c::kWindow : 0) + seg + 16 + seg * 2;
    VFP_CUDA(cudaFuncSetAttribute(chains_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 2 << c::kHashBits));
    VFP_CUDA(
        cudaFuncSetAttribute(parse_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(parse_smem)));
    for (size_t b0 = 0; b0 < n; b0 += batch) {
      const size_t bn = std::min(batch, n - b0);
      const uint32_t ns = static_cast<uint32_t>((bn + seg - 1) / seg);
      const bool last = b0 + bn == n;
      const uint8_t* src = d_in + b0;
      auto* dist = reinterpret_cast<uint16_t*>(m.dist.get()) + c::kWindow;
      auto* lastpos = reinterpret_cast<uint16_t*>(m.last.get());
      auto* tokens = reinterpret_cast<uint32_t*>(m.tokens.get());
      auto* ntok = reinterpret_cast<uint32_t*>(m.ntok.get());
      auto* hist = reinterpret_cast<uint32_t*>(m.hist.get());
      auto* code = reinterpret_cast<uint32_t*>(m.code.get());
      auto* header = reinterpret_cast<uint32_t*>(m.header.get());
      auto* hbits = reinterpret_cast<uint32_t*>(m.hbits.get());
      auto* bytes = reinterpret_cast<unsigned long long*>(m.bytes.get());
      auto* off = reinterpret_cast<unsigned long long*>(m.off.get());
      auto* seg_ntok = reinterpret_cast<unsigned long long*>(m.seg_ntok.get());
      auto* seg_block = reinterpret_cast<uint32_t*>(m.seg_block.get());
      auto* block_first = reinterpret_cast<uint32_t*>(m.block_first.get());
      auto* nblocks = reinterpret_cast<uint32_t*>(m.small.get() + 40);
      auto* seg_bits = reinterpret_cast<unsigned long long*>(m.seg_bits.get());
      auto* seg_scan = reinterpret_cast<unsigned long long*>(m.seg_scan.get());
      auto* chunk_start = reinterpret_cast<uint32_t*>(m.chunk_start.get());
      auto* chunk_pre = reinterpret_cast<uint32_t*>(m.chunk_pre.get());
      auto* pre_tokens = reinterpret_cast<uint32_t*>(m.pre_tokens.get());
      auto* bitmap = reinterpret_cast<uint32_t*>(m.bitmap.get());
      m.e[3].record(s);
      chains_kernel<<<ns, 32, 2 << c::kHashBits, s>>>(src, bn, n - b0, static_cast<uint32_t>(seg), dist,
                                                      lp.history ? lastpos : nullptr);
      VFP_CUDA_LAUNCHED("chains_kernel");
      m.e[4].record(s);
      VFP_CUDA(cudaMemsetAsync(bitmap, 0, ((bn + c::kChunk - 1) / c::kChunk) * kBitmapWords * 4, s));
      parse_kernel<<<ns, 32 * kChunksPerSeg, parse_smem, s>>>(src, bn, n - b0, b0, static_cast<uint32_t>(seg), dist,
                                                              lastpos, lp, tokens, ntok, hist, seg_ntok, bitmap,
                                                              pre_tokens, chunk_start, chunk_pre);
      VFP_CUDA_LAUNCHED("parse_kernel");
      if (!last && lp.history) {  // carry the history to the next batch
        memcpy_d2d_async(dist - c::kWindow, dist + bn - c::kWindow, c::kWindow * 2, s);
        memcpy_d2d_async(lastpos, lastpos + (static_cast<size_t>(ns) << c::kHashBits), size_t(2) << c::kHashBits, s);
      }
      m.e[5].record(s);
      // Segments into blocks, each block's code, each segment's bits, then the offsets.
      VFP_CUDA(cudaMemsetAsync(block_first, 0xFF, (ns + 2) * 4, s));
      blocks_kernel<<<1, 1, 0, s>>>(seg_ntok, ns, seg_block, block_first, nblocks);
      VFP_CUDA_LAUNCHED("blocks_kernel");
      VFP_CUDA(cudaMemsetAsync(bytes + ns, 0, 8, s));
      VFP_CUDA(cudaMemsetAsync(seg_bits + ns, 0, 8, s));
      codes_kernel<<<ns, kCodesThreads, 0, s>>>(hist, block_first, nblocks, last, code, header, hbits, bytes);
      VFP_CUDA_LAUNCHED("codes_kernel");
      seg_bits_kernel<<<(ns + 7) / 8, 256, 0, s>>>(hist, seg_block, code, ns, seg_bits);
      VFP_CUDA_LAUNCHED("seg_bits_kernel");
      VFP_CUDA(cub::DeviceScan::ExclusiveSum(m.scan_tmp.get(), scan_bytes, bytes, off, ns + 1, s));
      VFP_CUDA(cub::DeviceScan::ExclusiveSum(m.scan_tmp.get(), scan_bytes, seg_bits, seg_scan, ns + 1, s));
      Event after_codes;
      after_codes.record(s);
      pack_kernel<<<ns, 32 * kChunksPerSeg, 0, s>>>(
          tokens, ntok, pre_tokens, chunk_start, chunk_pre, bn, static_cast<uint32_t>(seg), seg_block, block_first,
          code, header, hbits, off, seg_scan, ns, last, reinterpret_cast<uint32_t*>(out), (body + written) * 8ull);
      VFP_CUDA_LAUNCHED("pack_kernel");
      unsigned long long bits = 0;
      VFP_CUDA(cudaMemcpyAsync(&bits, off + ns, 8, cudaMemcpyDeviceToHost, s));
      Event done;
      done.record(s);
      done.synchronize();
      t_chain += Event::elapsed_ms(m.e[3], m.e[4]);
      t_parse += Event::elapsed_ms(m.e[4], m.e[5]);
      t_codes += Event::elapsed_ms(m.e[5], after_codes);
      t_pack += Event::elapsed_ms(after_codes, done);
      written += last ? (bits + 7) / 8 : (bits + 3 + 7) / 8 + 4;  // final padding or the sync flush
    }
  }
  const unsigned long long wr = written;
  VFP_CUDA(cudaMemcpyAsync(total_dev, &wr, 8, cudaMemcpyHostToDevice, s));
  stream_wait(s, m.e[2]);  // the checksums are in
  if (trail) {
    trailer_kernel<<<1, 1, 0, s>>>(out + body + written, adler_acc, crc_acc, n, ct);
    VFP_CUDA_LAUNCHED("trailer_kernel");
  }
  Event end;
  end.record(s);
  end.synchronize();
  timings_.chains = t_chain;
  timings_.parse = t_parse;
  timings_.codes = t_codes;
  timings_.pack = t_pack;
  timings_.checksum = Event::elapsed_ms(m.e[1], m.e[2]);
  timings_.total = Event::elapsed_ms(m.e[0], end);
  return head + written + trail;
}

std::vector<uint8_t> DeflateEncoder::compress(const uint8_t* host, size_t n, const deflate::Options& opt,
                                              DeflateContainer c) {
  Stream s;
  impl_->grow(impl_->in, std::max<size_t>(n, 1), "DEFLATE input");
  if (n) memcpy_h2d_async(impl_->in.get(), host, n, s.get());
  const size_t z = compress_device(impl_->in.get(), n, opt, c, s.get());
  std::vector<uint8_t> v(z);
  memcpy_d2h_async(v.data(), out_.get(), z, s.get());
  s.synchronize();
  return v;
}

std::vector<uint8_t> DeflateEncoder::encode_png(const uint8_t* d_img, size_t pitch, int width, int height, int channels,
                                                bool swap_rb, int level, StreamHandle s) {
  const HostBytes b = encode_png_pinned(d_img, pitch, width, height, channels, swap_rb, level, s);
  return std::vector<uint8_t>(b.data, b.data + b.size);
}

DeflateEncoder::HostBytes DeflateEncoder::encode_png_pinned(const uint8_t* d_img, size_t pitch, int width, int height,
                                                            int channels, bool swap_rb, int level, StreamHandle s) {
  Impl& m = *impl_;
  const size_t rowbytes = static_cast<size_t>(width) * channels + 1;
  const size_t raw = rowbytes * height;
  m.grow(m.png_rows, raw, "PNG rows");
  png_filter_kernel<<<height, 256, 0, s>>>(d_img, pitch, width, height, channels, swap_rb, m.png_rows.get());
  VFP_CUDA_LAUNCHED("png_filter_kernel");
  deflate::Options o;
  o.level = level;
  o.filtered = true;
  const size_t z = compress_device(m.png_rows.get(), raw, o, DeflateContainer::Zlib, s, 41);
  // CRC of "IDAT" + data; the zlib length goes in as the chunk length.
  PngFrame f{};
  const std::vector<uint8_t> head = png_head(width, height, channels);
  std::memcpy(f.head, head.data(), 33);
  std::memcpy(f.head + 37, "IDAT", 4);
  auto* crc_acc = reinterpret_cast<unsigned int*>(m.small.get() + 16);
  auto* zlen = reinterpret_cast<unsigned long long*>(m.small.get() + 32);
  const unsigned long long zz = z;
  VFP_CUDA(cudaMemcpyAsync(zlen, &zz, 8, cudaMemcpyHostToDevice, s));
  VFP_CUDA(cudaMemcpyAsync(out_.get() + 37, "IDAT", 4, cudaMemcpyHostToDevice, s));
  memset_async(crc_acc, 0, 4, s);
  launch_crc(out_.get() + 37, z + 4, crc_acc, s);
  png_finish_kernel<<<1, 1, 0, s>>>(out_.get(), f, zlen, crc_acc);
  VFP_CUDA_LAUNCHED("png_finish_kernel");
  const size_t total = 41 + z + 16;
  uint8_t* host = m.host(total);
  memcpy_d2h_async(host, out_.get(), total, s);
  VFP_CUDA(cudaStreamSynchronize(s));
  return {host, total};
}

uint32_t adler32_device(const uint8_t* d, size_t n, StreamHandle s) {
  DeviceBuffer acc(16, "Adler-32 sums");
  memset_async(acc.get(), 0, 16, s);
  launch_adler(d, n, reinterpret_cast<unsigned long long*>(acc.get()), s);
  unsigned long long h[2];
  memcpy_d2h_async(h, acc.get(), 16, s);
  VFP_CUDA(cudaStreamSynchronize(s));
  return adler_value(h, n);
}

uint32_t crc32_device(const uint8_t* d, size_t n, StreamHandle s) {
  init_crc_tables();
  DeviceBuffer acc(4, "CRC-32");
  memset_async(acc.get(), 0, 4, s);
  launch_crc(d, n, reinterpret_cast<unsigned int*>(acc.get()), s);
  uint32_t v = 0;
  memcpy_d2h_async(&v, acc.get(), 4, s);
  VFP_CUDA(cudaStreamSynchronize(s));
  return v;
}

}  // namespace vfp::cuda
