#include "cuda/mmp_search.hpp"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math_constants.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "codecs/mmp/mmp.hpp"
#include "codecs/mmp/postfilter.hpp"
#include "codecs/mmp/predict.hpp"
#include "codecs/mmp/range_coder.hpp"
#include "codecs/mmp/sum_order.hpp"
#include "core/error.hpp"
#include "core/frame.hpp"
#include "core/gpu.hpp"
#include "core/log.hpp"
#include "cuda/mmp_postfilter.hpp"

namespace vfp::cuda {

namespace {

constexpr int kScales = mmp::kSearchScales;
constexpr int kMaxIndex = 4096;  // 12-bit dictionary indices
constexpr int kThreads = 128;
constexpr int kMaxResidues = 11;  // candidate modes of a unit

constexpr int kGroup = 8;     // segments of one scale searched together: each element is read once for them
constexpr int kMmaRows = 16;  // the same on tensor cores: a matrix product's 16 rows
constexpr int kMmaMinN = 8;   // segment sizes searched on tensor cores: 8 .. 256 samples
constexpr int kMmaMaxN = 256;

// Up to kGroup (tensor cores: kMmaRows) segments of one scale: segments g0 .. g0 + count - 1
// of the scale, numbered across the query's residues (g = k * segments_per_residue + position).
// Large segments make a task long (its elements times their samples times the group): such
// a task's elements are dealt to `chunks` thread blocks (element i to chunk i % (128 *
// chunks) / 128; on tensor cores, tiles of 8 elements to warps round robin); the last of
// them to finish combines their (J, index) minima, or, for a block search's 4x4 units, the
// chain link that reads them (LeafLane::defer).
struct Task {
  int lw, lh, g0, count, out;  // out: the scale's offset in a residue's leaf table
  int chunk, chunks;
  int counter;  // chunked tasks: the counter of the task's finished chunks
  int mma;      // 1: the dot products on tensor cores (leaf_rows_mma)
};
constexpr int kMaxChunks = 32;
constexpr int kChainChunks = 16;  // the most chunks of a 4x4 unit's tasks (combined by its chain link)

struct ScaleArgs {
  const int16_t* data[kScales];
  const int* norms[kScales];  // each element's sum of squared samples
  int count[kScales];
  double leaf_bits[kScales];
};
// Rate order. Within a round the index costs are fixed, and an element's J is at least its
// rate, so a search that visits a scale's elements cheapest first can stop at the first
// element whose rate exceeds the best J so far: nothing after it can win or tie. Measured
// on the CPU encoder (a noisy 1080p gray frame, λ 25, full dictionaries), a segment's best J
// lies below the rates of 91% / 67% / 44% of the elements at 4 / 8 / 16 samples. So a round first copies its small
// scales (1 to 16 samples) in order of cost: a counting sort on 1/16-bit buckets (the order
// within a bucket is whatever the atomics give; the minimum does not depend on it). The
// rate of a position's bucket floor is then a bound that no element at or after it
// undercuts. The search takes its minima over the elements' own indices, so the answer is
// the exhaustive search's.
constexpr int kSortBuckets = 1024, kSortPerBit = 16;
__device__ inline int sort_bucket(double bits) {
  return static_cast<int>(fmin(bits * kSortPerBit, static_cast<double>(kSortBuckets - 1)));
}
// The rate of a bucket's floor (k / 16 bits, at most the cost of every element in it or
// after it): rounding is monotonic, so it is at most each such element's rate.
__device__ inline double bucket_rate(int k, double lambda, double leaf) {
  return __dmul_rn(lambda, __dadd_rn(static_cast<double>(k) / kSortPerBit, leaf));
}
// An element's squared norm (below 2^20 up to 16 samples) and its index (12 bits) in one word.
constexpr int kNormBits = 20;
static_assert(16 * 255 * 255 < (1 << kNormBits) && kMaxIndex <= (1 << (32 - kNormBits)), "norm and index fit");
// Sum order. A segment x's SSE against an element d is at least (sum x - sum d)^2 / n
// (Cauchy-Schwarz on x - d), so elements whose sum lies far from the segment's cannot win:
// the scales of 4 to 16 samples are also copied in order of their samples' sum (a counting
// sort on sum buckets), and small_rows_sum() skips whole runs of 32 of them by that bound
// (the integer rules: codecs/mmp/sum_order.hpp).
struct SortedScales {
  int16_t* data[kScales];    // the elements in rate order (null: the scale is not sorted)
  unsigned* norms[kScales];  // index << kNormBits | squared norm
  double* bits[kScales];
  int16_t* sum_data[kScales];  // the same in sum order (null: not a sum_scale())
  unsigned* sum_norms[kScales];
  double* sum_bits[kScales];
  int* zero;  // [kScales]: the sum order's first position whose sum is at least 0
};
__host__ __device__ constexpr int sample_count(int s) { return 1 << (s % 6 + s / 6); }
__host__ __device__ constexpr bool sorted_scale(int s) { return s % 6 + s / 6 <= 4; }  // 1 to 16 samples
__host__ __device__ constexpr bool sum_scale(int s) { return sorted_scale(s) && s % 6 + s / 6 >= 2; }

// What the leaf kernel reads per search, in device memory (a captured graph's kernels keep
// their arguments; the dictionary's counts and the costs change from block to block).
struct SearchConsts {
  ScaleArgs sc;
  double lambda;
  // The round's answer tables (answers_kernel), or null: the best (J, index) of every value
  // a segment of 1 or 2 samples can take, which leaf_small_kernel looks up.
  const double* ans_j;
  const int* ans_i;
  // The round's small scales in order of index cost (sort_scales_kernel), or null.
  const SortedScales* sorted;
};

// One search's leaf-table buffers for units of one size, and what it reads: a lane's (one
// per block of a round, the grid's z dimension).
struct LeafLane {
  const int* residues;  // K residues of N x N
  const SearchConsts* consts;
  const double* bits;  // [scale][4096] index costs
  double* out_j;       // the leaf table, K x table
  int* out_i;
  double* part_j;  // chunked tasks' partial tables, part_stride apart
  int* part_i;
  size_t part_stride;
  int* counters;  // chunked tasks' finished chunks
  // 1: chunked tasks leave their partial tables for the consumer to combine (the chain link
  // of a 4x4 unit reads them in its first round trip anyway): no fence, atomic and second
  // read on the critical path.
  int defer;
};

// (J, index) lexicographic minimum; index INT_MAX: none yet.
__device__ inline void take_min(double& bj, int& bi, double oj, int oi) {
  if (oj < bj || (oj == bj && oi < bi)) bj = oj, bi = oi;
}

// |x|^2 + |d|^2 - 2 x.d, in 64 bits (each term fits 32), as the double J adds to.
__device__ inline long long sse_int(int seg_sq, int norm, int dot) {
  return static_cast<long long>(seg_sq) + norm - 2LL * dot;
}
__device__ inline double sse_of(int seg_sq, int norm, int dot) {
  return static_cast<double>(sse_int(seg_sq, norm, dot));
}

// The filter before an element's J is computed: the rate is never negative, so J =
// fl(SSE + rate) >= SSE (SSE is exact in a double, rounding is monotonic), and an element
// whose SSE exceeds the best J so far cannot win or tie. In integers: SSE > bj exactly when
// SSE > floor(bj). `limit` is floor(bj), or the largest value while there is no best.
__device__ inline long long j_limit(double bj) { return bj < 9.0e18 ? __double2ll_rd(bj) : LLONG_MAX; }

// What both forms of the leaf search share: the task's segment samples and scale.
struct LeafTask {
  Task t;
  int n, lw, N, nx, per_residue, s;
  const int* residues;
  // The first sample of the task's segment g: sample q is then seg[in_segment(q)], with no
  // division per sample.
  __device__ const int* segment(int g) const {
    const int gg = t.g0 + g, k = gg / per_residue, at = gg - k * per_residue;
    return residues + static_cast<size_t>(k) * N * N + (at / nx) * (1 << t.lh) * N + (at % nx) * (1 << t.lw);
  }
  __device__ int in_segment(int q) const { return (q >> t.lw) * N + (q & ((1 << t.lw) - 1)); }
};

// The scalar form. Its segments in shared memory, its threads striding over the scale's
// elements, each element's samples read once and compared with every segment.
// SSE = |x|^2 + |d|^2 - 2 x.d in exact integers (each term at most 1024 * 255^2): the
// squared norms are computed once (segments here, elements at upload), the inner loop is
// one multiply-add per sample and segment, and each thread takes two elements at a time so
// that a segment sample read from shared memory serves both. Leaves each segment's (J,
// index) minimum over the chunk's elements in row_j / row_i.
__device__ void leaf_rows_scalar(const LeafTask& lt, const SearchConsts* consts, const double* bits, int* seg,
                                 double* row_j, int* row_i) {
  const Task& t = lt.t;
  const int n = lt.n;
  __shared__ int seg_sq[kGroup];
  __shared__ const int* rows[kGroup];
  if (threadIdx.x < t.count) rows[threadIdx.x] = lt.segment(threadIdx.x);
  __syncthreads();
  const int log_n = t.lw + t.lh;
  for (int idx = threadIdx.x; idx < t.count * n; idx += blockDim.x)
    seg[idx] = rows[idx >> log_n][lt.in_segment(idx & (n - 1))];
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int g = warp; g < t.count; g += blockDim.x >> 5) {
    int sq = 0;
    for (int q = lane; q < n; q += 32) sq += seg[g * n + q] * seg[g * n + q];
    for (int o = 16; o > 0; o >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, o);
    if (lane == 0) seg_sq[g] = sq;
  }
  __syncthreads();
  const ScaleArgs& sc = consts->sc;
  const double lambda = consts->lambda;
  const int16_t* data = sc.data[lt.s];
  const int* norms = sc.norms[lt.s];
  const int count = sc.count[lt.s];
  const double leaf = sc.leaf_bits[lt.s];
  const double* b = bits + static_cast<size_t>(lt.s) * kMaxIndex;
  double bj[kGroup];
  int bi[kGroup];
#pragma unroll
  for (int g = 0; g < kGroup; ++g) bj[g] = CUDART_INF, bi[g] = INT_MAX;
  const int stride = blockDim.x * t.chunks;
  for (int i = threadIdx.x + t.chunk * blockDim.x; i < count; i += 2 * stride) {
    const int i2 = i + stride;
    const bool two = i2 < count;
    const int16_t* e = data + static_cast<size_t>(i) * n;
    const int16_t* e2 = data + static_cast<size_t>(two ? i2 : i) * n;
    int dot[kGroup] = {}, dot2[kGroup] = {};
    for (int q = 0; q < n; ++q) {
      const int ev = e[q], ev2 = e2[q];
#pragma unroll
      for (int g = 0; g < kGroup; ++g)
        if (g < t.count) {
          const int sv = seg[g * n + q];
          dot[g] += sv * ev;
          dot2[g] += sv * ev2;
        }
    }
    const double rate = __dmul_rn(lambda, __dadd_rn(b[i], leaf));
    const int norm = norms[i];
#pragma unroll
    for (int g = 0; g < kGroup; ++g)
      if (g < t.count) take_min(bj[g], bi[g], __dadd_rn(sse_of(seg_sq[g], norm, dot[g]), rate), i);
    if (two) {
      const double rate2 = __dmul_rn(lambda, __dadd_rn(b[i2], leaf));
      const int norm2 = norms[i2];
#pragma unroll
      for (int g = 0; g < kGroup; ++g)
        if (g < t.count) take_min(bj[g], bi[g], __dadd_rn(sse_of(seg_sq[g], norm2, dot2[g]), rate2), i2);
    }
  }
  __shared__ double wj[kGroup][kThreads / 32];
  __shared__ int wi[kGroup][kThreads / 32];
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    if (g >= t.count) break;  // the same for the whole block
    for (int o = 16; o > 0; o >>= 1) {
      const double oj = __shfl_down_sync(0xffffffffu, bj[g], o);
      const int oi = __shfl_down_sync(0xffffffffu, bi[g], o);
      take_min(bj[g], bi[g], oj, oi);
    }
    if ((threadIdx.x & 31) == 0) wj[g][warp] = bj[g], wi[g][warp] = bi[g];
  }
  __syncthreads();
  if (threadIdx.x < t.count) {
    const int g = threadIdx.x;
    double j = wj[g][0];
    int i = wi[g][0];
    for (int q = 1; q < kThreads / 32; ++q) take_min(j, i, wj[g][q], wi[g][q]);
    row_j[g] = j, row_i[g] = i;
  }
}

// The tensor-core form: x.d as a matrix product in half precision (mma.sync m16n8k16,
// single-precision sums), exact: every sample (-255..255) is an exact half, every product
// (below 2^16) exact in single precision, and every partial sum of a segment of at most 256
// samples is an integer below 256 * 255 * 255 < 2^24 in magnitude, so the sums are exact
// whatever order and alignment the tensor core adds them in (it keeps at least 24 bits
// below the largest term's lead). A task's (up to) 16 segments are the product's rows,
// padded with zeros to 16 rows and whole 16-sample steps; every warp takes tiles of 8
// elements (the columns) and loads their samples straight from the dictionary.
// Gpu.MmpLeafSearchKernelMatchesItsDefinition checks dot products up to 256 * 255^2.
constexpr int kHalfPad = 16;  // halves after each segment row: conflict-free 8-byte fragment loads

__device__ inline void mma_f16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                               uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
  __trap();  // the host uses this form only where the kernel was built for sm_80 or later
#endif
}

// Two int16 samples (-255..255) of a word as two exact halves: in offset binary less 0x1A00
// a lane (no lane borrows: each is at least 0x7F01), a lane is the half 1536 + v (0x6400
// is 1024, in steps of 1 up to 2048); subtracting 1536 is exact.
__device__ inline uint32_t halves_of(uint32_t w) {
  const uint32_t t = (w ^ 0x80008000u) - 0x1A001A00u;
  const __half2 h = __hsub2(*reinterpret_cast<const __half2*>(&t), __half2half2(__ushort_as_half(0x6600)));
  return *reinterpret_cast<const uint32_t*>(&h);
}

// K16: 16-sample steps of the padded segment (n <= 16 * K16). The product's k order is
// permuted so that a thread's four samples of a step are adjacent (one 8-byte load): its
// fragment registers {0, 1} of k = 2 tig.. and {8, 9} + 2 tig.. hold samples 4 tig.. and
// 4 tig + 2.., in A and B alike, which leaves the dot product unchanged.
template <int K16>
__device__ void leaf_rows_mma(const LeafTask& lt, const SearchConsts* consts, const double* bits, __half* rows16,
                              double* row_j, int* row_i) {
  const Task& t = lt.t;
  const int n = lt.n, npad = 16 * K16, stride = npad + kHalfPad;
  int* seg_sq = reinterpret_cast<int*>(rows16 + kMmaRows * stride);
  __shared__ const int* rows[kMmaRows];
  if (threadIdx.x < t.count) rows[threadIdx.x] = lt.segment(threadIdx.x);
  __syncthreads();
  for (int idx = threadIdx.x; idx < kMmaRows * npad; idx += blockDim.x) {
    const int r = idx / npad, q = idx - r * npad;
    const int v = r < t.count && q < n ? rows[r][lt.in_segment(q)] : 0;
    rows16[r * stride + q] = __int2half_rn(v);
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
  const int warps = blockDim.x >> 5;
  for (int r = warp; r < kMmaRows; r += warps) {
    int sq = 0;
    if (r < t.count)
      for (int q = lane; q < n; q += 32) {
        const int v = rows[r][lt.in_segment(q)];
        sq += v * v;
      }
    for (int o = 16; o > 0; o >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, o);
    if (lane == 0) seg_sq[r] = sq;
  }
  __syncthreads();
  uint2 a0[K16], a1[K16];  // rows g and g + 8: .x fragment register 0 / 1, .y register 2 / 3
#pragma unroll
  for (int st = 0; st < K16; ++st) {
    const int k = st * 16 + tig * 4;
    a0[st] = *reinterpret_cast<const uint2*>(rows16 + g * stride + k);
    a1[st] = *reinterpret_cast<const uint2*>(rows16 + (g + 8) * stride + k);
  }
  const ScaleArgs& sc = consts->sc;
  const double lambda = consts->lambda;
  const int16_t* data = sc.data[lt.s];
  const int* norms = sc.norms[lt.s];
  const int count = sc.count[lt.s];
  const double leaf = sc.leaf_bits[lt.s];
  const double* b = bits + static_cast<size_t>(lt.s) * kMaxIndex;
  const bool row0 = g < t.count, row1 = g + 8 < t.count;
  const int sq0 = seg_sq[g], sq1 = seg_sq[g + 8];
  double bj0 = CUDART_INF, bj1 = CUDART_INF;
  int bi0 = INT_MAX, bi1 = INT_MAX;
  long long lim0 = LLONG_MAX, lim1 = LLONG_MAX;
  for (int tile = t.chunk * warps + warp; tile * 8 < count; tile += t.chunks * warps) {
    const int e_load = tile * 8 + g;  // this thread's column for the B fragments
    const bool have = e_load < count;
    const int16_t* e = data + static_cast<size_t>(have ? e_load : 0) * n;
    float c[4] = {};
#pragma unroll
    for (int st = 0; st < K16; ++st) {
      const int k = st * 16 + tig * 4;
      uint2 w = make_uint2(0, 0);
      if (have && k < n) w = __ldg(reinterpret_cast<const uint2*>(e + k));
      mma_f16(c, a0[st].x, a1[st].x, a0[st].y, a1[st].y, halves_of(w.x), halves_of(w.y));
    }
    // c[0], c[1]: row g, columns 2 tig and 2 tig + 1; c[2], c[3]: row g + 8, the same columns.
#pragma unroll
    for (int col = 0; col < 2; ++col) {
      const int i = tile * 8 + tig * 2 + col;
      if (i >= count) break;
      const int norm = norms[i];
      const long long e0 = sse_int(sq0, norm, __float2int_rn(c[col]));
      const long long e1 = sse_int(sq1, norm, __float2int_rn(c[2 + col]));
      const bool try0 = row0 && e0 <= lim0, try1 = row1 && e1 <= lim1;
      if (!try0 && !try1) continue;  // most elements: neither J can win (j_limit())
      const double rate = __dmul_rn(lambda, __dadd_rn(b[i], leaf));
      if (try0) take_min(bj0, bi0, __dadd_rn(static_cast<double>(e0), rate), i), lim0 = j_limit(bj0);
      if (try1) take_min(bj1, bi1, __dadd_rn(static_cast<double>(e1), rate), i), lim1 = j_limit(bj1);
    }
  }
  // The 4 threads of a row, then the warps.
  for (int o = 1; o < 4; o <<= 1) {
    take_min(bj0, bi0, __shfl_xor_sync(0xffffffffu, bj0, o), __shfl_xor_sync(0xffffffffu, bi0, o));
    take_min(bj1, bi1, __shfl_xor_sync(0xffffffffu, bj1, o), __shfl_xor_sync(0xffffffffu, bi1, o));
  }
  // Through the segments' staging, which no thread reads any more.
  __syncthreads();
  double* wj = reinterpret_cast<double*>(rows16);  // [warp][row]
  int* wi = reinterpret_cast<int*>(wj + warps * kMmaRows);
  if (tig == 0) {
    wj[warp * kMmaRows + g] = bj0, wi[warp * kMmaRows + g] = bi0;
    wj[warp * kMmaRows + g + 8] = bj1, wi[warp * kMmaRows + g + 8] = bi1;
  }
  __syncthreads();
  if (threadIdx.x < t.count) {
    const int r = threadIdx.x;
    double j = wj[r];
    int i = wi[r];
    for (int w = 1; w < warps; ++w) take_min(j, i, wj[w * kMmaRows + r], wi[w * kMmaRows + r]);
    row_j[r] = j, row_i[r] = i;
  }
}

// The task's rows (its segments' minima over the chunk's elements) into the leaf table, or
// for a chunked task into the partial tables, the task's last chunk to finish combining
// them (a second kernel would add a launch to the block search's critical path) unless
// `defer` leaves that to the consumer. Its counter is left at 0 for the next search on
// this stream. Call with every thread, after a __syncthreads that makes row_j / row_i
// visible.
__device__ void put_rows(const LeafTask& lt, int table, const double* row_j, const int* row_i, double* out_j,
                         int* out_i, double* part_j, int* part_i, size_t part_stride, int* counters, int defer) {
  const Task& t = lt.t;
  const int per_residue = lt.per_residue;
  for (int g = threadIdx.x; g < t.count; g += blockDim.x) {
    const double j = row_j[g];
    const int i = row_i[g];
    const int gg = t.g0 + g, k = gg / per_residue, at = gg - k * per_residue;
    const size_t o = static_cast<size_t>(k) * table + t.out + at;
    if (t.chunks == 1) {
      out_j[o] = j;
      out_i[o] = i == INT_MAX ? -1 : i;
    } else {
      part_j[t.chunk * part_stride + o] = j;
      part_i[t.chunk * part_stride + o] = i;
    }
  }
  if (t.chunks == 1 || defer) return;
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(&counters[t.counter], 1) == t.chunks - 1;
    if (last) counters[t.counter] = 0;
  }
  __syncthreads();
  if (!last) return;
  for (int g = threadIdx.x; g < t.count; g += blockDim.x) {
    const int gg = t.g0 + g, k = gg / per_residue, at = gg - k * per_residue;
    const size_t o = static_cast<size_t>(k) * table + t.out + at;
    double j = __ldcg(&part_j[o]);
    int i = __ldcg(&part_i[o]);
    for (int c = 1; c < t.chunks; ++c)
      take_min(j, i, __ldcg(&part_j[c * part_stride + o]), __ldcg(&part_i[c * part_stride + o]));
    out_j[o] = j;
    out_i[o] = i == INT_MAX ? -1 : i;
  }
}

// The leaf arguments of the grid's block: a search of one block takes them as a kernel
// parameter (no load on its critical path; `lanes` may then be null), a round from the array.
__device__ inline LeafLane leaf_lane_of(const LeafLane& first, const LeafLane* lanes) {
  if (gridDim.z == 1) return first;
  return lanes[blockIdx.z];
}

__device__ inline LeafTask leaf_task(const Task* tasks, const int* residues, int N) {
  LeafTask lt;
  lt.t = tasks[blockIdx.x];
  lt.n = 1 << (lt.t.lw + lt.t.lh);
  lt.N = N;
  lt.nx = N >> lt.t.lw;
  lt.per_residue = lt.nx * (N >> lt.t.lh);
  lt.s = lt.t.lw + 6 * lt.t.lh;
  lt.residues = residues;
  return lt;
}

// Small segments (1..16 samples), up to 64 of one scale a task: the form for the 4x4
// units, whose searches form the block's critical path, and for the small scales of the
// others. Each thread keeps one segment in registers and takes every P-th element of the
// tiles the block stages in shared memory (samples, norms and rates, each read and
// computed once per block), so an element's samples are read from global memory once for
// all the task's segments. Tiles are dealt to the task's chunks round robin.
//
// The arithmetic is in single precision, and exact: samples, products, the dot product and
// SSE = |x|^2 + |d|^2 - 2 x.d of at most 16 samples are integers below 2^24 (|x|^2, |d|^2
// and |x.d| are each at most 16 * 255^2), so every float operation here is exact, and the
// float pipe issues twice the integer multiply-adds. Rows of 8 and 16 samples are padded
// by 4 floats, so that the few elements a warp reads at once lie in different banks.
constexpr int kSmallMaxN = 16, kSmallRows = 64, kSmallTile = 256;
constexpr int kPer = kSmallTile / kThreads;  // elements a thread stages (the kernel runs kThreads)
__host__ __device__ constexpr int small_stride(int n) { return n >= 8 ? n + 4 : n; }

struct __align__(16) SmallShared {
  float tile[kSmallTile * small_stride(kSmallMaxN)];
  double rate[kSmallTile];
  float norm[kSmallTile];
  union {
    struct {  // the reduction after the loop
      double red_j[kThreads];
      int red_i[kThreads];
    };
    struct {  // rate order: the tile's elements' indices and bounds
      uint16_t index[kSmallTile];
      float bound[kSmallTile];
    };
  };
  int todo[kSmallRows];  // the rows the answer tables do not hold
  unsigned need[kSmallRows / 32];
};

// Answer tables. In a round of many blocks every block searches its segments against the
// same dictionary and costs, and most residues are small: 94% of the 2-sample segments of
// the 1080p test clip have both samples in -31..31. So such a round first finds, once, the
// best element of every value a 1-sample segment can take (-255..255) and of every
// 2-sample value in that window (answers_kernel), and leaf_small_kernel looks its segments
// up there, searching only the others. An entry is the same (J, index) minimum over all of
// the scale's elements, with the same arithmetic, as the search itself: the bytes do not
// change. Entries: the 1x1 scale, then the 2x1 and 1x2 scales (s = 1, 6), each region
// padded to whole warps.
constexpr int kAnsW = 31, kAnsSide = 2 * kAnsW + 1;
constexpr int kAnsRegion1 = 512, kAnsRegion2 = 4000;
constexpr int kAnsEntries = kAnsRegion1 + 2 * kAnsRegion2;
constexpr int kAnsChunks = 8;  // each value's elements dealt to this many thread blocks
__host__ __device__ constexpr int ans_base(int s) {
  return s == 0 ? 0 : s == 1 ? kAnsRegion1 : kAnsRegion1 + kAnsRegion2;
}

// The entries' minima over 1 / kAnsChunks of the elements each (blockIdx.y), 32 entries a
// thread block and 4 threads an entry; the partial minima in part_j / part_i.
__global__ void __launch_bounds__(kThreads)
    answers_kernel(const SearchConsts* c, const double* bits, double* part_j, int* part_i) {
  const int r = threadIdx.x & 31, p = threadIdx.x >> 5;
  const int entry = blockIdx.x * 32 + r;
  int s = 0, n = 1, v0 = entry - 255, v1 = 0;
  bool valid = entry < 2 * 255 + 1;
  if (entry >= kAnsRegion1) {
    s = entry < kAnsRegion1 + kAnsRegion2 ? 1 : 6;
    n = 2;
    const int k = entry - ans_base(s);
    v0 = k % kAnsSide - kAnsW, v1 = k / kAnsSide - kAnsW;
    valid = k < kAnsSide * kAnsSide;
  }
  const int count = c->sc.count[s];
  const int16_t* data = c->sc.data[s];
  const double leaf = c->sc.leaf_bits[s], lambda = c->lambda;
  const double* b = bits + static_cast<size_t>(s) * kMaxIndex;
  const int from = count * static_cast<int>(blockIdx.y) / kAnsChunks;
  const int to = count * static_cast<int>(blockIdx.y + 1) / kAnsChunks;
  double bj = CUDART_INF;
  int bi = INT_MAX;
  long long limit = LLONG_MAX;
  if (valid)
    for (int e = from + p; e < to; e += kThreads / 32) {
      const int16_t* d = data + static_cast<size_t>(e) * n;
      const int t0 = v0 - d[0], t1 = n == 2 ? v1 - d[1] : 0;
      const int sse = t0 * t0 + t1 * t1;
      if (sse > limit) continue;  // j_limit()'s filter
      take_min(bj, bi, __dadd_rn(static_cast<double>(sse), __dmul_rn(lambda, __dadd_rn(b[e], leaf))), e);
      limit = j_limit(bj);
    }
  __shared__ double wj[kThreads];
  __shared__ int wi[kThreads];
  wj[threadIdx.x] = bj, wi[threadIdx.x] = bi;
  __syncthreads();
  if (p == 0) {
    for (int q = 1; q < kThreads / 32; ++q) take_min(bj, bi, wj[q * 32 + r], wi[q * 32 + r]);
    part_j[blockIdx.y * kAnsEntries + entry] = bj;
    part_i[blockIdx.y * kAnsEntries + entry] = bi;
  }
}

// The chunks' minima combined into the tables.
__global__ void answers_combine_kernel(const double* part_j, const int* part_i, double* ans_j, int* ans_i) {
  const int entry = blockIdx.x * blockDim.x + threadIdx.x;
  if (entry >= kAnsEntries) return;
  double j = part_j[entry];
  int i = part_i[entry];
  for (int c = 1; c < kAnsChunks; ++c) take_min(j, i, part_j[c * kAnsEntries + entry], part_i[c * kAnsEntries + entry]);
  ans_j[entry] = j, ans_i[entry] = i;
}

// An element of NS samples in one load and one store (a scale's elements lie NS samples
// apart from the 256-byte aligned start of its storage).
template <int NS>
__device__ inline void copy_samples(int16_t* to, const int16_t* from) {
  struct alignas(NS >= 8 ? 16 : 2 * NS) Samples {
    int16_t v[NS];
  };
  *reinterpret_cast<Samples*>(to) = *reinterpret_cast<const Samples*>(from);
}

// A scale's copy in rate order (blockIdx.y 0) or, for sum_scale()s, in sum order (1).
__global__ void __launch_bounds__(1024) sort_scales_kernel(const SearchConsts* c, const double* bits, int BL) {
  const int s = blockIdx.x;
  const bool by_sum = blockIdx.y == 1;
  if (!sorted_scale(s) || s % 6 > BL || s / 6 > BL || (by_sum && !sum_scale(s))) return;
  const SortedScales& so = *c->sorted;
  const int count = c->sc.count[s], n = sample_count(s);
  const double* b = bits + static_cast<size_t>(s) * kMaxIndex;
  __shared__ int start[kSortBuckets];
  __shared__ uint16_t key[kMaxIndex];
  start[threadIdx.x] = 0;
  __syncthreads();
  // Many elements share a cost (indices never coded yet): the lanes of a warp with the same
  // bucket add to it once.
  const unsigned lane = threadIdx.x & 31u, below = (1u << lane) - 1u;
  const int16_t* __restrict__ data = c->sc.data[s];
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    int k;
    if (by_sum) {
      int sum = 0;
      for (int q = 0; q < n; ++q) sum += data[static_cast<size_t>(i) * n + q];
      k = mmp::sum_order::bucket(sum, n);
    } else {
      k = sort_bucket(b[i]);
    }
    key[i] = static_cast<uint16_t>(k);
    const unsigned peers = __match_any_sync(__activemask(), k);
    if ((peers & below) == 0) atomicAdd(&start[k], __popc(peers));
  }
  __syncthreads();
  // Exclusive scan of the counts (one bucket a thread).
  static_assert(kSortBuckets == 1024, "one bucket a thread");
  const int own = start[threadIdx.x];
  for (int d = 1; d < kSortBuckets; d <<= 1) {
    const int v = threadIdx.x >= d ? start[threadIdx.x - d] : 0;
    __syncthreads();
    start[threadIdx.x] += v;
    __syncthreads();
  }
  start[threadIdx.x] -= own;
  if (by_sum && static_cast<int>(threadIdx.x) == mmp::sum_order::bucket(0, n)) so.zero[s] = start[threadIdx.x];
  __syncthreads();
  // Every pointer in registers (the stores could alias the constants otherwise), each
  // element moved in one load and one store.
  const int* __restrict__ norms = c->sc.norms[s];
  int16_t* __restrict__ to_data = by_sum ? so.sum_data[s] : so.data[s];
  unsigned* __restrict__ to_norms = by_sum ? so.sum_norms[s] : so.norms[s];
  double* __restrict__ to_bits = by_sum ? so.sum_bits[s] : so.bits[s];
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    const int k = key[i];
    const unsigned peers = __match_any_sync(__activemask(), k);
    const int leader = __ffs(peers) - 1;
    int first = 0;
    if (static_cast<int>(lane) == leader) first = atomicAdd(&start[k], __popc(peers));
    const int pos = __shfl_sync(peers, first, leader) + __popc(peers & below);
    switch (n) {
      case 1:
        copy_samples<1>(to_data + pos, data + i);
        break;
      case 2:
        copy_samples<2>(to_data + 2 * pos, data + 2 * i);
        break;
      case 4:
        copy_samples<4>(to_data + 4 * pos, data + 4 * i);
        break;
      case 8:
        copy_samples<8>(to_data + 8 * pos, data + 8 * i);
        break;
      default:
        copy_samples<16>(to_data + 16 * pos, data + 16 * i);
        break;
    }
    to_norms[pos] = static_cast<unsigned>(i) << kNormBits | static_cast<unsigned>(norms[i]);
    to_bits[pos] = b[i];
  }
}

// A segment's entry in the answer tables, or -1 where they do not hold its value.
template <int NS>
__device__ inline int answer_slot(const LeafTask& lt, const int* segment) {
  const int v0 = segment[0];
  if constexpr (NS == 1) {
    return v0 >= -255 && v0 <= 255 ? v0 + 255 : -1;
  } else {
    const int v1 = segment[lt.in_segment(1)];
    if (v0 < -kAnsW || v0 > kAnsW || v1 < -kAnsW || v1 > kAnsW) return -1;
    return ans_base(lt.s) + (v0 + kAnsW) + (v1 + kAnsW) * kAnsSide;
  }
}

// The filter of j_limit() in floats: floor(bj), or 2^24 (above every SSE here) while bj is
// not below it.
__device__ inline float j_limit_f(double bj) { return bj < 16777216.0 ? static_cast<float>(floor(bj)) : 16777216.0f; }

// A scale's arguments as leaf_small_kernel stages them (all scales, with its task's load).
struct SmallScale {
  const int16_t* data;
  const int* norms;
  int count;
  double leaf_bits;
};

// An element of NS samples as one load (NS <= 4) or 16-byte loads: a scale's elements lie
// NS samples apart from the (256-byte aligned) start of its storage.
template <int NS>
struct alignas(NS >= 8 ? 16 : 2 * NS) SmallElem {
  int16_t v[NS];
};

// SSE = |a|^2 + |b|^2 - 2 a.b of NS samples held in registers (`a`, squared norm `a_sq`)
// against a row of shared memory (`b`, 16-byte aligned where NS % 4 == 0), in exact float
// arithmetic (see above): one multiply-add a sample, the row read in float4 loads.
template <int NS>
__device__ inline float small_sse(const float (&a)[NS], float a_sq, const float* b, float b_sq) {
  float dot = 0.0f;
  if constexpr (NS % 4 == 0) {
#pragma unroll
    for (int q = 0; q < NS; q += 4) {
      const float4 v = *reinterpret_cast<const float4*>(b + q);
      dot = __fmaf_rn(a[q], v.x, dot);
      dot = __fmaf_rn(a[q + 1], v.y, dot);
      dot = __fmaf_rn(a[q + 2], v.z, dot);
      dot = __fmaf_rn(a[q + 3], v.w, dot);
    }
  } else {
#pragma unroll
    for (int q = 0; q < NS; ++q) dot = __fmaf_rn(a[q], b[q], dot);
  }
  return __fmaf_rn(-2.0f, dot, __fadd_rn(a_sq, b_sq));
}

template <int NS, bool ordered>
__device__ void small_rows(const LeafTask& lt, const SmallScale& sc, double lambda, const double* bits,
                           const double* ans_j, const int* ans_i, const SortedScales* sorted, SmallShared& sh,
                           double* row_j, int* row_i) {
  constexpr int kStride = small_stride(NS);
  const Task& t = lt.t;
  float* tile = sh.tile;
  double* rate = sh.rate;
  float* norm = sh.norm;
  double* red_j = sh.red_j;
  int* red_i = sh.red_i;
  // The rows to search: all of them, or those the answer tables do not hold (the others
  // are looked up, and the block's threads are dealt to the rest).
  int rows = t.count;
  bool answered = false;
  if constexpr (NS <= 2) {
    if (ans_j) {
      answered = true;
      static_assert(kSmallRows <= 2 * 32 && kThreads >= kSmallRows, "two warps decide the rows");
      if (threadIdx.x < kSmallRows) {
        bool need = false;
        if (threadIdx.x < t.count) {
          const int slot = answer_slot<NS>(lt, lt.segment(threadIdx.x));
          need = slot < 0;
          if (!need) row_j[threadIdx.x] = ans_j[slot], row_i[threadIdx.x] = ans_i[slot];
        }
        const unsigned m = __ballot_sync(0xffffffffu, need);
        if ((threadIdx.x & 31) == 0) sh.need[threadIdx.x >> 5] = m;
      }
      __syncthreads();
      rows = __popc(sh.need[0]) + __popc(sh.need[1]);
      if (threadIdx.x < kSmallRows) {
        const unsigned m = sh.need[threadIdx.x >> 5], lane = threadIdx.x & 31;
        if (m >> lane & 1u)
          sh.todo[__popc(m & ((1u << lane) - 1u)) + (threadIdx.x >= 32 ? __popc(sh.need[0]) : 0)] = threadIdx.x;
      }
      __syncthreads();
    }
  }
  if constexpr (ordered) {
    // The rows' minima so far live in row_j / row_i (the threads of a row fold theirs in
    // after each tile), and the rows left are listed in sh.todo.
    if (threadIdx.x < rows) {
      const int rw = answered ? sh.todo[threadIdx.x] : threadIdx.x;
      if (!answered) sh.todo[threadIdx.x] = rw;
      row_j[rw] = CUDART_INF, row_i[rw] = INT_MAX;
    }
    answered = true;
    __syncthreads();
  }
  // The block's threads dealt to the rows: P threads a row, R (a power of two) rows apart.
  int R, P, r, p, row;
  bool mine;
  float seg[NS], sq;
  const auto deal = [&] {
    R = 1;
    while (R < rows) R <<= 1;
    P = blockDim.x / R, r = threadIdx.x % R, p = threadIdx.x / R;
    mine = r < rows;
    row = answered && mine ? sh.todo[r] : r;
    int sq_i = 0;
    const int* segment = lt.segment(mine ? row : 0);
#pragma unroll
    for (int q = 0; q < NS; ++q) {
      const int v = mine ? segment[lt.in_segment(q)] : 0;
      seg[q] = static_cast<float>(v);
      sq_i += v * v;
    }
    sq = static_cast<float>(sq_i);
  };
  deal();
  // In rate order (a round's sorted copy) or in index order.
  const int16_t* data = ordered ? sorted->data[lt.s] : sc.data;
  const unsigned* norms = ordered ? sorted->norms[lt.s] : reinterpret_cast<const unsigned*>(sc.norms);
  const int count = sc.count;
  const double leaf = sc.leaf_bits;
  const double* b = ordered ? sorted->bits[lt.s] : bits + static_cast<size_t>(lt.s) * kMaxIndex;
  double bj = CUDART_INF;
  int bi = INT_MAX;
  float limit = 16777216.0f;
  bool more = rows > 0;  // rate order: some row's next element may still win
  for (int base = t.chunk * kSmallTile; more && base < count; base += t.chunks * kSmallTile) {
    const int m = min(kSmallTile, count - base);
    // The tile's elements, whole, a thread kPer of them: every load is issued before the
    // first store (one round trip), each element's samples in one or two vector loads.
    SmallElem<NS> el[kPer];
    double eb[kPer];
    unsigned en[kPer];
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int e = threadIdx.x + k * kThreads;
      if (e < m) {
        el[k] = reinterpret_cast<const SmallElem<NS>*>(data)[base + e];
        eb[k] = b[base + e];
        en[k] = norms[base + e];
      }
    }
    if constexpr (!ordered) __syncthreads();  // the last tile is consumed (rate order: at the loop's end)
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int e = threadIdx.x + k * kThreads;
      if (e < m) {
#pragma unroll
        for (int q = 0; q < NS; ++q) tile[e * kStride + q] = static_cast<float>(el[k].v[q]);
        rate[e] = __dmul_rn(lambda, __dadd_rn(eb[k], leaf));
        if constexpr (ordered) {
          norm[e] = static_cast<float>(en[k] & ((1u << kNormBits) - 1u));
          sh.index[e] = static_cast<uint16_t>(en[k] >> kNormBits);
          sh.bound[e] = __double2float_rd(bucket_rate(sort_bucket(eb[k]), lambda, leaf));
        } else {
          norm[e] = static_cast<float>(en[k]);
        }
      }
    }
    __syncthreads();
    bool done = !mine;  // this thread's elements from here on cannot win or tie
    if (mine) {
      // The SSE of element e (exact: see above).
      const auto sse_at = [&](int e) { return small_sse<NS>(seg, sq, tile + e * kStride, norm[e]); };
      const auto consider = [&](int e, float sse) {
        if (sse > limit) return;  // j_limit()'s filter
        take_min(bj, bi, __dadd_rn(static_cast<double>(sse), rate[e]), ordered ? sh.index[e] : base + e);
        limit = j_limit_f(bj);
      };
      // Rate order: from element e on, every J exceeds bj.
      const auto beyond = [&](int e) { return ordered && static_cast<double>(sh.bound[e]) > bj; };
      int e = p;
      // Two elements a step (up to 8 samples): their shared loads are in flight together,
      // which the chain of one element's multiply-adds cannot hide alone. The minimum does
      // not depend on the order in which elements are considered.
      if constexpr (NS <= 8)
        for (; e + P < m && !(done = beyond(e)); e += 2 * P) {
          const float s0 = sse_at(e), s1 = sse_at(e + P);
          consider(e, s0);
          consider(e + P, s1);
        }
      for (; !done && e < m && !(done = beyond(e)); e += P) consider(e, sse_at(e));
    }
    if constexpr (ordered) {
      // Each row's minimum (J first, then the least index of that J; J >= 0, so its bits
      // order as the values do), the rows that the next tile could still improve (its
      // elements cost at least its first one's bucket floor), and all threads dealt again
      // to those: a row whose search ends gives its threads to the rows left.
      __syncthreads();  // the tile is consumed
      // Every thread of a row started the tile from the row's (J, index), so the least index
      // among the threads that hold the row's new J is the row's.
      if (mine) atomicMin(reinterpret_cast<unsigned long long*>(&row_j[row]), __double_as_longlong(bj));
      if (mine && p == 0) row_i[row] = INT_MAX;
      const int next = base + t.chunks * kSmallTile;
      const double next_rate = next < count ? bucket_rate(sort_bucket(b[next]), lambda, leaf) : CUDART_INF;
      __syncthreads();
      if (mine && bj == row_j[row]) atomicMin(&row_i[row], bi);
      int kept = 0;
      bool on = false;
      if (threadIdx.x < kSmallRows) {
        if (threadIdx.x < rows) kept = sh.todo[threadIdx.x], on = next_rate <= row_j[kept];
        const unsigned m = __ballot_sync(0xffffffffu, on);
        if ((threadIdx.x & 31) == 0) sh.need[threadIdx.x >> 5] = m;
      }
      __syncthreads();
      rows = __popc(sh.need[0]) + __popc(sh.need[1]);
      if (on) {
        const unsigned m = sh.need[threadIdx.x >> 5], lane = threadIdx.x & 31;
        sh.todo[__popc(m & ((1u << lane) - 1u)) + (threadIdx.x >= 32 ? __popc(sh.need[0]) : 0)] = kept;
      }
      __syncthreads();
      more = rows > 0;
      if (more) {
        deal();
        if (mine) bj = row_j[row], bi = row_i[row], limit = j_limit_f(bj);
      }
    }
  }
  if constexpr (!ordered) {
    red_j[threadIdx.x] = bj, red_i[threadIdx.x] = bi;
    __syncthreads();
    if (mine && p == 0) {
      for (int pp = 1; pp < P; ++pp) take_min(bj, bi, red_j[pp * R + r], red_i[pp * R + r]);
      row_j[row] = bj, row_i[row] = bi;
    }
  }
}

// The sum-order search of segments of 4 to 16 samples (a round's SortedScales): each lane
// of a warp holds one element of a run of 32 in registers and the warp takes the task's
// rows in turn, reading each row's samples from shared memory as a broadcast. Before any
// arithmetic a run is matched against every row at once (a lane tests two rows): a row
// needs the run only if ceil(d^2 / n) + r is at most floor(its best J so far), d being the
// distance from the row's sum to the run's sums and r the run's least rate (rounded down),
// both integers; otherwise every element's J exceeds a J already found (SSE >= (sum x -
// sum d)^2 / n, rate >= r, J = fl(SSE + rate) >= that integer), so it can neither win nor
// tie. A chunk first searches the 32 cheapest elements (the rate order's first), which
// gives every row a bound early, then walks the sum order's runs from sum 0 outward,
// alternating sides; a side ends once no row can need anything beyond a run (the sums of
// the runs beyond are bounded by their buckets). The rows' minima are (J, index) lexicographic over
// every element not ruled out, so the answer is the exhaustive search's; the SSE is the
// exact float arithmetic of small_rows().
constexpr int kWarps = kThreads / 32;
static_assert(kWarps == 4 && mmp::sum_order::kTile == kThreads, "a run a warp; the seed deals rows by r % 4");
struct SumShared {
  float seg[kSmallRows * small_stride(kSmallMaxN)];
  float sq[kSmallRows];
  int sum[kSmallRows];
  int limit[kSmallRows];          // floor of the row's best J so far (rows past the task's: INT_MIN)
  double wj[kWarps][kSmallRows];  // each warp's minima
  int wi[kWarps][kSmallRows];
  // The walk's ends: no row needs a position below end[0] or at or above end[1] (each run of
  // a walk tests what lies beyond it; warps may be at different distances from sum 0).
  int end[2];
};
__device__ inline int j_floor_int(double j) { return j < 2.0e9 ? static_cast<int>(j) : INT_MAX; }  // j >= 0

template <int NS>
__device__ void small_rows_sum(const LeafTask& lt, const SmallScale& sc, double lambda, const SortedScales* sorted,
                               SumShared& sh, double* row_j, int* row_i) {
  namespace so = mmp::sum_order;
  constexpr int kStride = small_stride(NS);
  constexpr unsigned kAll = 0xffffffffu;
  const Task& t = lt.t;
  const int rows = t.count, warp = threadIdx.x >> 5, lane = threadIdx.x & 31, count = sc.count;
  const double leaf = sc.leaf_bits;
  for (int idx = threadIdx.x; idx < rows * NS; idx += kThreads) {
    const int r = idx / NS, q = idx % NS;
    sh.seg[r * kStride + q] = static_cast<float>(lt.segment(r)[lt.in_segment(q)]);
  }
  if (threadIdx.x < kSmallRows) {
    const int r = threadIdx.x;
    int sum = 0, sq = 0;
    if (r < rows) {
      const int* segment = lt.segment(r);
      for (int q = 0; q < NS; ++q) {
        const int v = segment[lt.in_segment(q)];
        sum += v, sq += v * v;
      }
    }
    sh.sum[r] = sum, sh.sq[r] = static_cast<float>(sq);
    sh.limit[r] = r < rows ? INT_MAX : INT_MIN;
    for (int w = 0; w < kWarps; ++w) sh.wj[w][r] = CUDART_INF, sh.wi[w][r] = INT_MAX;
  }
  if (threadIdx.x < 2) sh.end[threadIdx.x] = threadIdx.x ? INT_MAX : INT_MIN;
  __syncthreads();
  volatile int* limit = sh.limit;  // lowered by every warp as it finds better elements
  // No element costs less than the rate order's first bucket floor.
  const int least_rate = count > 0 ? so::rate_floor(bucket_rate(sort_bucket(sorted->bits[lt.s][0]), lambda, leaf)) : 0;
  // The run of 32 at `from` of an order: every row of `rows_of` (a bit a row, the same for
  // rows r and r + 32) that may need it searched; `side` >= 0:
  // a walk's run, which moves that side's end when no row can need anything beyond it.
  const auto run = [&](const int16_t* data, const unsigned* norms, const double* bits, int from, int side,
                       unsigned rows_of) {
    const int e = from + lane;
    const bool valid = e < count;
    SmallElem<NS> el{};
    double b = 0.0;
    unsigned word = 0;
    if (valid) {
      el = reinterpret_cast<const SmallElem<NS>*>(data)[e];
      b = bits[e];
      word = norms[e];
    }
    float x[NS];
    int sum = 0;
#pragma unroll
    for (int q = 0; q < NS; ++q) x[q] = static_cast<float>(el.v[q]), sum += el.v[q];
    const double rate = __dmul_rn(lambda, __dadd_rn(b, leaf));
    const float norm = static_cast<float>(word & ((1u << kNormBits) - 1u));
    const int index = static_cast<int>(word >> kNormBits);
    const int rfloor = valid ? so::rate_floor(rate) : INT_MAX;
    const int lo = __reduce_min_sync(kAll, valid ? sum : INT_MAX);
    const int hi = __reduce_max_sync(kAll, valid ? sum : INT_MIN);
    const int rmin = __reduce_min_sync(kAll, rfloor);
    const auto needs = [&](int r) { return so::bound(so::distance(sh.sum[r], lo, hi), NS, rmin) <= limit[r]; };
    const unsigned need0 = __ballot_sync(kAll, needs(lane)) & rows_of;
    const unsigned need1 = __ballot_sync(kAll, needs(lane + 32)) & rows_of;
    if (side >= 0) {
      // The sums of every later run of this side lie beyond this run's outer bucket.
      const int edge = so::beyond_edge(side, lo, hi, NS);
      const auto beyond = [&](int r) {
        return r < rows && so::may_need_beyond(side, edge, sh.sum[r], NS, least_rate, limit[r]);
      };
      if (!__any_sync(kAll, beyond(lane) || beyond(lane + 32)) && lane == 0) {
        if (side == 1)
          atomicMin(&sh.end[1], from + so::kRun);
        else
          atomicMax(&sh.end[0], from);
      }
    }
#pragma unroll 1
    for (int h = 0; h < 2; ++h) {
      unsigned m = h ? need1 : need0;
      while (m) {
        const int r = h * 32 + __ffs(m) - 1;
        m &= m - 1;
        const float sse = small_sse<NS>(x, norm, sh.seg + r * kStride, sh.sq[r]);
        const int lim = limit[r];
        double j = CUDART_INF;
        // j_limit()'s filter first (SSE is an exact integer here), then J itself.
        if (valid && static_cast<int>(sse) <= lim) j = __dadd_rn(static_cast<double>(sse), rate);
        const bool cand = j < static_cast<double>(lim) + 1.0;  // floor(J) <= lim
        if (__any_sync(kAll, cand)) {
          double bj = cand ? j : CUDART_INF;
          int bi = cand ? index : INT_MAX;
#pragma unroll
          for (int o = 16; o > 0; o >>= 1) take_min(bj, bi, __shfl_xor_sync(kAll, bj, o), __shfl_xor_sync(kAll, bi, o));
          if (lane == 0) {
            double wj = sh.wj[warp][r];
            int wi = sh.wi[warp][r];
            take_min(wj, wi, bj, bi);
            sh.wj[warp][r] = wj, sh.wi[warp][r] = wi;
            atomicMin(&sh.limit[r], j_floor_int(bj));
          }
        }
      }
    }
  };
  // The seed: the 32 cheapest elements, each warp for a quarter of the rows (a larger seed
  // costs more than it saves with dictionaries of 512 elements: vfpipe-mmp-pairs --seed).
  if (count > 0) run(sorted->data[lt.s], sorted->norms[lt.s], sorted->bits[lt.s], 0, -1, 0x11111111u << warp);
  __syncthreads();
  const int tiles = (count + so::kTile - 1) / so::kTile;
  const int zt = min(sorted->zero[lt.s] / so::kTile, max(tiles - 1, 0));
  const int16_t* data = sorted->sum_data[lt.s];
  const unsigned* norms = sorted->sum_norms[lt.s];
  const double* bits = sorted->sum_bits[lt.s];
  for (int k = t.chunk; k < tiles; k += t.chunks) {
    const int tile = so::walk_tile(k, zt, tiles);
    const int side = tile > zt ? 1 : tile < zt ? 0 : -1;
    const int from = tile * so::kTile + warp * so::kRun;
    if (from >= count) continue;
    const volatile int* end = sh.end;
    const bool past = side == 1 ? from >= end[1] : side == 0 ? from + so::kRun <= end[0] : false;
    if (__any_sync(kAll, past)) continue;
    run(data, norms, bits, from, side, kAll);
  }
  __syncthreads();
  if (threadIdx.x < rows) {
    double j = sh.wj[0][threadIdx.x];
    int i = sh.wi[0][threadIdx.x];
    for (int w = 1; w < kWarps; ++w) take_min(j, i, sh.wj[w][threadIdx.x], sh.wi[w][threadIdx.x]);
    row_j[threadIdx.x] = j, row_i[threadIdx.x] = i;
  }
}

// At least 8 thread blocks an SM (64 registers a thread, not 80): the kernel's chains of
// shared loads and multiply-adds are latency-bound, and a round's launch has blocks enough
// to fill the extra room (docs/perf.md, MMP log).
// Mode 0: index order; 1: rate order; 2: rate order, and sum order from 4 samples on.
template <int mode>
__global__ void __launch_bounds__(kThreads, 8)
    leaf_small_kernel(const Task* tasks, const LeafLane first, const LeafLane* lanes, int N, int table) {
  constexpr bool ordered = mode > 0;
  const LeafLane ll = leaf_lane_of(first, lanes);
  const double* bits = ll.bits;
  // Every scale's arguments in the same round trip as the task (which says the scale).
  __shared__ SmallScale scales[kScales];
  __shared__ double lambda;
  __shared__ const double* ans_j;
  __shared__ const int* ans_i;
  __shared__ const SortedScales* sorted;
  const ScaleArgs& sa = ll.consts->sc;
  if (threadIdx.x < kScales)
    scales[threadIdx.x] = {sa.data[threadIdx.x], sa.norms[threadIdx.x], sa.count[threadIdx.x],
                           sa.leaf_bits[threadIdx.x]};
  if (threadIdx.x == kScales) lambda = ll.consts->lambda;
  if (threadIdx.x == kScales + 1) ans_j = ll.consts->ans_j, ans_i = ll.consts->ans_i, sorted = ll.consts->sorted;
  const LeafTask lt = leaf_task(tasks, ll.residues, N);
  __shared__ double row_j[kSmallRows];
  __shared__ int row_i[kSmallRows];
  __shared__ union {
    SmallShared small;
    SumShared sum;
  } sh;
  __syncthreads();
  const SmallScale& sc = scales[lt.s];
  switch (lt.n) {
    case 1:
      small_rows<1, ordered>(lt, sc, lambda, bits, ans_j, ans_i, sorted, sh.small, row_j, row_i);
      break;
    case 2:
      small_rows<2, ordered>(lt, sc, lambda, bits, ans_j, ans_i, sorted, sh.small, row_j, row_i);
      break;
    case 4:
      if constexpr (mode == 2)
        small_rows_sum<4>(lt, sc, lambda, sorted, sh.sum, row_j, row_i);
      else
        small_rows<4, ordered>(lt, sc, lambda, bits, ans_j, ans_i, sorted, sh.small, row_j, row_i);
      break;
    case 8:
      if constexpr (mode == 2)
        small_rows_sum<8>(lt, sc, lambda, sorted, sh.sum, row_j, row_i);
      else
        small_rows<8, ordered>(lt, sc, lambda, bits, ans_j, ans_i, sorted, sh.small, row_j, row_i);
      break;
    default:
      if constexpr (mode == 2)
        small_rows_sum<16>(lt, sc, lambda, sorted, sh.sum, row_j, row_i);
      else
        small_rows<16, ordered>(lt, sc, lambda, bits, ans_j, ans_i, sorted, sh.small, row_j, row_i);
      break;
  }
  __syncthreads();
  put_rows(lt, table, row_j, row_i, ll.out_j, ll.out_i, ll.part_j, ll.part_i, ll.part_stride, ll.counters, ll.defer);
}

// One thread block per task (and chunk): each of its segments' best element by J = SSE +
// lambda * (index bits + leaf flag bits), ties to the lower index, into the leaf table.
__device__ __forceinline__ void leaf_kernel_body(const Task* tasks, const LeafLane& first, const LeafLane* lanes, int N,
                                                 int table) {
  const LeafLane ll = leaf_lane_of(first, lanes);
  const SearchConsts* consts = ll.consts;
  const double* bits = ll.bits;
  const LeafTask lt = leaf_task(tasks, ll.residues, N);
  const Task& t = lt.t;
  // The scalar form's segments (8 of up to 32 x 32 ints) or the tensor form's rows in halves.
  __shared__ __align__(16) int smem[kGroup * 32 * 32];
  __shared__ double row_j[kMmaRows];
  __shared__ int row_i[kMmaRows];
  if (!t.mma) {
    leaf_rows_scalar(lt, consts, bits, smem, row_j, row_i);
  } else {
    __half* rows16 = reinterpret_cast<__half*>(smem);
    switch (lt.n <= 16 ? 1 : lt.n / 16) {
      case 1:
        leaf_rows_mma<1>(lt, consts, bits, rows16, row_j, row_i);
        break;
      case 2:
        leaf_rows_mma<2>(lt, consts, bits, rows16, row_j, row_i);
        break;
      case 4:
        leaf_rows_mma<4>(lt, consts, bits, rows16, row_j, row_i);
        break;
      case 8:
        leaf_rows_mma<8>(lt, consts, bits, rows16, row_j, row_i);
        break;
      default:
        leaf_rows_mma<16>(lt, consts, bits, rows16, row_j, row_i);
        break;
    }
  }
  __syncthreads();
  put_rows(lt, table, row_j, row_i, ll.out_j, ll.out_i, ll.part_j, ll.part_i, ll.part_stride, ll.counters, ll.defer);
}
// At most 128 registers, 4 thread blocks an SM (the tensor-core form would take about 160,
// 3 an SM).
__global__ void __launch_bounds__(kThreads, 4)
    leaf_kernel(const Task* tasks, const LeafLane first, const LeafLane* lanes, int N, int table) {
  leaf_kernel_body(tasks, first, lanes, N, table);
}

// The same in at most 96 registers (some spilled in the tensor-core paths): 5 thread blocks
// an SM instead of 4, for rounds that fill the GPU (docs/perf.md).
__global__ void __launch_bounds__(kThreads, 5)
    leaf_kernel_lean(const Task* tasks, const LeafLane first, const LeafLane* lanes, int N, int table) {
  leaf_kernel_body(tasks, first, lanes, N, table);
}

// The device's duplicate check: per scale an open-addressed table of element index + 1
// (0: empty) by content hash, at most half full, beside each element's hash. The hash only
// finds candidates (contents are compared), and is a sum of per-sample terms, so that a
// warp can compute it in parallel.
constexpr int kTableSize = 2 * kMaxIndex;
__device__ inline uint64_t sample_hash(int q, int v) {
  uint64_t z = (static_cast<uint64_t>(q) << 16 | static_cast<uint16_t>(v)) + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
// Enters element i of hash h (the table has room: at most kMaxIndex of kTableSize slots).
__device__ inline void table_insert(int* table, uint64_t h, int i) {
  for (unsigned at = static_cast<unsigned>(h) & (kTableSize - 1);; at = (at + 1) & (kTableSize - 1))
    if (atomicCAS(&table[at], 0, i + 1) == 0) return;
}

// New dictionary elements, gathered on the host into one upload: per scale, to - from
// elements of n samples, at `at` (in samples) of the uploaded data, for indices [from, to)
// or, where idx_at >= 0, for the indices listed at idx_at (in ints) of the uploaded index
// list (elements a replacing dictionary rewrote).
struct UploadItem {
  int16_t* data;
  int* norms;  // each element's sum of squared samples
  int* table;  // the scale's duplicate table (null: not kept: a replacing dictionary)
  uint64_t* hashes;
  int n, from, to;
  size_t at;
  long idx_at;
};

// Scatters the uploaded elements into their scales and computes their norms and hashes
// (sums over the samples, so a warp shares them out). A warp an element, its lanes reading
// the samples side by side. Grid: (elements / kUploadWarps, items).
constexpr int kUploadWarps = 4;
__global__ void __launch_bounds__(32 * kUploadWarps)
    upload_kernel(const UploadItem* items, const int16_t* src, const int* indices) {
  const UploadItem it = items[blockIdx.y];
  const int lane = threadIdx.x & 31;
  const int j = it.from + blockIdx.x * kUploadWarps + (threadIdx.x >> 5);
  if (j >= it.to) return;  // whole warps
  const int i = it.idx_at >= 0 ? indices[it.idx_at + (j - it.from)] : j;
  const int16_t* e = src + it.at + static_cast<size_t>(j - it.from) * it.n;
  int16_t* d = it.data + static_cast<size_t>(i) * it.n;
  int sq = 0;
  uint64_t h = 0;
  for (int q = lane; q < it.n; q += 32) {
    const int v = e[q];
    d[q] = static_cast<int16_t>(v);
    sq += v * v;
    h += sample_hash(q, v);
  }
  for (int o = 16; o > 0; o >>= 1) {
    sq += __shfl_xor_sync(0xffffffffu, sq, o);
    h += __shfl_xor_sync(0xffffffffu, h, o);
  }
  if (lane != 0) return;
  it.norms[i] = sq;
  it.hashes[i] = h;  // a replacing dictionary's too: the device may take it over (learn_hash_kernel)
  if (it.table) table_insert(it.table, h, i);
}

// ---- The whole block on the device ----------------------------------------------------
//
// The encoder's search of one block (mmp.cpp's BlockSearch::area()) as a fixed sequence of
// kernels: every prediction unit of the block's full prediction quadtree is searched in the
// CPU's order (the unit, then its quarters, then the area's split decision), each step
// reading the reconstruction the steps before it left in a window around the block. The
// CPU stops searching an area's quarters once the split cannot win; searching them all
// anyway changes nothing (J >= 0, so the sum only grows, and the area's unsplit
// reconstruction overwrites what the quarters left), and makes the sequence the same for
// every block: one CUDA graph per block size, one host round trip per block.

constexpr int kMaxB = 32;
constexpr int kWinW = 2 * kMaxB + 1, kWinH = kMaxB + 1;  // tile (bx-1 .. bx+2B-1) x (by-1 .. by+B-1)
constexpr int kMaxTable = 63 * 63;                       // leaf-table entries of a 32x32 unit
constexpr int kMinLog = 2;
constexpr int kMaxSlots = 85;    // units of a 32x32 block's full quadtree down to 4x4
constexpr int kMaxDiffs = 2048;  // index model nodes sent as such (a block's coding changes 12 per leaf)

// Units in an area of 2^L's full quadtree (the area's own and its quarters', pre-order).
__host__ __device__ constexpr int subtree_units(int L) { return L <= kMinLog ? 1 : 1 + 4 * subtree_units(L - 1); }
// Packed choices (search.hpp's BlockChoices::code) of a 2^BL block: at most a flag per area,
// a mode and a count per unit, and 2 N^2 - 1 nodes per unit of N^2 samples.
__host__ __device__ constexpr int code_capacity(int BL) { return 1 + 4 * subtree_units(BL) + 2 * (1 << (2 * BL)); }

// What the blocks of a round share (a block searched alone is a round of one): the
// search's constants and costs, the index models' changes, where the learning writes.
// Uploaded before the round's graph runs.
// The head, read at every step of a unit's kernels, is staged in shared memory at their
// start (stage_head()), in the same round trip as their first loads.
struct BlockHead {
  SearchConsts s;
  int BL, K;
  double mode_bits[4][mmp::kModes];
  double psplit_bits[3][2];
  double split_bits[kScales];
  double dir_bits[kScales][2];
};
struct BlockConsts : BlockHead {
  SortedScales so;  // where SearchConsts::sorted points in rate order
  // The index models' changes since the leading lane's last round: the scales whose costs
  // are derived again, and the changed tree nodes (scale * 4096 + node) << 12 | probability
  // (scales with more changes, or none known, were uploaded whole before the graph).
  uint64_t probs_changed;
  int n_diffs;
  uint32_t diffs[kMaxDiffs];
  // The dictionary's learning on the device (search.hpp's BlockQuery::learn): where the new
  // elements go, and the scales' limit. `on`: 0 none; 1 a block alone appends while there is
  // room (a dictionary that stops when full: the duplicate tables); 2 a round of blocks into
  // a dictionary the device holds, which replaces its least used: the device lists the
  // round's elements and finds their duplicates (the learn_*_kernel's), the host says where
  // they go (Dictionary::add_decided()), place_round() stores them.
  struct {
    int on, max;
    int16_t* data[kScales];
    int* norms[kScales];
    int* table[kScales];
    uint64_t* hashes[kScales];
    // on 2: the round's elements (the held mirror's RoundBuffers, `cap` elements a scale).
    int16_t* src;       // each block's elements at their own size, block b's at b * src_stride
    int src_stride;     // samples
    int cap;            // elements
    int4* elems;        // [cap] each element: x its samples in src, y lw, z lh
    uint64_t* h;        // [kScales][cap] each element's hash at each scale,
    int* norm;          // its squared norm,
    int* before;        // and the index of the scale's equal element (-1: none)
    int64_t* verdicts;  // [kScales][cap] mmp::RoundVerdicts, in mapped host memory
    int* total;         // the round's elements (device memory)
    int* total_host;    // the same, mapped host memory (-1: more than cap)
  } learn;
};

// One block's own inputs: its corner in its tile, the tile's width, its source, and the
// decoded samples around it (the window, which the search fills in as it goes).
struct BlockInput {
  int bx, by, W;
  uint8_t src[kMaxB * kMaxB];  // the block's source, B x B
  uint8_t rec[kWinH * kWinW];  // decoded samples around and (as the search goes) in the block
  uint8_t done[kWinH * kWinW];
};

// A block's new element: internal node (x0, y0, lw, lh) of the segmentation of the unit in
// `slot`, a 2^L square, whose residue (its leaves' samples) is that slot's rres.
struct LearnNode {
  int slot, L, x0, y0, lw, lh;
};
constexpr int kMaxNew = kMaxB * kMaxB;  // internal nodes of a block's units: fewer than its samples

// A lane's device buffers for block searches (fixed addresses: graphs capture them). The
// units of different sizes in flight at once have buffers per size (index L).
struct BlockWork {
  BlockConsts* c;           // the round's (shared)
  BlockInput* in;           // the block's
  const double* log_table;  // -log2(p / 2048), the CPU's table
  uint16_t* probs;          // [scale][4096] index models
  double* bits;             // [scale][4096] index costs
  int* residues[6];         // the unit's candidates' residues, K x N x N
  double* leaf_j[6];        // their leaf tables, K x table
  int* leaf_i[6];
  const double* part_j;  // the 4x4 units' partial leaf tables (LeafLane::defer), part_stride apart
  const int* part_i;
  size_t part_stride;
  uint8_t* cand_pred[6];  // K x N x N
  int* cand_mode[6];      // K
  double* slot_j;         // per unit of the quadtree: J with its mode's bits
  int* slot_mode;
  uint8_t* slot_recon;  // kMaxSlots x 1024
  uint8_t* slot_kind;   // kMaxSlots x kMaxTable: the chosen candidate's plan
  int16_t* slot_index;
  double* area_j;  // per area: the J BlockSearch::area() returns
  uint8_t* area_split;
  int16_t* slot_rres;  // kMaxSlots x 1024: the chosen candidate's residue (its leaves' samples)
  LearnNode* learn;    // the block's new elements in the dictionaries' order, learn_n of them
  int* learn_n;
  int16_t* learn_stage;  // each new element at each scale (stage_at())
  uint64_t* learn_h;     // [scale][kMaxNew]: each new element's hash at each scale,
  int* learn_norm;       // its squared norm,
  uint8_t* learn_dup;    // and whether the scale holds it already
  // The round's outputs, out_ints(BL) a block (block_out()): code (its length first,
  // code_capacity(BL) ints), the block's reconstruction as bytes, then each scale's element
  // count after the block's learning (kScales ints).
  int32_t* out;
};

// Where the element counts start in the output of a 2^BL block, and its whole size (in ints).
__host__ __device__ constexpr int counts_at(int BL) { return code_capacity(BL) + (1 << (2 * BL)) / 4; }
__host__ __device__ constexpr int out_ints(int BL) { return counts_at(BL) + kScales; }

// The blocks of a round are the grid's z dimension. A kernel of several blocks copies its
// block's work to shared memory first (call with every thread): its fields are read at
// every step.
static_assert(sizeof(BlockWork) % sizeof(uint64_t) == 0, "BlockWork is copied as 64-bit words");
__device__ const BlockWork& block_work(const BlockWork* ws) {
  __shared__ BlockWork w;
  const uint64_t* from = reinterpret_cast<const uint64_t*>(ws + blockIdx.z);
  uint64_t* to = reinterpret_cast<uint64_t*>(&w);
  for (int i = threadIdx.x; i < static_cast<int>(sizeof(BlockWork) / sizeof(uint64_t)); i += blockDim.x)
    to[i] = from[i];
  __syncthreads();
  return w;
}
// A round's blocks as the kernels get them: block 0's work by value (a block searched alone,
// whose kernels are bound by latency, reads it from the kernel's parameters with no load
// first) and the array of all of them.
struct Works {
  BlockWork first;
  const BlockWork* all;
};
// The round's BlockHead into shared memory (call with every thread). The copy is only
// issued: it is visible after the caller's next __syncthreads, so its loads are in flight
// together with the caller's own first loads.
static_assert(sizeof(BlockHead) % sizeof(uint64_t) == 0, "BlockHead is copied as 64-bit words");
__device__ const BlockHead& stage_head(const BlockWork& w) {
  __shared__ BlockHead h;
  const uint64_t* from = reinterpret_cast<const uint64_t*>(static_cast<const BlockHead*>(w.c));
  uint64_t* to = reinterpret_cast<uint64_t*>(&h);
  for (int i = threadIdx.x; i < static_cast<int>(sizeof(BlockHead) / sizeof(uint64_t)); i += blockDim.x)
    to[i] = from[i];
  return h;
}
__device__ inline int32_t* block_out(const BlockWork& w) {
  return w.out + static_cast<size_t>(blockIdx.z) * out_ints(w.c->BL);
}

// A unit of 2^L at (ux, uy) in the block: its reconstruction into the window, marked
// decoded (mmp.cpp's put_unit()). All the block's threads take part.
__device__ void put_unit(BlockInput* in, int ux, int uy, int L, const uint8_t* recon) {
  const int N = 1 << L;
  for (int q = threadIdx.x; q < N * N; q += blockDim.x) {
    const int at = (uy + (q >> L) + 1) * kWinW + ux + (q & (N - 1)) + 1;  // the window starts at (bx-1, by-1)
    in->rec[at] = recon[q];
    in->done[at] = 1;
  }
}

// Every index's cost at every scale of the block whose model changed, root first down its
// bit tree (the CPU's index_costs() sums, in its order); the other scales keep theirs. Each
// thread block applies its scale's changed nodes to its own copy of the tree, and the first
// also to the lane's (the others may read the lane's before or after: they apply the same
// values). Every index gets its cost, used or not, so that a scale's costs stay valid while
// only its dictionary grows. Grid: (4096 / 256, scales of the block).
__global__ void index_costs_kernel(const __grid_constant__ Works ws) {
  const BlockWork& w = ws.first;  // one table for the round: its blocks share the models
  const BlockConsts& c = *w.c;
  const int lw = blockIdx.y % (c.BL + 1), lh = blockIdx.y / (c.BL + 1), s = lw + 6 * lh;
  if (!((c.probs_changed >> s) & 1)) return;
  __shared__ uint16_t tree[kMaxIndex];
  uint16_t* lane_tree = w.probs + static_cast<size_t>(s) * kMaxIndex;
  for (int n = threadIdx.x; n < kMaxIndex; n += blockDim.x) tree[n] = lane_tree[n];
  __syncthreads();
  for (int d = threadIdx.x; d < c.n_diffs; d += blockDim.x) {
    const uint32_t v = c.diffs[d];
    if (static_cast<int>(v >> 12) / kMaxIndex != s) continue;
    const int node = static_cast<int>(v >> 12) % kMaxIndex;
    tree[node] = static_cast<uint16_t>(v & 0xFFFu);
    if (blockIdx.x == 0) lane_tree[node] = static_cast<uint16_t>(v & 0xFFFu);
  }
  __syncthreads();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  double acc = 0;
  int node = 1;
  for (int b = 11; b >= 0; --b) {
    const int bit = (i >> b) & 1, p = tree[node];
    acc = __dadd_rn(acc, w.log_table[bit ? mmp::kProbOne - p : p]);
    node = 2 * node + bit;
  }
  w.bits[static_cast<size_t>(s) * kMaxIndex + i] = acc;
}

// A unit's 11 predictions, their ranking by J = SSE + lambda * mode bits (stable: ties in
// mode order), and the residues of the K best. One thread block (units up to MaxN x MaxN);
// the unit's references (the window's row above it and column left of it) are read into
// shared memory first and gathered by all threads. `c`: stage_head()'s copy, read only
// after the first __syncthreads here.
template <int MaxN>
__device__ void prepare_unit(const BlockWork& w, const BlockHead& c, int BL, int ux, int uy, int L) {
  const BlockInput& in = *w.in;
  const int N = 1 << L, NN = N * N, B = 1 << BL, x = in.bx + ux, y = in.by + uy;
  // The references: the window's row above the unit (from its corner to 2N right of it) and
  // its column to the left.
  __shared__ uint8_t top[2 * MaxN + 1], top_done[2 * MaxN + 1], left[MaxN], src[MaxN * MaxN];
  __shared__ mmp::PredictionRefs refs;
  __shared__ uint8_t pred[mmp::kModes * MaxN * MaxN];
  __shared__ double mode_j[mmp::kModes];
  __shared__ int cand[mmp::kModes];
  for (int i = threadIdx.x; i <= 2 * N; i += blockDim.x)
    top[i] = in.rec[uy * kWinW + ux + i], top_done[i] = in.done[uy * kWinW + ux + i];
  for (int i = threadIdx.x; i < N; i += blockDim.x) left[i] = in.rec[(uy + 1 + i) * kWinW + ux];
  for (int q = threadIdx.x; q < NN; q += blockDim.x) src[q] = in.src[(uy + (q >> L)) * B + ux + (q & (N - 1))];
  __syncthreads();
  // predict.hpp's prediction_refs(), its references gathered in parallel while one thread
  // derives the values from the same functions.
  {
    const auto px = [&](int xx, int yy) { return static_cast<int>(yy == y - 1 ? top[xx - x + 1] : left[yy - y]); };
    const mmp::RefSource rs = mmp::ref_source([&](int xx, int) { return top_done[xx - x + 1] != 0; }, in.W, x, y, N);
    for (int i = threadIdx.x; i < 3 * N + 2; i += blockDim.x) {
      if (i <= 2 * N)
        refs.tbuf[i] = mmp::ref_top(rs, px, i - 1);
      else
        refs.lbuf[i - 2 * N - 1] = mmp::ref_left(rs, px, i - 2 * N - 2);
    }
    if (threadIdx.x == blockDim.x - 1) {
      refs.N = N;
      mmp::ref_values([&](int i) { return mmp::ref_top(rs, px, i); }, [&](int i) { return mmp::ref_left(rs, px, i); },
                      N, &refs);
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < mmp::kModes * NN; i += blockDim.x) {
    const int m = i / NN, q = i - m * NN;
    pred[i] = static_cast<uint8_t>(mmp::predict_sample(refs, m, q & (N - 1), q >> L));
  }
  __syncthreads();
  // Each mode's J (a warp a mode), then its rank among the 11 computed by its own thread:
  // the modes of lower J, and of equal J and lower number, come before it (std::stable_sort's
  // order, without a serial sort on the critical path).
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int m = warp; m < mmp::kModes; m += blockDim.x >> 5) {
    long long e = 0;
    for (int q = lane; q < NN; q += 32) {
      const int d = src[q] - pred[m * NN + q];
      e += d * d;
    }
    for (int o = 16; o > 0; o >>= 1) e += __shfl_xor_sync(0xffffffffu, e, o);
    if (lane == 0) mode_j[m] = __dadd_rn(static_cast<double>(e), __dmul_rn(c.s.lambda, c.mode_bits[L - kMinLog][m]));
  }
  __syncthreads();
  if (threadIdx.x < mmp::kModes) {
    const int m = threadIdx.x;
    const double j = mode_j[m];
    int rank = 0;
    for (int o = 0; o < mmp::kModes; ++o) rank += mode_j[o] < j || (mode_j[o] == j && o < m);
    if (rank < c.K) cand[rank] = w.cand_mode[L][rank] = m;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < c.K * NN; i += blockDim.x) {
    const int k = i / NN, q = i - k * NN;
    const int p = pred[cand[k] * NN + q];
    w.cand_pred[L][i] = static_cast<uint8_t>(p);
    w.residues[L][i] = src[q] - p;
  }
}

__device__ void prepare_block(const BlockWork& w, int BL, int ux, int uy, int L) {
  prepare_unit<kMaxB>(w, stage_head(w), BL, ux, uy, L);
}

__global__ void unit_prepare_kernel(const __grid_constant__ Works ws, int BL, int ux, int uy, int L) {
  if (gridDim.z == 1)
    prepare_block(ws.first, BL, ux, uy, L);
  else
    prepare_block(block_work(ws.all), BL, ux, uy, L);
}

// A unit's segmentation for each candidate (mmp.cpp's optimise(): bottom-up over the
// scales, a level of equal lw + lh at a time, in shared memory; as many candidates at once
// as fit), the best candidate (J with its mode's bits; ties to the lower mode, candidates in
// rank order) with its plan and reconstruction into the unit's slot. `put`: a 4x4 unit is
// an area of its own, decided at once. MaxTable: the leaf-table entries that fit in shared
// memory. `c`: stage_head()'s copy, read only after the first __syncthreads here (the
// first pass's leaf tables are loaded in the same round trip); K: c.K.
// chunks > 1: the leaf table is in that many partial tables, combined here (LeafLane::defer).
template <int MaxTable>
__device__ void finish_unit(const BlockWork& w, const BlockHead& c, int K, int chunks, int slot, int ux, int uy, int L,
                            int put) {
  const int N = 1 << L, NN = N * N, table = mmp::leaf_table_size(L);
  const int P = max(1, min(K, MaxTable / table));  // candidates a pass
  __shared__ double pj[MaxTable];
  __shared__ int16_t pi[MaxTable];
  __shared__ uint8_t pk[MaxTable];
  __shared__ int offset[kScales], modes[mmp::kModes];
  __shared__ double best_j;
  __shared__ int best_mode, winner;
  if (threadIdx.x < kScales) {
    const int lw = threadIdx.x % 6, lh = threadIdx.x / 6;
    offset[threadIdx.x] = lw <= L && lh <= L ? mmp::leaf_scale_offset(L, lw, lh) : 0;
  }
  if (threadIdx.x < K) modes[threadIdx.x] = w.cand_mode[L][threadIdx.x];
  if (threadIdx.x == 0) best_j = CUDART_INF, best_mode = 0;
  uint8_t* slot_kind = w.slot_kind + static_cast<size_t>(slot) * kMaxTable;
  int16_t* slot_index = w.slot_index + static_cast<size_t>(slot) * kMaxTable;
  uint8_t* recon = w.slot_recon + static_cast<size_t>(slot) * kMaxB * kMaxB;
  for (int k0 = 0; k0 < K; k0 += P) {
    const int np = min(P, K - k0);
    if (k0 > 0) __syncthreads();  // the previous pass's plans are no longer read
    for (int i = threadIdx.x; i < np * table; i += blockDim.x) {
      const int e = k0 * table + i;
      if (chunks == 1) {
        pj[i] = w.leaf_j[L][e];
        pi[i] = static_cast<int16_t>(max(w.leaf_i[L][e], 0));
      } else {  // put_rows()'s combination: (J, index) minimum, INT_MAX for none
        // Every chunk's load is issued before the first is used (one round trip, not one
        // per chunk): unrolled to the most chunks, the missing ones predicated off.
        double cj[kChainChunks];
        int ci[kChainChunks];
#pragma unroll
        for (int q = 0; q < kChainChunks; ++q)
          if (q < chunks) cj[q] = w.part_j[q * w.part_stride + e], ci[q] = w.part_i[q * w.part_stride + e];
        double j = cj[0];
        int ix = ci[0];
#pragma unroll
        for (int q = 1; q < kChainChunks; ++q)
          if (q < chunks) take_min(j, ix, cj[q], ci[q]);
        pj[i] = j;
        pi[i] = static_cast<int16_t>(ix == INT_MAX ? 0 : ix);
      }
      pk[i] = 0;
    }
    __syncthreads();
    const double lambda = c.s.lambda;
    for (int sum = 1; sum <= 2 * L; ++sum) {  // level 0 (1x1 segments) holds leaves only
      const int lw0 = max(0, sum - L), lw1 = min(L, sum);
      int per = 0;  // entries of the level, per candidate
      for (int lw = lw0; lw <= lw1; ++lw) per += (N >> lw) * (N >> (sum - lw));
      for (int e = threadIdx.x; e < np * per; e += blockDim.x) {
        const int cand = e / per;
        int lw = lw0, at = e - cand * per;
        while (at >= (N >> lw) * (N >> (sum - lw))) at -= (N >> lw) * (N >> (sum - lw)), ++lw;
        const int lh = sum - lw, s = lw + 6 * lh, nx = N >> lw, ix = at % nx, iy = at / nx, base = cand * table;
        const bool both = lw > 0 && lh > 0;
        const int o = base + offset[s] + at;
        double best = pj[o];
        uint8_t kind = 0;
        if (lw > 0) {  // left | right
          const int nx2 = N >> (lw - 1), o2 = base + offset[s - 1];
          const double j =
              __dadd_rn(__dadd_rn(__dmul_rn(lambda, __dadd_rn(c.split_bits[s], both ? c.dir_bits[s][0] : 0.0)),
                                  pj[o2 + 2 * ix + iy * nx2]),
                        pj[o2 + 2 * ix + 1 + iy * nx2]);
          if (j < best) best = j, kind = 1;
        }
        if (lh > 0) {  // top / bottom
          const int o3 = base + offset[s - 6];
          const double j =
              __dadd_rn(__dadd_rn(__dmul_rn(lambda, __dadd_rn(c.split_bits[s], both ? c.dir_bits[s][1] : 0.0)),
                                  pj[o3 + ix + 2 * iy * nx]),
                        pj[o3 + ix + (2 * iy + 1) * nx]);
          if (j < best) best = j, kind = 2;
        }
        pj[o] = best;
        pk[o] = kind;
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      winner = -1;
      for (int cand = 0; cand < np; ++cand) {
        const int m = modes[k0 + cand];
        const double j = __dadd_rn(pj[cand * table + table - 1], __dmul_rn(c.s.lambda, c.mode_bits[L - kMinLog][m]));
        if (j < best_j || (j == best_j && m < best_mode)) best_j = j, best_mode = m, winner = cand;
      }
    }
    __syncthreads();
    if (winner < 0) continue;
    const int base = winner * table;
    for (int i = threadIdx.x; i < table; i += blockDim.x) slot_kind[i] = pk[base + i], slot_index[i] = pi[base + i];
    // Each sample's leaf, found from the root down (walk()'s rule), its element's sample
    // added to the prediction.
    for (int q = threadIdx.x; q < NN; q += blockDim.x) {
      const int px = q & (N - 1), py = q >> L;
      int lw = L, lh = L, x0 = 0, y0 = 0, r = 0;
      for (;;) {
        const int at = base + offset[lw + 6 * lh] + (x0 >> lw) + (y0 >> lh) * (N >> lw);
        const int kind = pk[at];
        if (kind == 0) {
          const int s = lw + 6 * lh, ew = 1 << lw;
          r = c.s.sc.data[s][static_cast<size_t>(pi[at]) * (ew << lh) + (py - y0) * ew + (px - x0)];
          break;
        }
        if (kind == 1 && lw > 0) {
          --lw;
          if (px >= x0 + (1 << lw)) x0 += 1 << lw;
        } else if (lh > 0) {
          --lh;
          if (py >= y0 + (1 << lh)) y0 += 1 << lh;
        } else {
          break;
        }
      }
      recon[q] = static_cast<uint8_t>(min(255, max(0, w.cand_pred[L][(k0 + winner) * NN + q] + r)));
      w.slot_rres[static_cast<size_t>(slot) * kMaxB * kMaxB + q] = static_cast<int16_t>(r);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    w.slot_j[slot] = best_j;
    w.slot_mode[slot] = best_mode;
    // A unit decided at once: above 4x4 (the chain's units when the smallest prediction unit
    // is larger) its area is never split, and its J carries the flag's 0 as decide_area()'s.
    if (put)
      w.area_j[slot] =
          L > kMinLog ? __dadd_rn(best_j, __dmul_rn(c.s.lambda, c.psplit_bits[L - kMinLog - 1][0])) : best_j;
    if (put && L > kMinLog) w.area_split[slot] = 0;
  }
  if (put) put_unit(w.in, ux, uy, L, recon);
}

__device__ void finish_block(const BlockWork& w, int K, int slot, int ux, int uy, int L) {
  finish_unit<kMaxTable>(w, stage_head(w), K, 1, slot, ux, uy, L, 0);
}

__global__ void unit_finish_kernel(const __grid_constant__ Works ws, int K, int slot, int ux, int uy, int L) {
  if (gridDim.z == 1)
    finish_block(ws.first, K, slot, ux, uy, L);
  else
    finish_block(block_work(ws.all), K, slot, ux, uy, L);
}

// An area larger than 4x4 after its quarters: split if the split flag and the quarters'
// J (summed in Z order while below the unsplit J, as the CPU does) beat the unit's J with
// its flag; unsplit, the unit's reconstruction replaces what the quarters left.
__device__ void decide_area(const BlockWork& w, const BlockHead& c, int slot, int ux, int uy, int L) {
  __shared__ int split;
  if (threadIdx.x == 0) {
    const double lambda = c.s.lambda;
    const double jl = __dadd_rn(w.slot_j[slot], __dmul_rn(lambda, c.psplit_bits[L - kMinLog - 1][0]));
    double js = __dmul_rn(lambda, c.psplit_bits[L - kMinLog - 1][1]);
    const int sub = subtree_units(L - 1);
    for (int q = 0; q < 4 && js < jl; ++q) js = __dadd_rn(js, w.area_j[slot + 1 + q * sub]);
    split = js < jl;
    w.area_split[slot] = static_cast<uint8_t>(split);
    w.area_j[slot] = split ? js : jl;
  }
  __syncthreads();
  if (!split) put_unit(w.in, ux, uy, L, w.slot_recon + static_cast<size_t>(slot) * kMaxB * kMaxB);
}

// One link of a block's chain of 4x4 units, the critical path of its search: what writes
// the window runs here, in the CPU's order, in one launch. A 4x4 unit's choice and its put;
// the areas this unit completes, innermost first (each after its own unit's finish, on
// another stream, which the launch waits for); the prediction of the next 4x4 unit, which
// reads what these wrote.
struct ChainLink {
  int BL, K, chunks;  // chunks: of the 4x4 units' leaf tables (finish_unit())
  int L;              // the chain's units are 2^L (larger than 4x4 with a larger smallest unit)
  int slot, ux, uy;
  int decides;
  int d_slot[3], d_ux[3], d_uy[3], d_L[3];
  int next, next_ux, next_uy;
};
constexpr int kSmallTable = 7 * 7;  // leaf-table entries of a 4x4 unit

// Small: a chain of 4x4 units (tables and predictions sized for them); else of 8x8 or
// 16x16 units (finish_unit() takes as many candidates a pass as two 16x16 tables hold).
constexpr int kMaxChainLog = 4;
template <bool Small>
__device__ void chain_block(const BlockWork& w, const ChainLink& a) {
  const BlockHead& c = stage_head(w);
  constexpr int kTable = Small ? kSmallTable * kMaxResidues : 2 * 31 * 31;
  finish_unit<kTable>(w, c, a.K, a.chunks, a.slot, a.ux, a.uy, a.L, 1);
  for (int d = 0; d < a.decides; ++d) {
    __syncthreads();
    decide_area(w, c, a.d_slot[d], a.d_ux[d], a.d_uy[d], a.d_L[d]);
  }
  if (a.next) {
    __syncthreads();
    prepare_unit<1 << (Small ? kMinLog : kMaxChainLog)>(w, c, a.BL, a.next_ux, a.next_uy, a.L);
  }
}

template <bool Small>
__device__ __forceinline__ void chain_entry(const Works& ws, const ChainLink& a) {
  if (gridDim.z == 1)
    chain_block<Small>(ws.first, a);
  else
    chain_block<Small>(block_work(ws.all), a);
}
template <bool Small>
__global__ void chain_kernel(const __grid_constant__ Works ws, ChainLink a) {
  chain_entry<Small>(ws, a);
}
// A 4x4 chain's link in 64 threads of at most 64 registers (kChainLeanThreads; its loops
// are strided and it needs kScales threads): a link does little, and a full GPU holds many
// more of them at once than of 256 threads at 108 registers.
constexpr int kChainLeanThreads = 64;
static_assert(kChainLeanThreads >= kScales && kChainLeanThreads >= mmp::kModes, "a lean link's threads");
__global__ void __launch_bounds__(kChainLeanThreads, 16)
    chain_kernel_lean(const __grid_constant__ Works ws, ChainLink a) {
  chain_entry<true>(ws, a);
}

// The block's new elements in the dictionaries' order (units in coding order, internal
// nodes in post-order) into w.learn, from the chosen units' plans (pack_block()'s shared
// arrays). One thread.
__device__ void learn_list(const BlockWork& w, int units, const int* unit_L, const int* unit_slot, const int* unit_base,
                           const uint8_t* kind) {
  int nl = 0;
  for (int u = 0; u < units; ++u) {
    const int L = unit_L[u], N = 1 << L;
    struct Seg {
      int lw, lh, x0, y0, visited;
    } segs[2 * 2 * 5 + 2];
    int ns = 0;
    segs[ns++] = {L, L, 0, 0, 0};
    while (ns > 0) {
      const Seg g = segs[--ns];
      const int at =
          unit_base[u] + mmp::leaf_scale_offset(L, g.lw, g.lh) + (g.x0 >> g.lw) + (g.y0 >> g.lh) * (N >> g.lw);
      const int k = kind[at];
      if (k == 0) continue;
      if (g.visited) {
        w.learn[nl++] = {unit_slot[u], L, g.x0, g.y0, g.lw, g.lh};
        continue;
      }
      segs[ns++] = {g.lw, g.lh, g.x0, g.y0, 1};
      if (k == 1 && g.lw > 0) {  // the left half first (pushed last)
        segs[ns++] = {g.lw - 1, g.lh, g.x0 + (1 << (g.lw - 1)), g.y0, 0};
        segs[ns++] = {g.lw - 1, g.lh, g.x0, g.y0, 0};
      } else if (g.lh > 0) {
        segs[ns++] = {g.lw, g.lh - 1, g.x0, g.y0 + (1 << (g.lh - 1)), 0};
        segs[ns++] = {g.lw, g.lh - 1, g.x0, g.y0, 0};
      }
    }
  }
  *w.learn_n = nl;
}

// The last of the n ascending starts (starts[0] <= v) at or before v: which of n ranges laid
// end to end holds v.
__device__ __forceinline__ int last_at_or_before(const int* starts, int n, int v) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (starts[mid] <= v)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// The block's choices in the order the encoder codes them (search.hpp's BlockChoices), and
// its reconstruction. The walk is serial: what it reads (the decisions, the chosen units'
// plans) is brought into shared memory by all threads first, so that the walk does not wait
// on global memory at every step.
// With `list`, only the learning's element list of a round that learns a held dictionary
// (learn.on 2), after the choices went down: off their path.
__device__ void pack_block(const BlockWork& w, bool list) {
  const BlockConsts& c = *w.c;
  int32_t* const block = block_out(w);
  const int BL = c.BL, B = 1 << BL, slots = subtree_units(BL);
  constexpr int kMaxUnits = 1 << (2 * (5 - kMinLog));  // 4x4 units of a 32x32 block
  __shared__ uint8_t split[kMaxSlots];
  __shared__ int mode[kMaxSlots];
  __shared__ int item[kMaxSlots];  // coding order: -1 - flag for an area's split flag, else a unit
  __shared__ int unit_slot[kMaxUnits], unit_L[kMaxUnits], unit_base[kMaxUnits];
  __shared__ int items, units;
  __shared__ uint8_t kind[kMaxTable];   // the chosen units' plans, one after another (they fit:
  __shared__ int16_t index[kMaxTable];  // a plan has at most 3.9 entries a sample)
  for (int i = threadIdx.x; i < slots; i += blockDim.x) split[i] = w.area_split[i], mode[i] = w.slot_mode[i];
  __syncthreads();
  if (threadIdx.x == 0) {
    struct AreaAt {
      int slot, L;
    } areas[4 * 4 + 1];
    int na = 0, ni = 0, nu = 0, base = 0;
    areas[na++] = {0, BL};
    while (na > 0) {
      const AreaAt a = areas[--na];
      if (a.L > kMinLog) {
        item[ni++] = -1 - split[a.slot];
        if (split[a.slot]) {
          const int sub = subtree_units(a.L - 1);
          for (int q = 3; q >= 0; --q) areas[na++] = {a.slot + 1 + q * sub, a.L - 1};
          continue;
        }
      }
      unit_slot[nu] = a.slot, unit_L[nu] = a.L, unit_base[nu] = base;
      base += mmp::leaf_table_size(a.L);
      item[ni++] = nu++;
    }
    items = ni, units = nu;
  }
  __syncthreads();
  // The plans' entries as one flat range (unit u's from unit_base[u]), every thread's loads
  // issued before its stores: one round trip, not one per unit.
  {
    constexpr int kPer = (kMaxTable + 255) / 256;  // the kernel runs 256 threads
    const int total = unit_base[units - 1] + mmp::leaf_table_size(unit_L[units - 1]);
    uint8_t k[kPer];
    int16_t x[kPer];
#pragma unroll
    for (int r = 0; r < kPer; ++r) {
      const int i = threadIdx.x + r * 256;
      if (i >= total) continue;
      const int lo = last_at_or_before(unit_base, units, i);  // the unit whose range holds i
      const size_t from = static_cast<size_t>(unit_slot[lo]) * kMaxTable + (i - unit_base[lo]);
      k[r] = w.slot_kind[from], x[r] = w.slot_index[from];
    }
#pragma unroll
    for (int r = 0; r < kPer; ++r) {
      const int i = threadIdx.x + r * 256;
      if (i < total) kind[i] = k[r], index[i] = x[r];
    }
  }
  __syncthreads();
  if (list) {
    if (threadIdx.x == 0 && c.learn.on == 2) learn_list(w, units, unit_L, unit_slot, unit_base, kind);
    return;
  }
  if (threadIdx.x == 0) {
    int32_t* out = block + 1;
    int n = 0;
    for (int it = 0; it < items; ++it) {
      if (item[it] < 0) {
        out[n++] = -1 - item[it];
        continue;
      }
      const int u = item[it], L = unit_L[u], N = 1 << L;
      out[n++] = mode[unit_slot[u]];
      const int count_at = n++;
      int nodes = 0;
      struct Seg {
        int lw, lh, x0, y0;
      } segs[2 * 5 + 2];
      int ns = 0;
      segs[ns++] = {L, L, 0, 0};
      while (ns > 0) {
        const Seg g = segs[--ns];
        const int at =
            unit_base[u] + mmp::leaf_scale_offset(L, g.lw, g.lh) + (g.x0 >> g.lw) + (g.y0 >> g.lh) * (N >> g.lw);
        const int k = kind[at];
        out[n++] = k << 16 | (index[at] & 0xFFFF);
        ++nodes;
        if (k == 0) continue;
        if (k == 1 && g.lw > 0) {  // the left half is coded first
          segs[ns++] = {g.lw - 1, g.lh, g.x0 + (1 << (g.lw - 1)), g.y0};
          segs[ns++] = {g.lw - 1, g.lh, g.x0, g.y0};
        } else if (g.lh > 0) {
          segs[ns++] = {g.lw, g.lh - 1, g.x0, g.y0 + (1 << (g.lh - 1))};
          segs[ns++] = {g.lw, g.lh - 1, g.x0, g.y0};
        }
      }
      out[count_at] = nodes;
    }
    block[0] = n;
    if (c.learn.on == 1) learn_list(w, units, unit_L, unit_slot, unit_base, kind);
  }
  uint8_t* recon = reinterpret_cast<uint8_t*>(block + code_capacity(BL));
  for (int q = threadIdx.x; q < B * B; q += blockDim.x)
    recon[q] = w.in->rec[((q >> BL) + 1) * kWinW + (q & (B - 1)) + 1];
}

__global__ void pack_kernel(const __grid_constant__ Works ws) {
  if (gridDim.z == 1)
    pack_block(ws.first, false);
  else
    pack_block(block_work(ws.all), false);
}

__global__ void learn_list_kernel(const __grid_constant__ Works ws) {
  if (gridDim.z == 1)
    pack_block(ws.first, true);
  else
    pack_block(block_work(ws.all), true);
}

// ---- The dictionaries' update on the device ----------------------------------------------
//
// mmp.cpp's Dictionary::add() of the block's new elements, for a dictionary only this lane
// changes: each new element, resized to every scale (resize_into()'s arithmetic), enters the
// scale unless the scale holds it already or an earlier new element equals it, while the
// scale has room. The host does the same to its copy while the next block is searched.

// Where new element j resized to 2^lw x 2^lh lies in the learning's staging: scales in
// (lh, lw) order, each kMaxNew elements of its size.
__host__ __device__ constexpr size_t stage_at(int lw, int lh, int j) {
  return static_cast<size_t>(kMaxNew) * (((1 << lh) - 1) * 63 + ((1 << lw) - 1) * (1 << lh)) +
         static_cast<size_t>(j) * (1 << (lw + lh));
}
constexpr size_t kStageSamples = static_cast<size_t>(kMaxNew) * 63 * 63;  // every scale of a 32x32 block

// New element e (2^lw x 2^lh samples at src, rows stride apart) resized to 2^lw2 x 2^lh2 by
// resize_into()'s arithmetic, by one warp: the horizontal pass into mid (repeating, or the
// rounded mean of 2^d samples), then the vertical one into out. Returns the resized
// element's hash and squared norm, the same in every lane.
struct Resized {
  uint64_t hash;
  int norm;
};
__device__ Resized resize_element(const int16_t* src, int stride, int lw, int lh, int lw2, int lh2, int16_t* mid,
                                  int16_t* out, int lane) {
  const int w2 = 1 << lw2, n2 = 1 << (lw2 + lh2), h1 = 1 << lh;
  __syncwarp();                               // mid and out are free: the warp's last call is done with them
  for (int q = lane; q < h1 * w2; q += 32) {  // h1 rows of w2
    const int y1 = q >> lw2, x2 = q & (w2 - 1);
    const int16_t* row = src + y1 * stride;
    int v;
    if (lw2 >= lw) {
      v = row[x2 >> (lw2 - lw)];
    } else {
      const int d = lw - lw2, k = 1 << d;
      int sum = 0;
      for (int i = 0; i < k; ++i) sum += row[(x2 << d) + i];
      v = (2 * sum + k) >> (d + 1);
    }
    mid[q] = static_cast<int16_t>(v);
  }
  __syncwarp();
  uint64_t h = 0;
  int sq = 0;
  for (int q = lane; q < n2; q += 32) {
    const int y2 = q >> lw2, x2 = q & (w2 - 1);
    int v;
    if (lh2 >= lh) {
      v = mid[(y2 >> (lh2 - lh)) * w2 + x2];
    } else {
      const int d = lh - lh2, k = 1 << d;
      int sum = 0;
      for (int i = 0; i < k; ++i) sum += mid[((y2 << d) + i) * w2 + x2];
      v = (2 * sum + k) >> (d + 1);
    }
    out[q] = static_cast<int16_t>(v);
    h += sample_hash(q, v);
    sq += v * v;
  }
  for (int o = 16; o > 0; o >>= 1) {
    h += __shfl_xor_sync(0xffffffffu, h, o);
    sq += __shfl_xor_sync(0xffffffffu, sq, o);
  }
  return {h, sq};
}

// Each new element resized to each scale (resize_into()'s arithmetic: the horizontal pass,
// repeating or taking the rounded mean of 2^d samples, then the vertical one) into the
// staging, with its hash and squared norm, and whether the scale holds it already. A warp
// per element and scale, the element and the horizontal pass in the warp's shared memory.
// Grid: (kLearnBlocks, scales of the block); 256 threads.
constexpr int kLearnBlocks = 16;
__device__ void learn_check_block(const BlockWork& w) {
  const BlockConsts& c = *w.c;
  if (c.learn.on != 1) return;
  constexpr int kWarps = 8;
  __shared__ int16_t src[kWarps][kMaxB * kMaxB], mid[kWarps][kMaxB * kMaxB];
  const int n_new = *w.learn_n, lw2 = blockIdx.y % (c.BL + 1), lh2 = blockIdx.y / (c.BL + 1);
  const int s = lw2 + 6 * lh2, n2 = 1 << (lw2 + lh2);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int16_t* data = c.learn.data[s];
  const int* table = c.learn.table[s];
  const uint64_t* hashes = c.learn.hashes[s];
  int16_t* sp = src[warp];
  int16_t* mp = mid[warp];
  for (int j = blockIdx.x * kWarps + warp; j < n_new; j += gridDim.x * kWarps) {
    const LearnNode e = w.learn[j];
    const int w1 = 1 << e.lw, h1 = 1 << e.lh, N = 1 << e.L;
    const int16_t* rres = w.slot_rres + static_cast<size_t>(e.slot) * kMaxB * kMaxB;
    for (int q = lane; q < w1 * h1; q += 32) sp[q] = rres[(e.y0 + (q >> e.lw)) * N + e.x0 + (q & (w1 - 1))];
    __syncwarp();
    int16_t* out = w.learn_stage + stage_at(lw2, lh2, j);
    const Resized r = resize_element(sp, w1, e.lw, e.lh, lw2, lh2, mp, out, lane);
    const uint64_t h = r.hash;
    const int sq = r.norm;
    __syncwarp();  // the warp's staged samples are visible to all its lanes
    int dup = 0;
    for (unsigned at = static_cast<unsigned>(h) & (kTableSize - 1);; at = (at + 1) & (kTableSize - 1)) {
      const int t = table[at];  // the same for the whole warp
      if (t == 0) break;
      if (hashes[t - 1] != h) continue;
      bool same = true;
      for (int q = lane; q < n2; q += 32) same = same && data[static_cast<size_t>(t - 1) * n2 + q] == out[q];
      if (__all_sync(0xffffffffu, same)) {
        dup = 1;
        break;
      }
    }
    if (lane == 0) {
      w.learn_h[s * kMaxNew + j] = h;
      w.learn_norm[s * kMaxNew + j] = sq;
      w.learn_dup[s * kMaxNew + j] = static_cast<uint8_t>(dup);
    }
    __syncwarp();  // src and mid are free for the next element
  }
}

__global__ void learn_check_kernel(const __grid_constant__ Works ws) {
  if (gridDim.z == 1)
    learn_check_block(ws.first);
  else
    learn_check_block(block_work(ws.all));
}

// Per scale (one thread block, a thread per new element): an element enters unless the
// scale held it or an earlier new element equals it (found through a table of the first
// element of each hash), at the scale's next index while there is room; then all threads
// copy the entering elements from the staging. The count goes to the block's output.
// Grid: scales of the block.
__device__ void learn_insert_block(const BlockWork& w) {
  const BlockConsts& c = *w.c;
  if (c.learn.on != 1) return;
  const int n_new = *w.learn_n, lw2 = blockIdx.x % (c.BL + 1), lh2 = blockIdx.x / (c.BL + 1);
  const int s = lw2 + 6 * lh2, n2 = 1 << (lw2 + lh2), j = threadIdx.x, count = c.s.sc.count[s];
  constexpr int kSlots = 2 * kMaxNew;
  __shared__ unsigned long long slot_key[kSlots];  // hash + 1 (0: empty; a hash of ~0 shares 1's slot)
  __shared__ int slot_first[kSlots];
  __shared__ int index[kMaxNew];
  __shared__ int warp_keep[kMaxNew / 32];
  for (int i = j; i < kSlots; i += blockDim.x) slot_key[i] = 0, slot_first[i] = INT_MAX;
  __syncthreads();
  const uint64_t h = j < n_new ? w.learn_h[s * kMaxNew + j] : 0;
  int at = 0;
  if (j < n_new) {
    const unsigned long long key = h + 1 ? h + 1 : 1;
    for (at = static_cast<int>(h & (kSlots - 1));; at = (at + 1) & (kSlots - 1)) {
      const unsigned long long was = atomicCAS(&slot_key[at], 0ull, key);
      if (was == 0 || was == key) break;
    }
    atomicMin(&slot_first[at], j);
  }
  __syncthreads();
  int keep = 0;
  if (j < n_new && !w.learn_dup[s * kMaxNew + j]) {
    keep = 1;
    const int16_t* mine = w.learn_stage + stage_at(lw2, lh2, j);
    const auto same_as = [&](int k) {
      const int16_t* other = w.learn_stage + stage_at(lw2, lh2, k);
      for (int q = 0; q < n2; ++q)
        if (other[q] != mine[q]) return false;
      return true;
    };
    const int first = slot_first[at];
    if (first < j) {
      if (same_as(first)) {
        keep = 0;
      } else {  // different elements in one slot: every earlier one of the same hash
        for (int k = first + 1; k < j && keep; ++k)
          if (w.learn_h[s * kMaxNew + k] == h && same_as(k)) keep = 0;
      }
    }
  }
  // The rank among the kept elements: a prefix count over the warps.
  const unsigned ballot = __ballot_sync(0xffffffffu, keep);
  const int lane = j & 31, warp = j >> 5;
  if (lane == 0) warp_keep[warp] = __popc(ballot);
  __syncthreads();
  int rank = __popc(ballot & ((1u << lane) - 1)), total = 0;
  for (int v = 0; v < static_cast<int>(blockDim.x >> 5); ++v) {
    if (v < warp) rank += warp_keep[v];
    total += warp_keep[v];
  }
  index[j] = keep && count + rank < c.learn.max ? count + rank : -1;
  if (index[j] >= 0) {
    c.learn.norms[s][index[j]] = w.learn_norm[s * kMaxNew + j];
    c.learn.hashes[s][index[j]] = h;
    table_insert(c.learn.table[s], h, index[j]);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < n_new * n2; i += blockDim.x) {
    const int e = i / n2, q = i - e * n2;
    if (index[e] >= 0)
      c.learn.data[s][static_cast<size_t>(index[e]) * n2 + q] = w.learn_stage[stage_at(lw2, lh2, e) + q];
  }
  if (j == 0) block_out(w)[counts_at(c.BL) + s] = min(c.learn.max, count + total);
}

__global__ void __launch_bounds__(kMaxNew) learn_insert_kernel(const __grid_constant__ Works ws) {
  if (gridDim.z == 1)
    learn_insert_block(ws.first);
  else
    learn_insert_block(block_work(ws.all));
}

// ---- Learning in rounds: a replacing dictionary the device holds ------------------------
//
// Dictionary::add() of a round's lesson, split between the device and the host for a
// dictionary the device holds (LeafSearch::hold_dictionary()). The device keeps the
// contents; the host's Dictionary keeps the counts, uses and ages. After the round's choices
// went down (the host codes them meanwhile), the device lists the round's new elements
// (each block's in the round's block order, tile order; each block's in the dictionaries'
// order: units in coding order, internal nodes in post-order), resizes each to every scale
// by resize_into()'s arithmetic and finds, at each scale, the element equal to it that the
// scale held when the round began and the first of the round's elements equal to it: the
// verdicts (mmp::RoundVerdicts), which the host reads from mapped memory. Every step is
// parallel over elements and scales. The host's walk through the verdicts
// (Dictionary::add_decided(): a few integers an element, where the device's walk needed a
// pass over the scale and a barrier) says where each element goes, and learn_place_kernel
// stores them (place_round()) before the dictionary's next round.
constexpr int kRoundLearnBlocks = 1024;  // the most blocks a round learns from (the round's capacity)
constexpr int kFlat = 64;                // the flat elements every scale starts with (Dictionary::kFlat)
constexpr int kVerdictWarps = 8;
// Thread blocks a scale for the verdicts: a round brings about 3 new elements a block, so
// a few warps a scale take them all, and a round's graph schedules few idle thread blocks.
constexpr int kVerdictBlocks = 4;

// Each block's new elements at their own size into the round's source (block b's at
// b * src_stride samples), and the round's element list. Grid: the round's blocks (z).
__device__ void learn_gather_block(const Works& ws, const BlockWork& w) {
  const BlockConsts& c = *w.c;
  if (c.learn.on != 2) return;
  __shared__ int first, offs[kMaxNew + 1];
  const int b = static_cast<int>(blockIdx.z);
  if (threadIdx.x == 0) first = 0;
  __syncthreads();
  int before = 0;  // the elements of the blocks before this one
  for (int k = static_cast<int>(threadIdx.x); k < b; k += blockDim.x) before += *ws.all[k].learn_n;
  for (int o = 16; o > 0; o >>= 1) before += __shfl_xor_sync(0xffffffffu, before, o);
  if ((threadIdx.x & 31) == 0 && before) atomicAdd(&first, before);
  const int m = *w.learn_n;
  if (threadIdx.x == 0) {
    int off = 0;
    for (int k = 0; k < m; ++k) offs[k] = off, off += 1 << (w.learn[k].lw + w.learn[k].lh);
    offs[m] = off;
  }
  __syncthreads();
  const int base = first;
  if (base + m > c.learn.cap) {  // cannot happen (cap: B^2 a block); the host rejects the round
    if (threadIdx.x == 0) *c.learn.total = -1, *c.learn.total_host = -1;
    return;
  }
  int16_t* src = c.learn.src + static_cast<size_t>(b) * c.learn.src_stride;
  for (int k = static_cast<int>(threadIdx.x); k < m; k += blockDim.x)
    c.learn.elems[base + k] = make_int4(b * c.learn.src_stride + offs[k], w.learn[k].lw, w.learn[k].lh, 0);
  for (int t = static_cast<int>(threadIdx.x); t < offs[m]; t += blockDim.x) {
    const int lo = last_at_or_before(offs, m, t);  // the element whose samples hold t
    const LearnNode nd = w.learn[lo];
    const int q = t - offs[lo], N = 1 << nd.L;
    const int16_t* rres = w.slot_rres + static_cast<size_t>(nd.slot) * kMaxB * kMaxB;
    src[t] = rres[(nd.y0 + (q >> nd.lw)) * N + nd.x0 + (q & ((1 << nd.lw) - 1))];
  }
  if (b == static_cast<int>(gridDim.z) - 1 && threadIdx.x == 0) *c.learn.total = *c.learn.total_host = base + m;
}

__global__ void learn_gather_kernel(const __grid_constant__ Works ws) {
  learn_gather_block(ws, gridDim.z == 1 ? ws.first : block_work(ws.all));
}

// Each element at each scale: its hash and squared norm, and the index of the scale's equal
// element as the round found it (hashes compared by the warp, contents where one matches).
// A warp per element and scale. Grid: (kVerdictBlocks, the block size's scales).
__global__ void __launch_bounds__(32 * kVerdictWarps) learn_hash_kernel(const __grid_constant__ Works ws) {
  const BlockConsts& c = *ws.first.c;
  if (c.learn.on != 2) return;
  __shared__ int16_t mid[kVerdictWarps][kMaxB * kMaxB], out[kVerdictWarps][kMaxB * kMaxB];
  const int BL = c.BL, lw2 = static_cast<int>(blockIdx.y) % (BL + 1), lh2 = static_cast<int>(blockIdx.y) / (BL + 1);
  const int s = lw2 + 6 * lh2, n2 = 1 << (lw2 + lh2), count = c.s.sc.count[s], cap = c.learn.cap;
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int total = *c.learn.total;
  const uint64_t* hashes = c.learn.hashes[s];
  const int16_t* data = c.learn.data[s];
  for (int j = static_cast<int>(blockIdx.x) * kVerdictWarps + warp; j < total;
       j += static_cast<int>(gridDim.x) * kVerdictWarps) {
    const int4 e = c.learn.elems[j];
    const Resized r = resize_element(c.learn.src + e.x, 1 << e.y, e.y, e.z, lw2, lh2, mid[warp], out[warp], lane);
    __syncwarp();  // the resized element is visible to every lane
    int before = -1;
    for (int i0 = 0; i0 < count && before < 0; i0 += 32) {
      const int i = i0 + lane;
      unsigned match = __ballot_sync(0xffffffffu, i < count && hashes[i] == r.hash);
      while (match && before < 0) {
        const int cand = i0 + __ffs(match) - 1;
        match &= match - 1;
        bool same = true;
        for (int q = lane; q < n2; q += 32) same = same && data[static_cast<size_t>(cand) * n2 + q] == out[warp][q];
        if (__all_sync(0xffffffffu, same)) before = cand;
      }
    }
    if (lane == 0) {
      const size_t at = static_cast<size_t>(s) * cap + j;
      c.learn.h[at] = r.hash;
      c.learn.norm[at] = r.norm;
      c.learn.before[at] = before;
    }
  }
}

// Each element at each scale: the first of the round's elements equal to it there (hashes
// compared by the warp, contents where one matches), and the verdict to the host. A warp per
// element and scale. Grid: (kVerdictBlocks, the block size's scales).
constexpr int kClassWarps = 4;
__global__ void __launch_bounds__(32 * kClassWarps) learn_class_kernel(const __grid_constant__ Works ws) {
  const BlockConsts& c = *ws.first.c;
  if (c.learn.on != 2) return;
  __shared__ int16_t mid[kClassWarps][kMaxB * kMaxB], mine[kClassWarps][kMaxB * kMaxB],
      other[kClassWarps][kMaxB * kMaxB];
  const int BL = c.BL, lw2 = static_cast<int>(blockIdx.y) % (BL + 1), lh2 = static_cast<int>(blockIdx.y) / (BL + 1);
  const int s = lw2 + 6 * lh2, n2 = 1 << (lw2 + lh2), cap = c.learn.cap;
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int total = *c.learn.total;
  const uint64_t* h = c.learn.h + static_cast<size_t>(s) * cap;
  for (int j = static_cast<int>(blockIdx.x) * kClassWarps + warp; j < total;
       j += static_cast<int>(gridDim.x) * kClassWarps) {
    const uint64_t hj = h[j];
    int first = j;
    bool resized = false;
    for (int i0 = 0; i0 < j && first == j; i0 += 32) {
      const int i = i0 + lane;
      unsigned match = __ballot_sync(0xffffffffu, i < j && h[i] == hj);
      while (match && first == j) {
        const int cand = i0 + __ffs(match) - 1;
        match &= match - 1;
        if (!resized) {
          const int4 e = c.learn.elems[j];
          resize_element(c.learn.src + e.x, 1 << e.y, e.y, e.z, lw2, lh2, mid[warp], mine[warp], lane);
          resized = true;
        }
        const int4 e = c.learn.elems[cand];
        resize_element(c.learn.src + e.x, 1 << e.y, e.y, e.z, lw2, lh2, mid[warp], other[warp], lane);
        __syncwarp();
        bool same = true;
        for (int q = lane; q < n2; q += 32) same = same && mine[warp][q] == other[warp][q];
        if (__all_sync(0xffffffffu, same)) first = cand;
      }
    }
    if (lane == 0) {
      const size_t at = static_cast<size_t>(s) * cap + j;
      c.learn.verdicts[at] = mmp::RoundVerdicts::pack(c.learn.before[at], first);
    }
  }
}

// The placements the host decided (Dictionary::add_decided()): element j of the round
// resized into index `index` of scale s, with its norm and hash.
struct PlaceArgs {
  int16_t* data[kScales];
  int* norms[kScales];
  uint64_t* hashes[kScales];
  const int16_t* src;
  const int4* elems;
  const uint64_t* h;
  const int* norm;
  int cap, n;
  const mmp::Placement* placements;
};
// A warp a placement. Grid: placements / kVerdictWarps.
__global__ void __launch_bounds__(32 * kVerdictWarps) learn_place_kernel(const __grid_constant__ PlaceArgs a) {
  __shared__ int16_t mid[kVerdictWarps][kMaxB * kMaxB];
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int k = static_cast<int>(blockIdx.x) * kVerdictWarps + warp;
  if (k >= a.n) return;  // whole warps
  const mmp::Placement p = a.placements[k];
  const int lw2 = p.s % 6, lh2 = p.s / 6, n2 = 1 << (lw2 + lh2);
  const int4 e = a.elems[p.j];
  resize_element(a.src + e.x, 1 << e.y, e.y, e.z, lw2, lh2, mid[warp], a.data[p.s] + static_cast<size_t>(p.index) * n2,
                 lane);
  if (lane == 0) {
    const size_t at = static_cast<size_t>(p.s) * a.cap + p.j;
    a.norms[p.s][p.index] = a.norm[at];
    a.hashes[p.s][p.index] = a.h[at];
  }
}

// Does nothing: VFP_MMP_EXTRA_KERNELS (for measurements) adds launches of it to every round.
__global__ void empty_kernel() {}

// A graph's block size and smallest unit in one key.
constexpr int graph_bl(int BL, int ML) { return BL | ML << 4; }

// Launches `kernel` on `st` with `args` converted to its parameters' types.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, StreamHandle st, Args... args) {
  kernel<<<grid, block, 0, st>>>(static_cast<Params>(args)...);
}

class GpuLeafSearch final : public mmp::LeafSearch {
 public:
  explicit GpuLeafSearch(MmpGpuSearch how) : how_(how), device_(current_device()) {
    // The CPU's -log2 table, entry by entry through bit_cost(): the device sums the same doubles.
    std::vector<double> t(mmp::kProbOne + 1);
    for (int p = 0; p <= mmp::kProbOne; ++p)
      t[static_cast<size_t>(p)] = mmp::bit_cost(mmp::Prob{static_cast<uint16_t>(p)}, 0);
    copy_to_device_now(log_table_.get(), t.data(), t.size() * sizeof(double));
  }

  std::string name() const override { return "cuda:" + std::to_string(device_); }
  bool searches_blocks() const override { return how_ != MmpGpuSearch::Units; }

  // Each calling thread has a lane (stream, index costs, buffers), so the tiles of a round,
  // coded on several threads, search at once; the dictionary mirrors are shared.
  void search(const mmp::LeafQuery& q, double* J, int* index) override {
    if (q.L < 2 || q.L > 5 || q.K < 1 || q.K > kMaxResidues)
      throw Error(ErrorKind::Usage, "MMP GPU search: units of 4..32 samples and 1..11 residues");
    const int64_t t0 = now_ns();
    set_device(device_);
    const int N = 1 << q.L, table = mmp::leaf_table_size(q.L);
    std::shared_ptr<Mirror> m;  // held until the kernel is done: eviction cannot free it under us
    const TaskList* tasks = nullptr;
    Lane* lp = nullptr;
    SearchConsts* consts = nullptr;
    {
      std::lock_guard<std::mutex> lk(mu_);
      lp = thread_group().lanes[0].get();
      units_buffers(*lp);
      tasks = &task_list(q.L, q.K, 1, kChainChunks);
      consts = reinterpret_cast<SearchConsts*>(lp->stage_consts->get());
      m = mirror(q.dict_id);
      sync_dictionary(*m, q.scales, q.leaf_bits, &consts->sc, *lp);
    }
    consts->lambda = q.lambda;
    consts->ans_j = nullptr, consts->ans_i = nullptr;  // no tables or rate order for a unit's search
    consts->sorted = nullptr;
    Lane& lane = *lp;
    const StreamHandle st = lane.stream.get();
    // The costs of the scales this query uses: every scale up to 2^L x 2^L. Queries of one
    // id come with several L (a block's units shrink), and other ids may come between.
    if (q.costs_id != lane.costs_id || q.L > lane.costs_L) {
      for (int s = 0; s < kScales; ++s) {
        const int c = q.scales[static_cast<size_t>(s)].count;
        if (c > 0)
          memcpy_h2d_async(lane.bits.get() + sizeof(double) * static_cast<size_t>(s) * kMaxIndex,
                           q.bits[static_cast<size_t>(s)], sizeof(double) * static_cast<size_t>(c), st);
      }
      lane.costs_id = q.costs_id;
      lane.costs_L = q.L;
      std::fill(std::begin(lane.probs_stamp), std::end(lane.probs_stamp), 0);  // block searches' costs overwritten
    }
    const size_t res_bytes = sizeof(int) * static_cast<size_t>(q.K) * N * N;
    const size_t out = static_cast<size_t>(q.K) * table;
    size_leaf_buffers(lane, *tasks, q.K, q.L);
    // Through pinned staging: the copies are then truly asynchronous, one wait at the end.
    std::memcpy(lane.stage_in->get(), q.residues, res_bytes);
    Level& lv = lane.levels[q.L];
    memcpy_h2d_async(lv.residues.get(), lane.stage_in->get(), res_bytes, st);
    memcpy_h2d_async(lane.consts.get(), consts, sizeof(SearchConsts), st);
    lane.kernel_start.record(st);
    // One search: the kernels take its arguments as a parameter (no array of them).
    enqueue_leaf_search(*tasks, q.L, nullptr, leaf_lane(lane, lane.consts.get(), lane.bits.get(), q.L), 1, 0, st);
    lane.kernel_end.record(st);
    memcpy_d2h_async(lane.stage_j->get(), lv.out_j.get(), out * sizeof(double), st);
    memcpy_d2h_async(lane.stage_i->get(), lv.out_i.get(), out * sizeof(int), st);
    lane.stream.synchronize();
    std::memcpy(J, lane.stage_j->get(), out * sizeof(double));
    std::memcpy(index, lane.stage_i->get(), out * sizeof(int));
    kernel_ns_ += static_cast<int64_t>(Event::elapsed_ms(lane.kernel_start, lane.kernel_end) * 1e6);
    wall_ns_ += now_ns() - t0;
    ++calls_;
  }

  // The whole block: a round of one in its lane (the calling thread's, or a reserved one).
  void start_block(const mmp::BlockQuery& q) override {
    mmp::RoundBlock b;
    b.bx = q.bx, b.by = q.by, b.W = q.W, b.H = q.H, b.src = q.src, b.rec = q.rec, b.done = q.done;
    set_device(device_);  // a new group's buffers
    Group* g = nullptr;
    {
      std::lock_guard<std::mutex> lk(mu_);
      g = q.lane >= 0 ? &reserved_group(q.lane) : &thread_group();
    }
    start_round(*g, q, &b, 1);
  }

  void finish_block(mmp::BlockChoices* out, int lane_id) override {
    set_device(device_);
    Group* g = nullptr;
    {
      std::lock_guard<std::mutex> lk(mu_);
      g = lane_id >= 0 ? &reserved_group(lane_id) : &thread_group();
    }
    finish_round(*g, out);
  }

  int round_capacity() const override { return how_ == MmpGpuSearch::Units ? 0 : round_blocks_; }

  // A round's blocks in one group of lanes: each kernel launched once for all of them.
  void search_round(const mmp::BlockQuery& shared, const mmp::RoundBlock* blocks, int n,
                    mmp::BlockChoices* out) override {
    if (n < 1 || n > round_capacity())
      throw Error(ErrorKind::Usage, log::format("MMP GPU search: rounds of 1..%d blocks", round_capacity()));
    if (shared.learn && !shared.scales[0].changes)
      throw Error(ErrorKind::Internal, "MMP GPU search: rounds learn only a dictionary that replaces its least used");
    set_device(device_);  // a new group's buffers
    Group* g = nullptr;
    {
      std::lock_guard<std::mutex> lk(mu_);
      // Where the rounds learn on the device, a free group whose last round learnt this
      // dictionary (the device orders them anyway), else one whose learning is done: a
      // group still learning another plane's round would make this one wait for it.
      const auto take = [&](auto&& ok) {
        for (RoundGroup& r : rounds_)
          if (!r.busy && ok(*r.group)) {
            g = r.group.get(), r.busy = true;
            return;
          }
      };
      if (shared.learn) {
        take([&](const Group& c) { return c.last_dict == shared.dict_id; });
        if (!g)
          take([&](const Group& c) {
            return !c.learning_tail || cudaStreamQuery(c.lanes[0]->stream.get()) == cudaSuccess;
          });
      } else {
        // A group that has run a round of this size before has its graph: a wavefront's
        // rounds come in dozens of sizes, each a graph to instantiate in every group.
        take([&](const Group& c) {
          for (const auto& [key, exec] : c.graphs)
            if (std::get<0>(key) == graph_bl(shared.block_log, shared.min_unit_log) &&
                std::get<1>(key) == shared.candidates && std::get<2>(key) == n)
              return true;
          return false;
        });
        if (!g) take([](const Group&) { return true; });
      }
      if (!g) {
        rounds_.push_back({std::make_unique<Group>(), true});
        g = rounds_.back().group.get();
      }
    }
    struct Release {
      GpuLeafSearch& s;
      Group* g;
      ~Release() {
        std::lock_guard<std::mutex> lk(s.mu_);
        for (RoundGroup& r : s.rounds_)
          if (r.group.get() == g) r.busy = false;
      }
    } release{*this, g};
    start_round(*g, shared, blocks, n);
    finish_round(*g, out);
  }

  bool learns_blocks() const override { return how_ != MmpGpuSearch::Units; }
  bool learns_rounds() const override { return how_ != MmpGpuSearch::Units; }

  // A held dictionary leaves the list of mirrors (whose oldest are dropped): the handle,
  // which the caller's Dictionary keeps, is its only owner besides the rounds in flight.
  std::shared_ptr<void> hold_dictionary(uint64_t dict_id) override {
    set_device(device_);  // a new mirror's event
    std::lock_guard<std::mutex> lk(mu_);
    std::shared_ptr<Mirror> m = mirror(dict_id);
    if (!m->held) {
      m->held = true;
      mirrors_.remove(m);
      held_[dict_id] = m;
    }
    return m;
  }

  // A held dictionary's last round: its verdicts, once the round's graph is done.
  mmp::RoundVerdicts round_verdicts(const std::shared_ptr<void>& held, int* n_elements) override {
    Mirror* m = static_cast<Mirror*>(held.get());
    set_device(device_);
    const int64_t w0 = now_ns();
    VFP_CUDA(cudaEventSynchronize(m->verdicts_ready.e));
    verdict_wait_ns_ += now_ns() - w0;
    const int total = *static_cast<const int*>(m->total_host->get());
    if (total < 0 || total > m->cap)
      throw Error(ErrorKind::Gpu,
                  log::format("MMP GPU search: a round of %d new elements (room for %d)", total, m->cap));
    *n_elements = total;
    mmp::RoundVerdicts v;
    const auto* all = static_cast<const int64_t*>(m->verdicts->get());
    for (int s = 0; s < kScales; ++s) v.scales[static_cast<size_t>(s)] = all + static_cast<size_t>(s) * m->cap;
    return v;
  }

  // The placements into the held mirror: staged here, stored by the dictionary's next round
  // on its stream before its graph (place_pending()), so that no other stream's event stands
  // between a round and the next.
  void place_round(const std::shared_ptr<void>& held, const std::vector<mmp::Placement>& placements) override {
    Mirror* m = static_cast<Mirror*>(held.get());
    for (const mmp::Placement& pl : placements)
      if (pl.s < 0 || pl.s >= kScales || !m->data[pl.s].get() || pl.j < 0 || pl.j >= m->cap || pl.index < 0 ||
          pl.index >= kMaxIndex)
        throw Error(ErrorKind::Internal, "MMP GPU search: a placement outside the held dictionary");
    const size_t bytes = sizeof(mmp::Placement) * placements.size();
    set_device(device_);
    // The last placements were read by the round whose verdicts came before these.
    if (m->placements_bytes < bytes) {
      m->placements_bytes = std::max(bytes, 2 * m->placements_bytes);
      m->placements = std::make_unique<Pinned>(m->placements_bytes);
      m->placed = DeviceBuffer(m->placements_bytes, "MMP round learning");
    }
    if (bytes) std::memcpy(m->placements->get(), placements.data(), bytes);
    m->pending = static_cast<int>(placements.size());
  }

  // The post-filter on the device (cuda/mmp_postfilter.hpp): one designer a calling thread
  // at a time, kept for the next plane.
  bool design_post_filter(const uint8_t* rec, const uint8_t* orig, int w, int h, double lambda, mmp::PostFilter* f,
                          uint8_t* out) override {
    set_device(device_);
    std::unique_ptr<MmpPostFilter> pf;
    {
      std::lock_guard<std::mutex> lk(post_filters_mu_);
      if (!post_filters_.empty()) pf = std::move(post_filters_.back()), post_filters_.pop_back();
    }
    if (!pf) pf = std::make_unique<MmpPostFilter>();
    *f = pf->design(rec, orig, w, h, lambda, out);
    std::lock_guard<std::mutex> lk(post_filters_mu_);
    post_filters_.push_back(std::move(pf));
    return true;
  }

  double device_seconds() const override { return static_cast<double>(kernel_ns_.load()) * 1e-9; }

  std::string stats() const override {
    const int64_t n = calls_.load();
    if (n == 0) return "";
    const double wall = wall_ns_.load() * 1e-9, kernel = kernel_ns_.load() * 1e-9;
    const int64_t blocks = blocks_.load();
    if (blocks == 0)
      return log::format(
          "%lld searches, %.0f us each: the kernel %.0f us, the host's part and the wait %.0f us (%.2f s, summed "
          "over threads)",
          static_cast<long long>(n), wall / n * 1e6, kernel / n * 1e6, (wall - kernel) / n * 1e6, wall);
    const char* gpu = how_ == MmpGpuSearch::Blocks && !profile_ ? "the graph" : "the kernels";
    std::string per_kernel;
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (const auto& [what, ms] : profile_ms_)
        per_kernel += log::format("%s%s %.3f s", per_kernel.empty() ? "; per kernel, summed over launches: " : ", ",
                                  what.c_str(), ms * 1e-3);
    }
    return log::format(
        "%lld blocks in %lld launches (%.1f blocks each), %.0f us a launch: %s %.0f us, the host's part and the "
        "wait %.0f us (%.2f s, summed over threads; on the host a launch waits %.0f us for the search's lock, holds it "
        "%.0f us (the dictionary's changes, %.0f KB, copied for the upload in %.0f us), launches in %.0f us (inputs "
        "%.0f us, models %.0f us, the graph's launch call %.0f us) and waits %.0f "
        "us for the device; %.0f us for a held dictionary's verdicts)%s",
        static_cast<long long>(blocks), static_cast<long long>(n), static_cast<double>(blocks) / n, wall / n * 1e6, gpu,
        kernel / n * 1e6, (wall - kernel) / n * 1e6, wall, lock_wait_ns_.load() * 1e-3 / n,
        lock_hold_ns_.load() * 1e-3 / n, upload_bytes_.load() * 1e-3 / n, upload_copy_ns_.load() * 1e-3 / n,
        launch_ns_.load() * 1e-3 / n, inputs_ns_.load() * 1e-3 / n, models_ns_.load() * 1e-3 / n,
        graph_launch_ns_.load() * 1e-3 / n, sync_ns_.load() * 1e-3 / n, verdict_wait_ns_.load() * 1e-3 / n,
        per_kernel.c_str());
  }

  // Reserved lanes are kept for the next caller (their graphs and buffers with them).
  int reserve_lanes(int n) override {
    if (n < 1 || how_ == MmpGpuSearch::Units) return -1;
    set_device(device_);  // the groups' streams and events
    std::lock_guard<std::mutex> lk(mu_);
    size_t first = 0;
    for (size_t run = 0; first + run < reserved_.size();) {  // the first n free in a row
      if (reserved_[first + run].held) {
        first += run + 1, run = 0;
      } else if (++run == static_cast<size_t>(n)) {
        break;
      }
    }
    if (reserved_.size() < first + static_cast<size_t>(n)) reserved_.resize(first + static_cast<size_t>(n));
    for (size_t i = first; i < first + static_cast<size_t>(n); ++i) {
      if (!reserved_[i].group) reserved_[i].group = std::make_unique<Group>();
      reserved_[i].held = true;
    }
    return static_cast<int>(first);
  }
  void release_lanes(int first, int n) override {
    std::lock_guard<std::mutex> lk(mu_);
    for (int i = first; i >= 0 && i < first + n && static_cast<size_t>(i) < reserved_.size(); ++i)
      reserved_[static_cast<size_t>(i)].held = false;
  }

 private:
  std::mutex post_filters_mu_;
  std::vector<std::unique_ptr<MmpPostFilter>> post_filters_;
  // A stream made at its first use: only a group's leading lane runs kernels on its streams
  // (one a lane, one a unit size), and making them for the other lanes too was most of a
  // plane's first round (docs/perf.md, session 26). A lane is used by one thread at a time.
  class LazyStream {
   public:
    StreamHandle get() const { return stream().get(); }
    void synchronize() const { stream().synchronize(); }

   private:
    const Stream& stream() const {
      if (!s_) s_ = std::make_unique<Stream>();
      return *s_;
    }
    mutable std::unique_ptr<Stream> s_;
  };
  struct RawEvent {  // without timing: ordering only
    RawEvent() { VFP_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming)); }
    ~RawEvent() { cudaEventDestroy(e); }
    RawEvent(const RawEvent&) = delete;
    RawEvent& operator=(const RawEvent&) = delete;
    cudaEvent_t e = nullptr;
  };
  struct Pinned {
    Pinned() : p(nullptr) {}
    explicit Pinned(size_t bytes) : p(host_alloc_pinned(bytes)) {}
    ~Pinned() {
      if (p) host_free_pinned(p);
    }
    Pinned(const Pinned&) = delete;
    Pinned& operator=(const Pinned&) = delete;
    void* get() const { return p; }
    void* p;
  };
  // A dictionary's device copy: per scale room for every index, filled up to `count`.
  struct Mirror {
    uint64_t id = 0;
    DeviceBuffer data[kScales], norms[kScales];
    DeviceBuffer table[kScales], hashes[kScales];  // the duplicate check (sample_hash())
    int count[kScales] = {};
    uint64_t generation[kScales] = {};  // a replacing dictionary's changes mirrored (ScaleView)
    int count_before[kScales] = {};     // before the last block learnt on the device
    RawEvent ready;                     // the last upload into it, block that learnt, or placements
    // A dictionary the device holds (hold_dictionary()) and learns in rounds: its last round's
    // elements and verdicts (BlockConsts::learn, on 2), sized for `cap` elements, and the
    // placements the host sent back (place_round()), which its next round stores first
    // (place_pending()).
    bool held = false, aged = false;
    int cap = 0, src_stride = 0, blocks = 0;
    DeviceBuffer src, elems, h, norm, before, total;
    std::unique_ptr<Pinned> verdicts, total_host, placements;  // placements: staged for `placed`
    DeviceBuffer placed;
    size_t placements_bytes = 0;
    RawEvent verdicts_ready;  // the round's graph is done: its verdicts are in host memory
    int pending = 0;          // placements staged for the next round to store
  };
  // The largest query: 11 residues of 32 x 32, 11 leaf tables of 63 x 63 segments.
  static constexpr size_t kMaxResidueBytes = sizeof(int) * kMaxResidues * 32 * 32;
  static constexpr size_t kMaxLeafTable = static_cast<size_t>(kMaxResidues) * kMaxTable;
  static constexpr size_t kOutBytes = sizeof(int32_t) * out_ints(5);
  // The most blocks a round searches at once (its lanes' buffers: about 1.4 MB a block).
  static constexpr int kMaxRound = 1024;
  static_assert(kMaxRound <= kRoundLearnBlocks, "a round's learning gathers every block's elements");
  // A unit size's buffers: its residues, leaf tables and candidates. In a block search the
  // units of each size run on a stream of their own (the leading lane's).
  struct Level {
    LazyStream stream;
    DeviceBuffer residues, out_j, out_i, part_j, part_i, counters;
    DeviceBuffer cand_pred{static_cast<size_t>(kMaxResidues) * kMaxB * kMaxB, "MMP block search"};
    DeviceBuffer cand_mode{sizeof(int) * kMaxResidues, "MMP block search"};
    RawEvent prepared, finished, end;
  };
  // One block's device buffers (and, for the lane that leads a group, the streams, the index
  // models and costs, the dictionary's upload staging that the group's search uses).
  struct Lane {
    LazyStream stream;
    // The units search's staging and constants (allocated at its first use).
    std::unique_ptr<Pinned> stage_in, stage_j, stage_i, stage_consts;
    DeviceBuffer consts;
    DeviceBuffer bits;      // index costs: a units search's, or a leading lane's
    Level levels[6];        // by unit size 2^L, L = 2..5
    uint64_t costs_id = 0;  // the index costs in `bits`, for the scales of units up to 2^costs_L
    int costs_L = 0;
    Event kernel_start, kernel_end;
    // The index models as the lane's device copy holds them, per scale with the stamp they
    // had (search.hpp's BlockQuery::index_stamp; 0: not known).
    std::unique_ptr<Pinned> stage_probs;  // a leading lane's (allocated by lead_buffers())
    uint64_t probs_stamp[kScales] = {};
    DeviceBuffer probs;
    DeviceBuffer slot_j{sizeof(double) * kMaxSlots, "MMP block search"};
    DeviceBuffer slot_mode{sizeof(int) * kMaxSlots, "MMP block search"};
    DeviceBuffer slot_recon{static_cast<size_t>(kMaxSlots) * kMaxB * kMaxB, "MMP block search"};
    DeviceBuffer slot_kind{static_cast<size_t>(kMaxSlots) * kMaxTable, "MMP block search"};
    DeviceBuffer slot_index{sizeof(int16_t) * kMaxSlots * kMaxTable, "MMP block search"};
    DeviceBuffer area_j{sizeof(double) * kMaxSlots, "MMP block search"};
    DeviceBuffer area_split{kMaxSlots, "MMP block search"};
    DeviceBuffer slot_rres{sizeof(int16_t) * kMaxSlots * kMaxB * kMaxB, "MMP block search"};
    // The dictionary's learning (blocks searched alone), allocated at first use.
    DeviceBuffer learn, learn_n, learn_stage, learn_h, learn_norm, learn_dup;
    RawEvent put;
    RawEvent sorted;                       // the round's rate order is ready
    std::unique_ptr<Pinned> stage_upload;  // new dictionary elements
    size_t stage_upload_bytes = 0;
    DeviceBuffer upload;
    std::vector<int> upload_indices;   // a replacing dictionary's rewritten elements
    std::vector<uint8_t> upload_seen;  // (each listed once)
    // Bumped whenever a buffer that the kernels' argument arrays point to moves.
    uint64_t gen = 1;
  };

  // A group of lanes searches a round's blocks (one per lane) with one launch per kernel,
  // on the first lane's streams; a block searched alone is a group of one. The blocks share
  // one copy of the constants; each has its input and output slots in the group's arrays.
  struct Group {
    std::vector<std::unique_ptr<Lane>> lanes;
    Pinned stage_consts{sizeof(BlockConsts)};
    DeviceBuffer consts{sizeof(BlockConsts), "MMP block search"};
    // Per block, for `capacity` blocks: inputs, outputs, the kernels' arguments.
    int capacity = 0;
    std::unique_ptr<Pinned> stage_inputs, stage_out;
    DeviceBuffer inputs, out, works, leaf;  // leaf: [L][capacity] LeafLane
    std::vector<LeafLane> leaf_host;        // the same, as the host built it
    std::vector<BlockWork> works_host;
    std::vector<uint64_t> built_gen;  // the lanes' gen when the arguments were built
    // Graphs by (block size, candidates, blocks, small_tiles()).
    // graph_bl(BL, ML), K, n, tiles, and whether the round learns (BlockConsts::learn.on 2).
    std::map<std::tuple<int, int, int, int, int>, cudaGraphExec_t> graphs;
    // The answer tables and their chunks' partial minima (allocated before a graph that
    // builds them is captured; never moved).
    DeviceBuffer ans_j, ans_i, ans_part_j, ans_part_i;
    DeviceBuffer sorted;  // SortedScales' arrays
    // The round between start_round() and finish_round(), and the mirror it searched (and,
    // when it learnt, changed).
    bool in_flight = false, learned = false;
    // A held dictionary learnt in the round: the host takes the choices at `choices` and
    // codes them while the device learns (`learning_tail`: that learning may still run).
    bool learned_rounds = false, learning_tail = false;
    Event choices;
    // The last round's dictionary and shape (graphs' keys): a round of the same
    // shape allocates and rebuilds nothing, so it may follow a learning tail in stream order
    // alone, without the host waiting for it.
    uint64_t last_dict = 0;
    std::tuple<int, int, int, int, int> last_shape{};
    int block_log = 0, n = 0;
    int64_t t0 = 0;
    std::atomic<int64_t>* device_ns = nullptr;  // the round's query's (BlockQuery::device_ns)
    std::shared_ptr<Mirror> learning;
    // VFP_MMP_PROFILE: each launch of the round between two events.
    struct Mark {
      std::string what;
      Event start, end;
    };
    std::vector<std::unique_ptr<Mark>> marks;
    size_t n_marks = 0;
    void clear_graphs() {
      for (auto& [key, g] : graphs) cudaGraphExecDestroy(g);
      graphs.clear();
    }
    Group() { lanes.push_back(std::make_unique<Lane>()); }
    Group(const Group&) = delete;
    Group& operator=(const Group&) = delete;
    ~Group() { clear_graphs(); }
  };

  struct TaskList {
    DeviceBuffer buf;                            // the leaf kernel's tasks, then leaf_small_kernel's
    int count = 0, chunked = 0, max_chunks = 1;  // chunked: tasks dealt to several blocks
    int small = 0;                               // of `count`, the last `small` are leaf_small_kernel's
  };

  // The calling thread's group of one, or a reserved one (under mu_).
  Group& thread_group() {
    std::unique_ptr<Group>& g = threads_[std::this_thread::get_id()];
    if (!g) g = std::make_unique<Group>();
    return *g;
  }
  Group& reserved_group(int id) {
    if (id < 0 || static_cast<size_t>(id) >= reserved_.size() || !reserved_[static_cast<size_t>(id)].held)
      throw Error(ErrorKind::Internal, log::format("MMP GPU search: lane %d is not reserved", id));
    return *reserved_[static_cast<size_t>(id)].group;
  }

  // The round's inputs to pinned staging, one graph (or the same launches on the stream);
  // finish_round() waits and takes the choices back. The dictionary's new elements go up
  // first, on the same stream, unless the device learnt them itself (BlockQuery::learn,
  // rounds of one).
  void start_round(Group& g, const mmp::BlockQuery& q, const mmp::RoundBlock* blocks, int n) {
    const int BL = q.block_log, B = 1 << BL, K = q.candidates, ML = q.min_unit_log;
    if (BL < 3 || BL > 5 || K < 1 || K > kMaxResidues || ML < kMinLog || ML > std::min(BL, kMaxChainLog))
      throw Error(ErrorKind::Usage,
                  "MMP GPU search: blocks of 8..32 samples, 1..11 candidates, smallest units of 4..16 samples");
    const int shape_bl = graph_bl(BL, ML);
    for (int i = 0; i < n; ++i) {
      const mmp::RoundBlock& b = blocks[i];
      if (b.bx % B || b.by % B || b.bx < 0 || b.by < 0 || b.bx + B > b.W || b.by + B > b.H)
        throw Error(ErrorKind::Usage, "MMP GPU search: a block outside its tile");
    }
    // Learning: a replacing dictionary the device holds learns the round (any number of
    // blocks); one that stops when full, a block alone (its duplicate tables).
    const bool learn_rounds = q.learn && q.scales[0].changes != nullptr;
    const bool learn = q.learn && n == 1 && !learn_rounds;
    int most = q.max_elements;  // a scale never holds more; the counts make sure of it
    for (const mmp::ScaleView& v : q.scales) most = std::max(most, v.count);
    const int tiles = chunks_by_dict_ ? small_tiles(most) : kChainChunks;
    const int64_t t0 = now_ns();
    set_device(device_);
    BlockConsts* bc = reinterpret_cast<BlockConsts*>(g.stage_consts.get());
    if (g.in_flight) throw Error(ErrorKind::Internal, "MMP GPU search: a block started before the last finished");
    // The last round's learning may still read the group's buffers: a round of another shape
    // may move them (or write its arguments with a plain copy), so the host waits for it.
    const auto shape = std::make_tuple(shape_bl, K, n, tiles, learn_rounds ? 1 : 0);
    if (g.learning_tail && shape != g.last_shape) g.lanes[0]->stream.synchronize();
    g.learning_tail = false;
    g.last_shape = shape;
    g.last_dict = q.dict_id;
    // The group is the caller's alone: its lanes and their buffers are made and grown outside
    // the search's lock (a plane's first rounds make dozens of lanes).
    while (g.lanes.size() < static_cast<size_t>(n)) g.lanes.push_back(std::make_unique<Lane>());
    lead_buffers(*g.lanes[0]);
    const TaskList* lists[6] = {};
    const int64_t asked = now_ns();
    {
      std::lock_guard<std::mutex> lk(mu_);
      const int64_t acquired = now_ns();
      lock_wait_ns_ += acquired - asked;
      Lane& lead = *g.lanes[0];
      for (int L = kMinLog; L <= BL; ++L) lists[L] = &task_list(L, K, n, tiles);
      if (learn_rounds) {
        const auto held = held_.find(q.dict_id);
        std::shared_ptr<Mirror> m = held == held_.end() ? nullptr : held->second.lock();
        if (!m) throw Error(ErrorKind::Internal, "MMP GPU search: rounds learn only into a held dictionary");
        if (!m->aged) {  // its first round: the dictionary as the host has it, which has learnt nothing
          for (int lh = 0; lh <= BL; ++lh)
            for (int lw = 0; lw <= BL; ++lw)
              if (q.scales[static_cast<size_t>(lw + 6 * lh)].count > kFlat)
                throw Error(ErrorKind::Internal, "MMP GPU search: a dictionary that learnt on the host cannot be held");
          sync_dictionary(*m, q.scales, q.leaf_bits, &bc->s.sc, lead);
          m->aged = true;
        } else {
          // The host's Dictionary keeps the counts (Dictionary::add_decided()); the contents
          // are here once the last round's placements are.
          VFP_CUDA(cudaStreamWaitEvent(lead.stream.get(), m->ready.e, 0));
          for (int s = 0; s < kScales; ++s)
            if (m->data[s].get()) m->count[s] = q.scales[static_cast<size_t>(s)].count;
          scale_args(*m, q.leaf_bits, &bc->s.sc);
        }
        g.learning = m;
        if (!learn_args(*m, BL, q.max_elements, bc))
          throw Error(ErrorKind::Internal, "MMP GPU search: a held dictionary without its scales");
        round_buffers(*m, n, BL, bc, lead.stream.get());
        bc->learn.on = 2;
        for (int i = 0; i < n; ++i) ensure_learn_nodes(*g.lanes[static_cast<size_t>(i)]);
      } else if (q.pending) {  // the group's mirror has learnt what the caller's dictionary has not yet
        const std::shared_ptr<Mirror>& m = g.learning;
        if (!m || m->id != q.dict_id) throw Error(ErrorKind::Internal, "MMP GPU search: no dictionary learnt ahead");
        for (int lh = 0; lh <= BL; ++lh)
          for (int lw = 0; lw <= BL; ++lw) {
            const int s = lw + 6 * lh, host = q.scales[static_cast<size_t>(s)].count;
            if (host != m->count_before[s])
              throw Error(ErrorKind::Gpu, log::format("MMP GPU search: the device's dictionary differs from the "
                                                      "encoder's (scale %dx%d: %d elements, the encoder %d)",
                                                      1 << lw, 1 << lh, m->count_before[s], host));
          }
        scale_args(*m, q.leaf_bits, &bc->s.sc);
      } else {
        g.learning = mirror(q.dict_id);
        sync_dictionary(*g.learning, q.scales, q.leaf_bits, &bc->s.sc, lead);
      }
      // Learning needs every scale of the block on the device (a dictionary holds elements
      // in each from the start; one of no room, max_elements 0, has none and learns none).
      if (!learn_rounds) {
        bc->learn.on = learn && learn_args(*g.learning, BL, q.max_elements, bc) ? 1 : 0;
        if (bc->learn.on) ensure_learning(lead);
      }
      lock_hold_ns_ += now_ns() - acquired;
    }
    for (int i = 0; i < n; ++i)
      for (int L = kMinLog; L <= BL; ++L) size_leaf_buffers(*g.lanes[static_cast<size_t>(i)], *lists[L], K, L);
    const int64_t unlocked = now_ns();
    Lane& lead = *g.lanes[0];
    const StreamHandle st = lead.stream.get();
    ensure_arguments(g, n);
    bc->s.lambda = q.lambda;
    bc->BL = BL, bc->K = K;
    std::memcpy(bc->mode_bits, q.mode_bits, sizeof(bc->mode_bits));
    std::memcpy(bc->psplit_bits, q.psplit_bits, sizeof(bc->psplit_bits));
    for (int s = 0; s < kScales; ++s) {
      bc->split_bits[s] = q.split_bits[static_cast<size_t>(s)];
      bc->dir_bits[s][0] = q.dir_bits[static_cast<size_t>(s)][0];
      bc->dir_bits[s][1] = q.dir_bits[static_cast<size_t>(s)][1];
    }
    if (answers(n)) {
      if (!g.ans_j.get()) {
        g.ans_j = DeviceBuffer(sizeof(double) * kAnsEntries, "MMP answer tables");
        g.ans_i = DeviceBuffer(sizeof(int) * kAnsEntries, "MMP answer tables");
        g.ans_part_j = DeviceBuffer(sizeof(double) * kAnsEntries * kAnsChunks, "MMP answer tables");
        g.ans_part_i = DeviceBuffer(sizeof(int) * kAnsEntries * kAnsChunks, "MMP answer tables");
      }
      bc->s.ans_j = reinterpret_cast<const double*>(g.ans_j.get());
      bc->s.ans_i = reinterpret_cast<const int*>(g.ans_i.get());
    } else {
      bc->s.ans_j = nullptr, bc->s.ans_i = nullptr;
    }
    bc->s.sorted = nullptr;
    if (rate_order(n)) {
      if (!g.sorted.get()) g.sorted = DeviceBuffer(sorted_layout(nullptr, &bc->so), "MMP rate order");
      sorted_layout(g.sorted.get(), &bc->so);
      bc->s.sorted = &reinterpret_cast<const BlockConsts*>(g.consts.get())->so;
    }
    BlockInput* inputs = reinterpret_cast<BlockInput*>(g.stage_inputs->get());
    const int64_t i0 = now_ns();
    for (int i = 0; i < n; ++i) fill_input(blocks[i], B, &inputs[i]);
    const int64_t i1 = now_ns();
    send_model_changes(q, BL, lead, bc);
    inputs_ns_ += i1 - i0;
    models_ns_ += now_ns() - i1;
    lead.costs_id = 0;  // the unit search's costs cache no longer holds
    if (learn_rounds) place_pending(*g.learning, st);
    lead.kernel_start.record(st);
    if (how_ == MmpGpuSearch::Blocks && !profile_) {
      cudaGraphExec_t& ge = g.graphs[shape];
      if (!ge) {
        VFP_CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        enqueue_round(g, BL, ML, K, n, tiles, learn_rounds, st);
        cudaGraph_t graph = nullptr;
        VFP_CUDA(cudaStreamEndCapture(st, &graph));
        const cudaError_t e = cudaGraphInstantiate(&ge, graph, 0);
        cudaGraphDestroy(graph);
        if (e != cudaSuccess) g.graphs.erase(shape);
        VFP_CUDA(e);
      }
      const int64_t l0 = now_ns();
      VFP_CUDA(cudaGraphLaunch(ge, st));
      graph_launch_ns_ += now_ns() - l0;
    } else {
      enqueue_round(g, BL, ML, K, n, tiles, learn_rounds, st);
    }
    lead.kernel_end.record(st);
    launch_ns_ += now_ns() - unlocked;
    const bool learns = bc->learn.on != 0;
    if (learn_rounds)  // the verdicts are in (and the placements before the graph stored)
      VFP_CUDA(cudaEventRecord(g.learning->verdicts_ready.e, st));
    if (learns) VFP_CUDA(cudaEventRecord(g.learning->ready.e, st));  // the graph wrote the mirror
    g.in_flight = true;
    g.block_log = BL;
    g.n = n;
    g.learned = learns && !learn_rounds;
    g.learned_rounds = learn_rounds;
    g.t0 = t0;
    g.device_ns = q.device_ns;
  }

  void finish_round(Group& g, mmp::BlockChoices* out) {
    if (!g.in_flight) throw Error(ErrorKind::Internal, "MMP GPU search: no block to finish");
    g.in_flight = false;
    set_device(device_);  // the caller's thread may have worked on another GPU since the start
    Lane& lead = *g.lanes[0];
    const int BL = g.block_log, B = 1 << BL;
    const int64_t w0 = now_ns();
    // A round that learns a held dictionary is done for the host once its choices are down
    // (the learning goes on; the next round on the device waits for it, the next on this
    // group's stream anyway). With the profile on, the marks need the whole round.
    const bool tail = g.learned_rounds && !profile_;
    if (tail)
      g.choices.synchronize();
    else
      lead.stream.synchronize();
    g.learning_tail = tail;
    sync_ns_ += now_ns() - w0;
    const int32_t* all = reinterpret_cast<const int32_t*>(g.stage_out->get());
    for (int i = 0; i < g.n; ++i) {
      const int32_t* res = all + static_cast<size_t>(i) * out_ints(BL);
      const int n = res[0];
      if (n < 1 || n > code_capacity(BL) - 1) throw Error(ErrorKind::Gpu, "MMP GPU search: malformed block choices");
      out[i].code.assign(res + 1, res + 1 + n);
      const uint8_t* recon = reinterpret_cast<const uint8_t*>(res + code_capacity(BL));
      out[i].recon.assign(recon, recon + B * B);
    }
    if (g.learned) {
      std::lock_guard<std::mutex> lk(mu_);
      Mirror& m = *g.learning;
      for (int lh = 0; lh <= BL; ++lh)
        for (int lw = 0; lw <= BL; ++lw) {
          const int s = lw + 6 * lh;
          m.count_before[s] = m.count[s];
          m.count[s] = all[counts_at(BL) + s];
        }
    }
    // The device time up to the choices (the learning after them overlaps the host's coding).
    float ms = 0;
    if (!tail) {
      ms = Event::elapsed_ms(lead.kernel_start, lead.kernel_end);
    } else if (cudaEventElapsedTime(&ms, lead.kernel_start.get(), g.choices.get()) != cudaSuccess) {
      cudaGetLastError();  // no time between a stream's event and a graph's node: not counted
      ms = 0;
    }
    const auto ns = static_cast<int64_t>(ms * 1e6);
    kernel_ns_ += ns;
    if (g.device_ns) *g.device_ns += ns;
    wall_ns_ += now_ns() - g.t0;
    ++calls_;
    blocks_ += g.n;
    if (g.n_marks) {
      std::lock_guard<std::mutex> lk(mu_);
      for (size_t i = 0; i < g.n_marks; ++i)
        profile_ms_[g.marks[i]->what] += Event::elapsed_ms(g.marks[i]->start, g.marks[i]->end);
      g.n_marks = 0;
    }
  }

  // A block's input: its source, and the window of decoded samples around it (the row above
  // it to 2B right of it, for the above-right samples; the column to its left; the block
  // itself, not decoded yet), outside the tile not decoded.
  static void fill_input(const mmp::RoundBlock& b, int B, BlockInput* in) {
    in->bx = b.bx, in->by = b.by, in->W = b.W;
    for (int y = 0; y < B; ++y)
      std::memcpy(in->src + y * B, b.src + static_cast<size_t>(b.by + y) * b.W + b.bx, static_cast<size_t>(B));
    const int x0 = b.bx - 1, x_from = std::max(0, x0), x_to = std::min(b.W, x0 + 2 * B + 1);
    for (int wy = 0; wy <= B; ++wy) {
      uint8_t* rec = in->rec + wy * kWinW;
      uint8_t* done = in->done + wy * kWinW;
      const int y = b.by - 1 + wy;
      std::memset(rec, 0, 2 * B + 1);
      std::memset(done, 0, 2 * B + 1);
      if (y < 0 || y >= b.H || x_to <= x_from) continue;
      const size_t o = static_cast<size_t>(y) * b.W + x_from;
      std::memcpy(rec + (x_from - x0), b.rec + o, static_cast<size_t>(x_to - x_from));
      std::memcpy(done + (x_from - x0), b.done + o, static_cast<size_t>(x_to - x_from));
    }
  }

  // The index models and costs of a lane that leads a group or searches units.
  static void lead_buffers(Lane& l) {
    if (l.bits.get()) return;
    l.bits = DeviceBuffer(sizeof(double) * kScales * kMaxIndex, "MMP index costs");
    l.probs = DeviceBuffer(sizeof(uint16_t) * kScales * kMaxIndex, "MMP block search");
    l.stage_probs = std::make_unique<Pinned>(sizeof(uint16_t) * kScales * kMaxIndex);
    ++l.gen;
  }
  static void units_buffers(Lane& l) {
    lead_buffers(l);
    if (l.stage_in) return;
    l.stage_in = std::make_unique<Pinned>(kMaxResidueBytes);
    l.stage_j = std::make_unique<Pinned>(kMaxLeafTable * sizeof(double));
    l.stage_i = std::make_unique<Pinned>(kMaxLeafTable * sizeof(int));
    l.stage_consts = std::make_unique<Pinned>(sizeof(SearchConsts));
    l.consts = DeviceBuffer(sizeof(SearchConsts), "MMP search constants");
  }

  // The learning's buffers of a lane (allocated before a graph that uses them is captured):
  // the block's new elements (learning in rounds), and the staging of a block
  // that learns alone.
  static void ensure_learn_nodes(Lane& l) {
    if (l.learn.get()) return;
    l.learn = DeviceBuffer(sizeof(LearnNode) * kMaxNew, "MMP dictionary learning");
    l.learn_n = DeviceBuffer(sizeof(int), "MMP dictionary learning");
    ++l.gen;
  }
  static void ensure_learning(Lane& l) {
    ensure_learn_nodes(l);
    if (l.learn_stage.get()) return;
    l.learn_stage = DeviceBuffer(sizeof(int16_t) * kStageSamples, "MMP dictionary learning");
    l.learn_h = DeviceBuffer(sizeof(uint64_t) * kScales * kMaxNew, "MMP dictionary learning");
    l.learn_norm = DeviceBuffer(sizeof(int) * kScales * kMaxNew, "MMP dictionary learning");
    l.learn_dup = DeviceBuffer(static_cast<size_t>(kScales) * kMaxNew, "MMP dictionary learning");
    ++l.gen;
  }

  // The group's per-block arrays for n blocks, and the kernels' arguments pointing into them
  // and into the lanes' buffers: built again (and the graphs with them) when they are too
  // small or a lane's buffers moved.
  void ensure_arguments(Group& g, int n) {
    bool stale = n > g.capacity;
    for (int i = 0; i < n && !stale; ++i)
      stale = g.built_gen.size() <= static_cast<size_t>(i) ||
              g.built_gen[static_cast<size_t>(i)] != g.lanes[static_cast<size_t>(i)]->gen;
    if (!stale) return;
    g.clear_graphs();
    if (n > g.capacity) {
      g.capacity = n;
      g.stage_inputs = std::make_unique<Pinned>(sizeof(BlockInput) * n);
      g.stage_out = std::make_unique<Pinned>(kOutBytes * n);
      g.inputs = DeviceBuffer(sizeof(BlockInput) * n, "MMP block search");
      g.out = DeviceBuffer(kOutBytes * n, "MMP block search");
      g.works = DeviceBuffer(sizeof(BlockWork) * n, "MMP block search");
      g.leaf = DeviceBuffer(sizeof(LeafLane) * 6 * n, "MMP block search");
    }
    const int cap = g.capacity;
    const Lane& lead = *g.lanes[0];
    std::vector<BlockWork> works(static_cast<size_t>(n));
    std::vector<LeafLane> leaf(static_cast<size_t>(6 * cap));
    g.built_gen.assign(static_cast<size_t>(n), 0);
    for (int i = 0; i < n; ++i) {
      Lane& l = *g.lanes[static_cast<size_t>(i)];
      BlockWork& w = works[static_cast<size_t>(i)];
      w = work(l);
      w.c = reinterpret_cast<BlockConsts*>(g.consts.get());
      w.log_table = reinterpret_cast<const double*>(log_table_.get());
      w.in = reinterpret_cast<BlockInput*>(g.inputs.get()) + i;
      w.out = reinterpret_cast<int32_t*>(g.out.get());
      w.probs = reinterpret_cast<uint16_t*>(lead.probs.get());  // the round's models: the leading lane's
      w.bits = reinterpret_cast<double*>(lead.bits.get());
      for (int L = kMinLog; L <= 5; ++L)
        leaf[static_cast<size_t>(L * cap + i)] = leaf_lane(l, g.consts.get(), lead.bits.get(), L);
      leaf[static_cast<size_t>(kMinLog * cap + i)].defer = 1;  // the chain links combine them
      g.built_gen[static_cast<size_t>(i)] = l.gen;
    }
    copy_to_device_now(g.works.get(), works.data(), sizeof(BlockWork) * n);
    g.works_host = std::move(works);
    copy_to_device_now(g.leaf.get(), leaf.data(), sizeof(LeafLane) * leaf.size());
    g.leaf_host = std::move(leaf);
  }

  // A lane's leaf-search arguments at unit size 2^L (`consts` starts with SearchConsts).
  static LeafLane leaf_lane(Lane& l, const void* consts, const void* bits, int L) {
    Level& lv = l.levels[L];
    LeafLane a{};
    a.residues = reinterpret_cast<const int*>(lv.residues.get());
    a.consts = reinterpret_cast<const SearchConsts*>(consts);
    a.bits = reinterpret_cast<const double*>(bits);
    a.out_j = reinterpret_cast<double*>(lv.out_j.get());
    a.out_i = reinterpret_cast<int*>(lv.out_i.get());
    a.part_j = reinterpret_cast<double*>(lv.part_j.get());
    a.part_i = reinterpret_cast<int*>(lv.part_i.get());
    a.part_stride = lv.out_j.size() / sizeof(double);
    a.counters = reinterpret_cast<int*>(lv.counters.get());
    return a;
  }

  // The leaf kernel's buffers for K residues of 2^L (allocated before a graph is captured).
  // The partial tables' stride is the leaf table's capacity. A buffer that moves bumps the
  // lane's gen: the arguments that point to it are made again, and the graphs with them.
  static void size_leaf_buffers(Lane& lane, const TaskList& tasks, int K, int L) {
    Level& lv = lane.levels[L];
    const size_t res_bytes = (sizeof(int) * static_cast<size_t>(K)) << (2 * L);
    const size_t out = static_cast<size_t>(K) * mmp::leaf_table_size(L);
    bool moved = grow(lv.residues, res_bytes, "MMP residues");
    moved |= grow(lv.out_j, out * sizeof(double), "MMP leaf table");
    moved |= grow(lv.out_i, lv.out_j.size() / sizeof(double) * sizeof(int), "MMP leaf table");
    if (tasks.chunked) {
      const size_t stride = lv.out_j.size() / sizeof(double);
      moved |= grow(lv.part_j, stride * tasks.max_chunks * sizeof(double), "MMP partial leaf tables");
      moved |= grow(lv.part_i, stride * tasks.max_chunks * sizeof(int), "MMP partial leaf tables");
      if (grow(lv.counters, sizeof(int) * tasks.chunked, "MMP chunk counters")) {
        // Zeroed before any kernel counts in them, and waited for: those kernels run on
        // non-blocking streams, which a memset on the legacy default stream (cudaMemset)
        // does not order before them. Only a new buffer gets here.
        memset_async(lv.counters.get(), 0, lv.counters.size(), lane.stream.get());
        lane.stream.synchronize();
        moved = true;
      }
    }
    if (moved) ++lane.gen;
  }

  // The leaf kernels for residues of size 2^L, for n blocks (lanes: their arguments).
  // `first`: block 0's arguments (a kernel of one block takes them as a parameter).
  // `order`: 0 index order; 1 the round's rate order (SearchConsts::sorted); 2 that and, from
  // 4 samples on, its sum order.
  void enqueue_leaf_search(const TaskList& tasks, int L, const LeafLane* lanes, const LeafLane& first, int n, int order,
                           StreamHandle st) {
    const int N = 1 << L, table = mmp::leaf_table_size(L);
    const auto* list = reinterpret_cast<const Task*>(tasks.buf.get());
    const int large = tasks.count - tasks.small;
    const auto run = [&](auto kernel, const Task* from, int count) {
      launch(kernel, dim3(static_cast<unsigned>(count), 1, static_cast<unsigned>(n)), dim3(kThreads), st, from, first,
             lanes, N, table);
    };
    if (tasks.small) {
      if (order == 2)
        run(leaf_small_kernel<2>, list + large, tasks.small);
      else if (order == 1)
        run(leaf_small_kernel<1>, list + large, tasks.small);
      else
        run(leaf_small_kernel<0>, list + large, tasks.small);
      VFP_CUDA_LAUNCHED("mmp leaf_small_kernel");
    }
    if (large) {
      if (on_in(lean_leaf_, n))
        run(leaf_kernel_lean, list, large);
      else
        run(leaf_kernel, list, large);
      VFP_CUDA_LAUNCHED("mmp leaf_kernel");
    }
  }

  // A lane's buffers as the kernels see them (the group fills in the shared parts).
  static BlockWork work(Lane& l) {
    BlockWork w{};
    for (int L = kMinLog; L <= 5; ++L) {
      Level& lv = l.levels[L];
      w.residues[L] = reinterpret_cast<int*>(lv.residues.get());
      w.leaf_j[L] = reinterpret_cast<double*>(lv.out_j.get());
      w.leaf_i[L] = reinterpret_cast<int*>(lv.out_i.get());
      w.cand_pred[L] = reinterpret_cast<uint8_t*>(lv.cand_pred.get());
      w.cand_mode[L] = reinterpret_cast<int*>(lv.cand_mode.get());
    }
    const Level& small = l.levels[kMinLog];
    w.part_j = reinterpret_cast<const double*>(small.part_j.get());
    w.part_i = reinterpret_cast<const int*>(small.part_i.get());
    w.part_stride = small.out_j.size() / sizeof(double);
    w.slot_j = reinterpret_cast<double*>(l.slot_j.get());
    w.slot_mode = reinterpret_cast<int*>(l.slot_mode.get());
    w.slot_recon = reinterpret_cast<uint8_t*>(l.slot_recon.get());
    w.slot_kind = reinterpret_cast<uint8_t*>(l.slot_kind.get());
    w.slot_index = reinterpret_cast<int16_t*>(l.slot_index.get());
    w.area_j = reinterpret_cast<double*>(l.area_j.get());
    w.area_split = reinterpret_cast<uint8_t*>(l.area_split.get());
    w.slot_rres = reinterpret_cast<int16_t*>(l.slot_rres.get());
    w.learn = reinterpret_cast<LearnNode*>(l.learn.get());
    w.learn_n = reinterpret_cast<int*>(l.learn_n.get());
    w.learn_stage = reinterpret_cast<int16_t*>(l.learn_stage.get());
    w.learn_h = reinterpret_cast<uint64_t*>(l.learn_h.get());
    w.learn_norm = reinterpret_cast<int*>(l.learn_norm.get());
    w.learn_dup = reinterpret_cast<uint8_t*>(l.learn_dup.get());
    return w;
  }

  // The index models' changes since the lane's last block into the block's constants: the
  // scales whose stamp moved, and their changed nodes (found against the lane's copy).
  // Scales of unknown content or too many changes go up whole before the graph, in one copy
  // from the first to the last of them (the lane's copy of the scales between is what the
  // device holds).
  static void send_model_changes(const mmp::BlockQuery& q, int BL, Lane& lane, BlockConsts* bc) {
    bc->probs_changed = 0;
    bc->n_diffs = 0;
    int first_whole = kScales, last_whole = -1;
    uint16_t* copy = reinterpret_cast<uint16_t*>(lane.stage_probs->get());
    for (int lh = 0; lh <= BL; ++lh)
      for (int lw = 0; lw <= BL; ++lw) {
        const int s = lw + 6 * lh;
        const uint64_t stamp = q.index_stamp[static_cast<size_t>(s)];
        if (stamp != 0 && stamp == lane.probs_stamp[s]) continue;
        bc->probs_changed |= uint64_t{1} << s;
        const uint16_t* now = q.index_probs[static_cast<size_t>(s)];
        uint16_t* had = copy + static_cast<size_t>(s) * kMaxIndex;
        const int before = bc->n_diffs;
        bool whole = lane.probs_stamp[s] == 0;
        // A block's coding changes a few root-to-leaf paths of the tree: runs of nodes are
        // compared with memcmp first (most are equal), and only the runs that differ are
        // looked at node by node and copied.
        constexpr int kRun = 128;
        for (int r = 0; r < kMaxIndex && !whole; r += kRun) {
          if (std::memcmp(now + r, had + r, sizeof(uint16_t) * kRun) == 0) continue;
          for (int k = r; k < r + kRun; ++k)
            if (now[k] != had[k]) {
              if (bc->n_diffs == kMaxDiffs) {
                whole = true;
                break;
              }
              bc->diffs[bc->n_diffs++] = static_cast<uint32_t>(s * kMaxIndex + k) << 12 | now[k];
            }
          std::memcpy(had + r, now + r, sizeof(uint16_t) * kRun);
        }
        if (whole) std::memcpy(had, now, sizeof(uint16_t) * kMaxIndex);
        if (whole) {
          bc->n_diffs = before;
          first_whole = std::min(first_whole, s), last_whole = s;
        }
        lane.probs_stamp[s] = stamp;
      }
    if (last_whole >= 0) {
      const size_t at = sizeof(uint16_t) * kMaxIndex * static_cast<size_t>(first_whole);
      memcpy_h2d_async(lane.probs.get() + at, reinterpret_cast<uint8_t*>(copy) + at,
                       sizeof(uint16_t) * kMaxIndex * static_cast<size_t>(last_whole - first_whole + 1),
                       lane.stream.get());
    }
  }

  // One step of the block's search in BlockSearch::area()'s order over the full quadtree.
  struct Op {
    enum Kind { Prepare, Leaf, Finish, Decide } kind;
    int L, slot, ux, uy;
    bool linked = false;  // a 4x4 unit's prepare, run by the chain link before it
  };
  // ML: the smallest unit, 2^ML (the quadtree's slots stay those of the full tree to 4x4).
  static void area_ops(std::vector<Op>* ops, int slot, int ux, int uy, int L, int ML) {
    ops->push_back({Op::Prepare, L, slot, ux, uy});
    ops->push_back({Op::Leaf, L, slot, ux, uy});
    ops->push_back({Op::Finish, L, slot, ux, uy});
    if (L == ML) return;
    const int half = 1 << (L - 1), sub = subtree_units(L - 1);
    for (int q = 0; q < 4; ++q) area_ops(ops, slot + 1 + q * sub, ux + (q & 1) * half, uy + (q >> 1) * half, L - 1, ML);
    ops->push_back({Op::Decide, L, slot, ux, uy});
  }

  // `body` (launches on `st`), timed when profiling (VFP_MMP_PROFILE=1: rounds then run
  // without graphs, each launch between two events; for measurements).
  template <typename Body>
  void timed(Group& g, const char* what, int L, StreamHandle st, Body&& body) {
    if (!profile_) return body();
    if (g.n_marks == g.marks.size()) g.marks.push_back(std::make_unique<Group::Mark>());
    Group::Mark& m = *g.marks[g.n_marks++];
    m.what = L ? log::format("%s %dx%d", what, 1 << L, 1 << L) : what;
    m.start.record(st);
    body();
    m.end.record(st);
  }

  // One round's work, in BlockSearch::area()'s order over the full quadtree, each kernel
  // launched once for the round's n blocks (the grid's z dimension): the inputs up, the
  // index costs (once: the blocks share the models), per area its unit (prediction and
  // ranking, leaf search, segmentation and choice), its quarters, its decision; the choices
  // down. Nothing here waits on the host, so it can be captured as a graph.
  //
  // Every write to a block's window (a 4x4 unit's put, an area's decision) runs on the 4x4
  // units' stream, in chain links (chain_kernel): the 4x4 unit's choice, the decisions it
  // completes, the next 4x4 unit's prediction. Units of each larger size run on a stream of
  // their own: a unit's prediction reads the window after the last write before it in the
  // CPU's order (the `put` event), a write waits until every unit before it has read the
  // window (their `prepared` events), and a decision waits for its unit's choice (its
  // `finished` event). So the larger units' searches overlap the chain of 4x4 units. With a
  // larger smallest unit (ML > 2: the encoder's --min-unit) the units of that size are the
  // chain, and the areas of that size are never split.
  // ML: the smallest prediction unit's log (BlockQuery::min_unit_log): the chain's units.
  void enqueue_round(Group& g, int BL, int ML, int K, int n, int tiles, bool learn_rounds, StreamHandle st) {
    Lane& lead = *g.lanes[0];
    const Works ws{g.works_host[0], reinterpret_cast<const BlockWork*>(g.works.get())};
    const auto* leaf = reinterpret_cast<const LeafLane*>(g.leaf.get());
    const dim3 blocks(1, 1, static_cast<unsigned>(n));
    memcpy_h2d_async(g.consts.get(), g.stage_consts.get(), sizeof(BlockConsts), st);
    memcpy_h2d_async(g.inputs.get(), g.stage_inputs->get(), sizeof(BlockInput) * n, st);
    timed(g, "index costs", 0, st, [&] {
      index_costs_kernel<<<dim3(kMaxIndex / 256, static_cast<unsigned>((BL + 1) * (BL + 1))), 256, 0, st>>>(ws);
      VFP_CUDA_LAUNCHED("mmp index_costs_kernel");
    });
    if (answers(n))
      timed(g, "answer tables", 0, st, [&] {
        const auto* c = reinterpret_cast<const SearchConsts*>(g.consts.get());
        auto* pj = reinterpret_cast<double*>(g.ans_part_j.get());
        auto* pi = reinterpret_cast<int*>(g.ans_part_i.get());
        answers_kernel<<<dim3(kAnsEntries / 32, kAnsChunks), kThreads, 0, st>>>(
            c, reinterpret_cast<const double*>(lead.bits.get()), pj, pi);
        VFP_CUDA_LAUNCHED("mmp answers_kernel");
        answers_combine_kernel<<<(kAnsEntries + 255) / 256, 256, 0, st>>>(
            pj, pi, reinterpret_cast<double*>(g.ans_j.get()), reinterpret_cast<int*>(g.ans_i.get()));
        VFP_CUDA_LAUNCHED("mmp answers_combine_kernel");
      });
    VFP_CUDA(cudaEventRecord(lead.put.e, st));
    for (int L = kMinLog; L <= BL; ++L) VFP_CUDA(cudaStreamWaitEvent(lead.levels[L].stream.get(), lead.put.e, 0));
    // The rate order, sorted on the largest units' stream so that the 4x4 units' chain does
    // not wait for it: the chain's first unit searches in index order beside the sort (on the
    // round's critical path the ordered search of one tile a chunk measured slower), the rest
    // in rate order, which saves issue slots when frames share the GPU.
    const bool ordered = rate_order(n), by_sum = ordered && sum_order(n);
    if (ordered) {
      const StreamHandle so = lead.levels[BL].stream.get();
      timed(g, "rate order", BL, so, [&] {
        sort_scales_kernel<<<dim3(kScales, by_sum ? 2 : 1), kSortBuckets, 0, so>>>(
            reinterpret_cast<const SearchConsts*>(g.consts.get()), reinterpret_cast<const double*>(lead.bits.get()),
            BL);
        VFP_CUDA_LAUNCHED("mmp sort_scales_kernel");
      });
      VFP_CUDA(cudaEventRecord(lead.sorted.e, so));
      for (int L = ML + 1; L < BL; ++L) VFP_CUDA(cudaStreamWaitEvent(lead.levels[L].stream.get(), lead.sorted.e, 0));
    }
    // Launches that do nothing, beside the round's work on the largest units' stream (for
    // measurements: what a kernel launch costs a round when many rounds share the GPU).
    for (int k = 0; k < extra_kernels_; ++k) {
      empty_kernel<<<1, 32, 0, lead.levels[BL].stream.get()>>>();
      VFP_CUDA_LAUNCHED("mmp empty_kernel");
    }
    std::vector<Op> ops;
    area_ops(&ops, 0, 0, 0, BL, ML);
    const StreamHandle chain = lead.levels[ML].stream.get();
    bool prepared[6] = {};
    // The wait for the sort sits before the second 4x4 unit's search: by then the first
    // unit's search and link have taken longer than the sort.
    const bool chain_ordered = ordered && chain_order(n);
    int chain_units = 0;
    for (size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      Level& lv = lead.levels[op.L];
      const StreamHandle s = lv.stream.get();
      if (op.kind == Op::Prepare) {
        if (op.linked) continue;
        VFP_CUDA(cudaStreamWaitEvent(s, lead.put.e, 0));
        timed(g, "prediction", op.L, s, [&] {
          launch(unit_prepare_kernel, blocks, dim3(256), s, ws, BL, op.ux, op.uy, op.L);
          VFP_CUDA_LAUNCHED("mmp unit_prepare_kernel");
        });
        if (op.L > ML) {  // the chain's own units are read in stream order
          VFP_CUDA(cudaEventRecord(lv.prepared.e, s));
          prepared[op.L] = true;
        }
      } else if (op.kind == Op::Leaf) {
        bool in_order = ordered && op.L > ML;
        if (op.L == ML && chain_ordered && chain_units++ > 0) {
          if (chain_units == 2) VFP_CUDA(cudaStreamWaitEvent(chain, lead.sorted.e, 0));
          in_order = true;
        }
        timed(g, "leaf search", op.L, s, [&] {
          enqueue_leaf_search(tasks_[op.L][K][spread(n)][tiles], op.L, leaf + static_cast<size_t>(op.L) * g.capacity,
                              g.leaf_host[static_cast<size_t>(op.L) * g.capacity], n, in_order ? (by_sum ? 2 : 1) : 0,
                              s);
        });
      } else if (op.kind == Op::Finish && op.L > ML) {
        timed(g, "segmentation", op.L, s, [&] {
          launch(unit_finish_kernel, blocks, dim3(256), s, ws, K, op.slot, op.ux, op.uy, op.L);
          VFP_CUDA_LAUNCHED("mmp unit_finish_kernel");
        });
        VFP_CUDA(cudaEventRecord(lv.finished.e, s));
      } else if (op.kind == Op::Finish) {  // a unit of the smallest size: a chain link
        ChainLink link{};
        const TaskList& chain_tasks = tasks_[kMinLog][K][spread(n)][tiles];
        // Only the 4x4 units' searches leave their chunks for the link to combine.
        link.BL = BL, link.K = K, link.L = ML;
        link.chunks = ML == kMinLog && chain_tasks.chunked ? chain_tasks.max_chunks : 1;
        link.slot = op.slot, link.ux = op.ux, link.uy = op.uy;
        size_t j = i + 1;
        for (; j < ops.size() && ops[j].kind == Op::Decide; ++j) {  // every decision follows a chain unit's
          const Op& d = ops[j];
          const int k = link.decides++;
          link.d_slot[k] = d.slot, link.d_ux[k] = d.ux, link.d_uy[k] = d.uy, link.d_L[k] = d.L;
          VFP_CUDA(cudaStreamWaitEvent(chain, lead.levels[d.L].finished.e, 0));
        }
        for (size_t k = j; k < ops.size(); ++k)  // no write comes between: only larger units' steps
          if (ops[k].kind == Op::Prepare && ops[k].L == ML) {
            ops[k].linked = true;
            link.next = 1, link.next_ux = ops[k].ux, link.next_uy = ops[k].uy;
            break;
          }
        for (int L = ML + 1; L <= BL; ++L)
          if (prepared[L]) VFP_CUDA(cudaStreamWaitEvent(chain, lead.levels[L].prepared.e, 0));
        timed(g, "chain link", 0, chain, [&] {
          if (ML > kMinLog)
            launch(chain_kernel<false>, blocks, dim3(256), chain, ws, link);
          else if (on_in(lean_links_, n))
            launch(chain_kernel_lean, blocks, dim3(kChainLeanThreads), chain, ws, link);
          else
            launch(chain_kernel<true>, blocks, dim3(256), chain, ws, link);
          VFP_CUDA_LAUNCHED("mmp chain_kernel");
        });
        VFP_CUDA(cudaEventRecord(lead.put.e, chain));
        i = j - 1;
      } else {
        throw Error(ErrorKind::Gpu, "MMP GPU search: an area decided outside the chain");  // unreachable
      }
    }
    // The last link made the root's decision, after every unit's choice: the chain has
    // everything the packing reads.
    timed(g, "packing", 0, chain, [&] {
      launch(pack_kernel, blocks, dim3(256), chain, ws);
      VFP_CUDA_LAUNCHED("mmp pack_kernel");
    });
    if (n == 1) {  // learning on the device: blocks searched alone (the kernels check it is asked for)
      const unsigned scales = static_cast<unsigned>((BL + 1) * (BL + 1));
      timed(g, "learning", 0, chain, [&] {
        launch(learn_check_kernel, dim3(kLearnBlocks, scales), dim3(256), chain, ws);
        VFP_CUDA_LAUNCHED("mmp learn_check_kernel");
        launch(learn_insert_kernel, dim3(scales), dim3(kMaxNew), chain, ws);
        VFP_CUDA_LAUNCHED("mmp learn_insert_kernel");
      });
    }
    if (learn_rounds) {  // a held dictionary's round: its new elements and their verdicts
      // The choices go down first: the host codes them while the device learns.
      memcpy_d2h_async(g.stage_out->get(), g.out.get(), sizeof(int32_t) * out_ints(BL) * n, chain);
      // In a capture, an event record node of the graph (a plain record there only orders
      // the captured streams); launched one by one, a plain record.
      cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
      VFP_CUDA(cudaStreamIsCapturing(chain, &capturing));
      VFP_CUDA(cudaEventRecordWithFlags(
          g.choices.get(), chain,
          capturing == cudaStreamCaptureStatusActive ? cudaEventRecordExternal : cudaEventRecordDefault));
      const unsigned scales = static_cast<unsigned>((BL + 1) * (BL + 1));
      timed(g, "learning", 0, chain, [&] {
        launch(learn_list_kernel, blocks, dim3(256), chain, ws);
        VFP_CUDA_LAUNCHED("mmp learn_list_kernel");
        launch(learn_gather_kernel, blocks, dim3(256), chain, ws);
        VFP_CUDA_LAUNCHED("mmp learn_gather_kernel");
        launch(learn_hash_kernel, dim3(kVerdictBlocks, scales), dim3(32 * kVerdictWarps), chain, ws);
        VFP_CUDA_LAUNCHED("mmp learn_hash_kernel");
        launch(learn_class_kernel, dim3(kVerdictBlocks, scales), dim3(32 * kClassWarps), chain, ws);
        VFP_CUDA_LAUNCHED("mmp learn_class_kernel");
      });
    }
    if (!learn_rounds) memcpy_d2h_async(g.stage_out->get(), g.out.get(), sizeof(int32_t) * out_ints(BL) * n, chain);
    for (int L = kMinLog; L <= BL; ++L) {  // every stream joins the round's stream again
      VFP_CUDA(cudaEventRecord(lead.levels[L].end.e, lead.levels[L].stream.get()));
      VFP_CUDA(cudaStreamWaitEvent(st, lead.levels[L].end.e, 0));
    }
  }

  // A round-level switch, for measurements and tests: unset, on in rounds of 8 or more
  // blocks; `name`=0, never; `name`=all, in every round, a block alone too.
  enum class RoundSwitch { Never, LargeRounds, Always };
  // "0": never, "all": every round, a block alone too, "1": rounds of 8 or more blocks;
  // unset or anything else: `unset`.
  static RoundSwitch round_switch(const char* name, RoundSwitch unset = RoundSwitch::LargeRounds) {
    const char* e = std::getenv(name);
    const std::string v(e ? e : "");
    return v == "0"     ? RoundSwitch::Never
           : v == "all" ? RoundSwitch::Always
           : v == "1"   ? RoundSwitch::LargeRounds
                        : unset;
  }
  static bool on_in(RoundSwitch w, int n) {
    return w == RoundSwitch::Always || (w == RoundSwitch::LargeRounds && n >= 8);
  }
  // Whether a round of n blocks looks its small segments up in answer tables: a table costs
  // about what 3 blocks' own searches of those segments do (VFP_MMP_ANSWERS).
  bool answers(int n) const { return on_in(answers_, n); }
  // Whether a round of n blocks searches its small scales in rate order (sort_scales_kernel;
  // a block alone pays the sort on its 16x16 units' stream: VFP_MMP_RATE_ORDER).
  bool rate_order(int n) const { return on_in(rate_order_, n); }
  // Whether such a round's 4x4 units (all but the first) search in rate order as well
  // (VFP_MMP_CHAIN_ORDER; only where rate_order(n)).
  bool chain_order(int n) const { return on_in(chain_order_, n); }
  // Whether such a round's ordered searches take their scales of 4 to 16 samples in sum
  // order (small_rows_sum(); VFP_MMP_SUM_ORDER=1 / all; only where rate_order(n)).
  bool sum_order(int n) const { return on_in(sum_order_, n); }
  // The sorted scales' arrays in one allocation at `mem` (null: only the size), each 256-byte
  // aligned; returns the bytes.
  static size_t sorted_layout(unsigned char* mem, SortedScales* so) {
    size_t at = 0;
    auto take = [&](size_t bytes) {
      unsigned char* p = mem ? mem + at : nullptr;
      at += (bytes + 255) / 256 * 256;
      return p;
    };
    for (int s = 0; s < kScales; ++s) {
      so->data[s] = nullptr, so->norms[s] = nullptr, so->bits[s] = nullptr;
      so->sum_data[s] = nullptr, so->sum_norms[s] = nullptr, so->sum_bits[s] = nullptr;
      if (!sorted_scale(s)) continue;
      so->data[s] = reinterpret_cast<int16_t*>(take(sizeof(int16_t) * kMaxIndex * sample_count(s)));
      so->norms[s] = reinterpret_cast<unsigned*>(take(sizeof(unsigned) * kMaxIndex));
      so->bits[s] = reinterpret_cast<double*>(take(sizeof(double) * kMaxIndex));
      if (!sum_scale(s)) continue;
      so->sum_data[s] = reinterpret_cast<int16_t*>(take(sizeof(int16_t) * kMaxIndex * sample_count(s)));
      so->sum_norms[s] = reinterpret_cast<unsigned*>(take(sizeof(unsigned) * kMaxIndex));
      so->sum_bits[s] = reinterpret_cast<double*>(take(sizeof(double) * kMaxIndex));
    }
    so->zero = reinterpret_cast<int*>(take(sizeof(int) * kScales));
    return at;
  }

  // The tasks of a query of K residues of 2^L x 2^L, made at first use (under mu_).
  // How finely a search of n blocks deals its tasks to thread blocks: a block alone (or a
  // few) has its tasks' elements dealt to many, for latency; a round of many blocks has
  // parallelism enough, and each thread block's setup (its segments, its tiles' rates) is
  // then better paid once for all of a task's elements.
  static int spread(int n) { return n < 8 ? 0 : n < 64 ? 1 : 2; }
  static int spread_chunks(int chunks, int regime) {
    return regime == 0 ? chunks : regime == 1 ? std::max(1, chunks / 4) : 1;
  }

  // Tiles of the small-segment search a scale can fill: a task's elements are dealt to at
  // most this many chunks (a dictionary of 256 elements is one tile, and a chunk with no
  // tile would only pay its setup).
  static int small_tiles(int max_elements) {
    return std::clamp((max_elements + kSmallTile - 1) / kSmallTile, 1, kChainChunks);
  }

  // In a round of 8 or more blocks a small task's chunk searches at least two tiles: the
  // round's blocks give the GPU parallelism enough, and with frames in flight the GPU's room
  // for thread blocks, not a step's latency, sets the rate, so each block's setup (its
  // segments, the scales' arguments) is better paid once for more elements (docs/perf.md,
  // MMP log). VFP_MMP_ROUND_CHUNKS=c2,c3,c4,c5 (for measurements) caps the chunks of the
  // units of 2^L at c_L instead.
  int round_small_chunks(int L, int tiles) const {
    const int cap = round_chunks_[static_cast<size_t>(L)];
    return cap > 0 ? cap : std::max(1, tiles / 2);
  }

  // Uploaded on a stream of its own: waiting on the caller's would wait, under the lock, for
  // the caller's last round.
  const TaskList& task_list(int L, int K, int blocks, int tiles) {
    const StreamHandle st = tasks_stream_.get();
    const int regime = spread(blocks);
    TaskList& tl = tasks_[L][K][regime][tiles];
    if (tl.count) return tl;
    std::vector<Task> tasks;
    const int N = 1 << L;
    // Groups as large as keep about two blocks per SM busy: small units (few segments) are
    // split finely, large ones share each element read among 8 segments.
    // A task's elements are dealt to about one block per 32 samples of its segments: every
    // block then has a similar share of the work whatever the scale (a dictionary's
    // elements, 2^lw x 2^lh samples, times the group's segments). The largest scales first,
    // so that their many blocks do not start last.
    const int group = std::clamp(K * mmp::leaf_table_size(L) / 256, 1, kGroup);
    // A 4x4 unit's search is on the block's critical path (its units form a chain): its
    // tasks are dealt finer, a block per 4 samples (docs/perf.md, MMP log).
    const int per_block = L == kMinLog ? 4 : 32;
    std::vector<Task> small;
    for (int lh = L; lh >= 0; --lh)
      for (int lw = L; lw >= 0; --lw) {
        const int segments = K * (N >> lw) * (N >> lh), out = mmp::leaf_scale_offset(L, lw, lh);
        const int n = 1 << (lw + lh);
        if (n <= kSmallMaxN) {
          // leaf_small_kernel: a full dictionary's tiles dealt to 16 blocks for the 4x4 units
          // (on the critical path), fewer for the others (beside it; each block's setup counts);
          // in rounds, at least two tiles a chunk (round_small_chunks()).
          const int chunks = std::min({spread_chunks(L == kMinLog       ? kChainChunks
                                                     : L == kMinLog + 1 ? 8
                                                                        : 4,
                                                     regime),
                                       tiles, regime ? round_small_chunks(L, tiles) : kChainChunks});
          // A block alone's 4x4 units: 16 segments a task, so that each thread takes at most
          // 32 elements of a tile (one segment a thread, the block's threads split the tile):
          // the slowest block sets the link's time.
          const int rows = regime == 0 && L == kMinLog ? 16 : kSmallRows;
          for (int g0 = 0; g0 < segments; g0 += rows) {
            const int count = std::min(rows, segments - g0);
            for (int c = 0; c < chunks; ++c) small.push_back({lw, lh, g0, count, out, c, chunks, tl.chunked, 0});
            ++tl.chunked;
          }
          tl.max_chunks = std::max(tl.max_chunks, chunks);
          continue;
        }
        // Tensor cores: 16 segments a task, a block per 32 (8x8 units, whose choice a chain
        // link waits for) or 128 segment samples (a warp's tile of 8 elements is a few
        // instructions, the block's setup is not).
        const bool mma = L >= mma_min_L_ && n >= kMmaMinN && n <= kMmaMaxN;
        const int task_group = mma ? kMmaRows : group;
        for (int g0 = 0; g0 < segments; g0 += task_group) {
          const int count = std::min(task_group, segments - g0);
          const int mma_per_block = L == kMinLog + 1 ? 32 : 128;
          const int chunks =
              spread_chunks(std::clamp(n * count / (mma ? mma_per_block : per_block), 1, kMaxChunks), regime);
          for (int c = 0; c < chunks; ++c)
            tasks.push_back({lw, lh, g0, count, out, c, chunks, tl.chunked, mma ? 1 : 0});
          if (chunks > 1) ++tl.chunked;
          tl.max_chunks = std::max(tl.max_chunks, chunks);
        }
      }
    // A 4x4 unit's segments (1..16 samples) are all small tasks of one chunk count, which its
    // chain link combines (LeafLane::defer, ChainLink::chunks).
    if (L == kMinLog && (!tasks.empty() || tl.max_chunks > kChainChunks))
      throw Error(ErrorKind::Internal, "MMP GPU search: a 4x4 unit's tasks are not all small ones");
    tl.small = static_cast<int>(small.size());
    tasks.insert(tasks.end(), small.begin(), small.end());
    tl.buf = DeviceBuffer(tasks.size() * sizeof(Task), "MMP search tasks");
    memcpy_h2d_async(tl.buf.get(), tasks.data(), tasks.size() * sizeof(Task), st);
    VFP_CUDA(cudaStreamSynchronize(st));
    tl.count = static_cast<int>(tasks.size());
    return tl;
  }

  std::shared_ptr<Mirror> mirror(uint64_t dict_id) {
    if (const auto h = held_.find(dict_id); h != held_.end()) {
      if (std::shared_ptr<Mirror> m = h->second.lock()) return m;
      held_.erase(h);  // its dictionary is gone
    }
    for (auto it = mirrors_.begin(); it != mirrors_.end(); ++it)
      if ((*it)->id == dict_id) {
        mirrors_.splice(mirrors_.begin(), mirrors_, it);  // most recently used first
        return mirrors_.front();
      }
    // Independent tiles have a dictionary each: keep the most recent ones.
    if (mirrors_.size() >= kMaxMirrors) mirrors_.pop_back();
    mirrors_.push_front(std::make_shared<Mirror>());
    mirrors_.front()->id = dict_id;
    return mirrors_.front();
  }

  // The mirror brought up to the dictionary (under mu_), and the scales' arguments for the
  // kernels. The elements added since the last upload (for a replacing dictionary, those its
  // change log names) go up in one copy (through the lane's pinned staging) and one kernel.
  // The lane's stream first waits for the mirror's last upload, whichever lane made it, and
  // the mirror's event then marks this one: searches on other lanes wait for it on the
  // device, not on the host.
  void sync_dictionary(Mirror& m, const std::array<mmp::ScaleView, kScales>& scales,
                       const std::array<double, kScales>& leaf_bits, ScaleArgs* args, Lane& lane) {
    if (m.held && m.aged)  // the host's copy stopped when the device took the dictionary
      throw Error(ErrorKind::Internal, "MMP GPU search: a held dictionary cannot be copied from the host again");
    const StreamHandle st = lane.stream.get();
    VFP_CUDA(cudaStreamWaitEvent(st, m.ready.e, 0));
    *args = ScaleArgs{};
    UploadItem items[kScales];
    std::vector<int>& listed = lane.upload_indices;  // the index lists, one after another
    listed.clear();
    int n_items = 0;
    size_t samples = 0;
    for (int s = 0; s < kScales; ++s) {
      const mmp::ScaleView& v = scales[static_cast<size_t>(s)];
      if (v.count == 0) continue;
      if (!m.data[s].get()) {
        m.data[s] = DeviceBuffer(sizeof(int16_t) * kMaxIndex * v.size, "MMP dictionary");
        m.norms[s] = DeviceBuffer(sizeof(int) * kMaxIndex, "MMP dictionary");
        m.table[s] = DeviceBuffer(sizeof(int) * kTableSize, "MMP dictionary");
        m.hashes[s] = DeviceBuffer(sizeof(uint64_t) * kMaxIndex, "MMP dictionary");
        memset_async(m.table[s].get(), 0, m.table[s].size(), st);
      }
      UploadItem it{reinterpret_cast<int16_t*>(m.data[s].get()),
                    reinterpret_cast<int*>(m.norms[s].get()),
                    v.changes ? nullptr : reinterpret_cast<int*>(m.table[s].get()),
                    reinterpret_cast<uint64_t*>(m.hashes[s].get()),
                    v.size,
                    0,
                    0,
                    samples,
                    -1};
      if (v.changes) {
        // Rewritten elements by the log; everything again where the mirror is not this
        // dictionary's past or has fallen out of the log.
        const bool stale = v.count < m.count[s] || v.generation < m.generation[s] ||
                           v.generation - m.generation[s] > static_cast<uint64_t>(v.change_ring);
        if (stale) {
          it.from = 0, it.to = v.count;
        } else if (v.generation > m.generation[s]) {
          const size_t first = listed.size();
          lane.upload_seen.assign(static_cast<size_t>(v.count), 0);
          for (uint64_t g = m.generation[s]; g < v.generation; ++g) {
            const int i = v.changes[g % static_cast<uint64_t>(v.change_ring)];
            if (!lane.upload_seen[static_cast<size_t>(i)])
              lane.upload_seen[static_cast<size_t>(i)] = 1, listed.push_back(i);
          }
          it.to = static_cast<int>(listed.size() - first);
          it.idx_at = static_cast<long>(first);
        }
        m.generation[s] = v.generation;
      } else {
        if (v.count < m.count[s]) {  // not the dictionary mirrored (cannot shrink): all again
          m.count[s] = 0;
          memset_async(m.table[s].get(), 0, m.table[s].size(), st);
        }
        it.from = m.count[s], it.to = std::max(v.count, m.count[s]);
      }
      m.count[s] = v.count;
      if (it.to > it.from) {
        items[n_items++] = it;
        samples += static_cast<size_t>(it.to - it.from) * v.size;
      }
      args->data[s] = reinterpret_cast<const int16_t*>(m.data[s].get());
      args->norms[s] = reinterpret_cast<const int*>(m.norms[s].get());
      args->count[s] = v.count;
      args->leaf_bits[s] = leaf_bits[static_cast<size_t>(s)];
    }
    if (n_items == 0) return;
    const size_t head = sizeof(UploadItem) * kScales;
    const size_t index_at = (head + samples * sizeof(int16_t) + 15) / 16 * 16;
    const size_t bytes = index_at + listed.size() * sizeof(int);
    // Grown by doubling: a dictionary's first rounds upload more each time, and every
    // reallocation frees pinned and device memory (cudaFreeHost / cudaFree wait for the
    // device) and allocates again.
    if (lane.stage_upload_bytes < bytes) {
      const size_t room = std::max({bytes, 2 * lane.stage_upload_bytes, kMinUploadBytes});
      lane.stage_upload = std::make_unique<Pinned>(room);
      lane.stage_upload_bytes = room;
    }
    if (lane.upload.size() < bytes)
      lane.upload = DeviceBuffer(std::max({bytes, 2 * lane.upload.size(), kMinUploadBytes}), "MMP dictionary upload");
    const int64_t c0 = now_ns();
    uint8_t* stage = static_cast<uint8_t*>(lane.stage_upload->get());
    std::memcpy(stage, items, sizeof(UploadItem) * n_items);
    if (!listed.empty()) std::memcpy(stage + index_at, listed.data(), listed.size() * sizeof(int));
    int most = 0;
    for (int k = 0; k < n_items; ++k) most = std::max(most, items[k].to - items[k].from);
    for (int s = 0, k = 0; s < kScales && k < n_items; ++s)
      if (items[k].data == reinterpret_cast<int16_t*>(m.data[s].get())) {
        const UploadItem& it = items[k++];
        const mmp::ScaleView& v = scales[static_cast<size_t>(s)];
        int16_t* to = reinterpret_cast<int16_t*>(stage + head) + it.at;
        const size_t n = static_cast<size_t>(v.size);
        if (it.idx_at < 0) {
          std::memcpy(to, v.data + static_cast<size_t>(it.from) * n, static_cast<size_t>(it.to - it.from) * n * 2);
        } else {
          for (int j = 0; j < it.to; ++j)
            std::memcpy(to + static_cast<size_t>(j) * n,
                        v.data + static_cast<size_t>(listed[static_cast<size_t>(it.idx_at + j)]) * n, n * 2);
        }
      }
    upload_copy_ns_ += now_ns() - c0;
    upload_bytes_ += static_cast<int64_t>(bytes);
    memcpy_h2d_async(lane.upload.get(), stage, bytes, st);
    upload_kernel<<<dim3(static_cast<unsigned>((most + kUploadWarps - 1) / kUploadWarps),
                         static_cast<unsigned>(n_items)),
                    32 * kUploadWarps, 0, st>>>(reinterpret_cast<const UploadItem*>(lane.upload.get()),
                                                reinterpret_cast<const int16_t*>(lane.upload.get() + head),
                                                reinterpret_cast<const int*>(lane.upload.get() + index_at));
    VFP_CUDA_LAUNCHED("mmp upload_kernel");
    VFP_CUDA(cudaEventRecord(m.ready.e, st));
  }

  // The kernels' view of a mirror that is ahead of the caller's dictionary (it learnt the
  // last block on the device).
  static void scale_args(const Mirror& m, const std::array<double, kScales>& leaf_bits, ScaleArgs* args) {
    *args = ScaleArgs{};
    for (int s = 0; s < kScales; ++s) {
      if (!m.data[s].get()) continue;
      args->data[s] = reinterpret_cast<const int16_t*>(m.data[s].get());
      args->norms[s] = reinterpret_cast<const int*>(m.norms[s].get());
      args->count[s] = m.count[s];
      args->leaf_bits[s] = leaf_bits[static_cast<size_t>(s)];
    }
  }
  // Where the block's learning writes: the mirror's scales (each allocated, as every scale of
  // a dictionary holds its flat elements from the start).
  // False when a scale of the block has no device storage yet.
  static bool learn_args(const Mirror& m, int BL, int max_elements, BlockConsts* bc) {
    bc->learn.max = std::min(max_elements, kMaxIndex);
    for (int s = 0; s < kScales; ++s) {
      bc->learn.data[s] = reinterpret_cast<int16_t*>(m.data[s].get());
      bc->learn.norms[s] = reinterpret_cast<int*>(m.norms[s].get());
      bc->learn.table[s] = reinterpret_cast<int*>(m.table[s].get());
      bc->learn.hashes[s] = reinterpret_cast<uint64_t*>(m.hashes[s].get());
    }
    for (int lh = 0; lh <= BL; ++lh)
      for (int lw = 0; lw <= BL; ++lw)
        if (!m.data[lw + 6 * lh].get()) return false;
    return true;
  }

  // The last round's placements into a held mirror (place_round()), on the stream of the
  // round that searches it next: after the last round's graph (whose verdicts the host has
  // read), before this round's.
  static void place_pending(Mirror& m, StreamHandle st) {
    if (m.pending == 0) return;
    PlaceArgs a{};
    for (int s = 0; s < kScales; ++s) {
      a.data[s] = reinterpret_cast<int16_t*>(m.data[s].get());
      a.norms[s] = reinterpret_cast<int*>(m.norms[s].get());
      a.hashes[s] = reinterpret_cast<uint64_t*>(m.hashes[s].get());
    }
    a.src = reinterpret_cast<const int16_t*>(m.src.get());
    a.elems = reinterpret_cast<const int4*>(m.elems.get());
    a.h = reinterpret_cast<const uint64_t*>(m.h.get());
    a.norm = reinterpret_cast<const int*>(m.norm.get());
    a.cap = m.cap, a.n = m.pending;
    a.placements = reinterpret_cast<const mmp::Placement*>(m.placed.get());
    VFP_CUDA(cudaStreamWaitEvent(st, m.verdicts_ready.e, 0));
    memcpy_h2d_async(m.placed.get(), m.placements->get(), sizeof(mmp::Placement) * static_cast<size_t>(m.pending), st);
    learn_place_kernel<<<static_cast<unsigned>((m.pending + kVerdictWarps - 1) / kVerdictWarps), 32 * kVerdictWarps, 0,
                         st>>>(a);
    VFP_CUDA_LAUNCHED("mmp learn_place_kernel");
    m.pending = 0;
  }

  // A held dictionary's round buffers for n blocks of 2^BL (a block has fewer new elements
  // than samples, and their samples add up to at most 2 BL times its own: each sample lies in
  // one internal node of each depth of its unit's segmentation), and their place in the
  // round's constants. Grown, never shrunk; the last round's placements are stored first.
  static void round_buffers(Mirror& m, int n, int BL, BlockConsts* bc, StreamHandle st) {
    const int cap = n << (2 * BL), stride = (2 * BL) << (2 * BL);
    if (cap > m.cap || stride > m.src_stride || n > m.blocks) {
      place_pending(m, st);  // from the buffers about to go (freeing them waits for the device)
      m.cap = std::max(cap, m.cap);
      m.src_stride = std::max(stride, m.src_stride);
      m.blocks = std::max(n, m.blocks);
      const auto per_scale = static_cast<size_t>(kScales) * static_cast<size_t>(m.cap);
      m.src = DeviceBuffer(sizeof(int16_t) * static_cast<size_t>(m.src_stride) * static_cast<size_t>(m.blocks),
                           "MMP round learning");
      m.elems = DeviceBuffer(sizeof(int4) * static_cast<size_t>(m.cap), "MMP round learning");
      m.h = DeviceBuffer(sizeof(uint64_t) * per_scale, "MMP round learning");
      m.norm = DeviceBuffer(sizeof(int) * per_scale, "MMP round learning");
      m.before = DeviceBuffer(sizeof(int) * per_scale, "MMP round learning");
      m.total = DeviceBuffer(sizeof(int), "MMP round learning");
      m.verdicts = std::make_unique<Pinned>(sizeof(int64_t) * per_scale);
      if (!m.total_host) m.total_host = std::make_unique<Pinned>(sizeof(int));
    }
    bc->learn.src = reinterpret_cast<int16_t*>(m.src.get());
    bc->learn.src_stride = m.src_stride;
    bc->learn.cap = m.cap;
    bc->learn.elems = reinterpret_cast<int4*>(m.elems.get());
    bc->learn.h = reinterpret_cast<uint64_t*>(m.h.get());
    bc->learn.norm = reinterpret_cast<int*>(m.norm.get());
    bc->learn.before = reinterpret_cast<int*>(m.before.get());
    bc->learn.verdicts = static_cast<int64_t*>(m.verdicts->get());
    bc->learn.total = reinterpret_cast<int*>(m.total.get());
    bc->learn.total_host = static_cast<int*>(m.total_host->get());
  }

  static bool grow(DeviceBuffer& b, size_t bytes, const char* what) {
    if (b.size() >= bytes) return false;
    b = DeviceBuffer(bytes, what);
    return true;
  }

  // The most blocks a round searches at once: kMaxRound, or VFP_MMP_ROUND_BLOCKS (1..kMaxRound;
  // for measurements and tests).
  static int round_blocks() {
    if (const char* e = std::getenv("VFP_MMP_ROUND_BLOCKS")) return std::clamp(std::atoi(e), 1, kMaxRound);
    return kMaxRound;
  }

  // The smallest unit (2^L) whose tasks of 8..256 samples run on tensor cores; 6: none.
  // VFP_MMP_TENSOR_FROM_L overrides it (measurements).
  static int tensor_from_L() {
    int major = 0;
    VFP_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, current_device()));
    cudaFuncAttributes fa{};
    VFP_CUDA(cudaFuncGetAttributes(&fa, leaf_kernel));
    if (major < 8 || fa.binaryVersion < 80) return 6;  // no integer mma.sync (or not built for it)
    if (const char* e = std::getenv("VFP_MMP_TENSOR_FROM_L")) return std::clamp(std::atoi(e), kMinLog, 6);
    return 3;
  }

  static constexpr size_t kMaxMirrors = 64;
  static constexpr size_t kMinUploadBytes = size_t{256} << 10;  // a dictionary upload's first staging
  MmpGpuSearch how_;
  mutable std::mutex mu_;
  int device_;
  int mma_min_L_ = tensor_from_L();
  int round_blocks_ = round_blocks();
  // VFP_MMP_EXTRA_KERNELS=k (for measurements): k launches that do nothing in every round.
  int extra_kernels_ = [] {
    const char* e = std::getenv("VFP_MMP_EXTRA_KERNELS");
    return e ? std::clamp(std::atoi(e), 0, 1000) : 0;
  }();
  // Whether a round's 4x4 chain links run in 64 threads (chain_kernel_lean) and its leaf
  // kernel in 96 registers (leaf_kernel_lean): by default in rounds of 8 or more blocks,
  // where the GPU's room for thread blocks bounds (VFP_MMP_LEAN_LINKS, VFP_MMP_LEAN_LEAF).
  // A block alone waits on each link's latency, which 64 threads lengthen: an untiled
  // 512x512 image took 0.51-0.54 s with lean links in every round against 0.37-0.44 s.
  RoundSwitch lean_links_ = round_switch("VFP_MMP_LEAN_LINKS");
  RoundSwitch lean_leaf_ = [] {
    // Shared memory for 5 of its 34 KB an SM.
    VFP_CUDA(cudaFuncSetAttribute(leaf_kernel_lean, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
    return round_switch("VFP_MMP_LEAN_LEAF");
  }();
  RoundSwitch answers_ = round_switch("VFP_MMP_ANSWERS");
  RoundSwitch rate_order_ = round_switch("VFP_MMP_RATE_ORDER");
  RoundSwitch chain_order_ = round_switch("VFP_MMP_CHAIN_ORDER");
  // Off unless asked for: not yet measured on a GPU (docs/mmp.md, "Sum order").
  RoundSwitch sum_order_ = round_switch("VFP_MMP_SUM_ORDER", RoundSwitch::Never);
  // VFP_MMP_CHUNKS_BY_DICT=0: small tasks dealt to as many chunks as a full dictionary's
  // (for measurements).
  bool chunks_by_dict_ = round_switch("VFP_MMP_CHUNKS_BY_DICT") != RoundSwitch::Never;
  std::array<int, 6> round_chunks_ = round_chunk_caps();  // by unit size; 0: the rule
  static std::array<int, 6> round_chunk_caps() {
    std::array<int, 6> caps{};
    if (const char* e = std::getenv("VFP_MMP_ROUND_CHUNKS")) {
      std::string v(e);
      for (int L = kMinLog; L <= 5 && !v.empty(); ++L) {
        caps[static_cast<size_t>(L)] = std::clamp(std::atoi(v.c_str()), 1, kChainChunks);
        const size_t comma = v.find(',');
        v = comma == std::string::npos ? std::string() : v.substr(comma + 1);
      }
    }
    return caps;
  }
  bool profile_ = std::getenv("VFP_MMP_PROFILE") && std::string(std::getenv("VFP_MMP_PROFILE")) == "1";
  std::map<std::string, double> profile_ms_;  // VFP_MMP_PROFILE: device ms by kernel (under mu_)
  DeviceBuffer log_table_{sizeof(double) * (mmp::kProbOne + 1), "MMP cost table"};
  TaskList tasks_[6][kMaxResidues + 1][3][kChainChunks + 1];  // by unit size, residues, spread(), small_tiles()
  LazyStream tasks_stream_;                                   // the task lists' uploads (under mu_)
  std::list<std::shared_ptr<Mirror>> mirrors_;
  std::unordered_map<uint64_t, std::weak_ptr<Mirror>> held_;  // held dictionaries (hold_dictionary())
  std::unordered_map<std::thread::id, std::unique_ptr<Group>> threads_;
  struct Reserved {
    std::unique_ptr<Group> group;
    bool held = false;
  };
  std::vector<Reserved> reserved_;
  struct RoundGroup {
    std::unique_ptr<Group> group;
    bool busy = false;
  };
  std::vector<RoundGroup> rounds_;
  std::atomic<int64_t> calls_{0}, blocks_{0}, wall_ns_{0}, kernel_ns_{0};  // the breakdown stats() reports
  // A round's host part: waiting for mu_, holding it (the dictionary's upload staged), the
  // rest of the staging and the launch, the wait for the device.
  std::atomic<int64_t> lock_wait_ns_{0}, lock_hold_ns_{0}, launch_ns_{0}, sync_ns_{0}, verdict_wait_ns_{0};
  // Of launch_ns_: the blocks' inputs staged, the models' changes found and staged, the
  // cudaGraphLaunch call.
  std::atomic<int64_t> inputs_ns_{0}, models_ns_{0}, graph_launch_ns_{0};
  // Of lock_hold_ns_: the dictionary's changed elements copied to the upload's staging, and
  // the bytes uploaded.
  std::atomic<int64_t> upload_copy_ns_{0}, upload_bytes_{0};
};

}  // namespace

std::shared_ptr<mmp::LeafSearch> make_mmp_leaf_search(MmpGpuSearch how) {
  if (!probe().usable) throw Error(ErrorKind::Gpu, "MMP on the GPU: no usable CUDA device (" + probe().reason + ")");
  return std::make_shared<GpuLeafSearch>(how);
}

}  // namespace vfp::cuda
