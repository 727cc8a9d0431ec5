#include "cuda/mmp_search.hpp"

#include <cuda_runtime.h>
#include <math_constants.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/error.hpp"
#include "core/frame.hpp"
#include "core/gpu.hpp"
#include "core/log.hpp"

namespace vfp::cuda {

namespace {

constexpr int kScales = mmp::kSearchScales;
constexpr int kMaxIndex = 4096;  // 12-bit dictionary indices
constexpr int kThreads = 128;
constexpr int kMaxResidues = 11;  // candidate modes of a unit

constexpr int kGroup = 8;  // segments of one scale searched together: each element is read once for them

// Up to kGroup segments of one scale: segments g0 .. g0 + count - 1 of the scale, numbered
// across the query's residues (g = k * segments_per_residue + position).
// Large segments make a task long (its elements times their samples times the group): such
// a task's elements are dealt to `chunks` thread blocks (element i to chunk i % (128 *
// chunks) / 128), whose (J, index) minima a second kernel combines.
struct Task {
  int lw, lh, g0, count, out;  // out: the scale's offset in a residue's leaf table
  int chunk, chunks;
};
constexpr int kMaxChunks = 32;

struct ScaleArgs {
  const int16_t* data[kScales];
  const int* norms[kScales];  // each element's sum of squared samples
  int count[kScales];
  double leaf_bits[kScales];
};

// (J, index) lexicographic minimum; index INT_MAX: none yet.
__device__ inline void take_min(double& bj, int& bi, double oj, int oi) {
  if (oj < bj || (oj == bj && oi < bi)) bj = oj, bi = oi;
}

// |x|^2 + |d|^2 - 2 x.d, in 64 bits (each term fits 32), as the double J adds to.
__device__ inline double sse_of(int seg_sq, int norm, int dot) {
  return static_cast<double>(static_cast<long long>(seg_sq) + norm - 2LL * dot);
}

// One thread block per task: its segments in shared memory, its threads striding over the
// scale's elements, each element's samples read once and compared with every segment.
// SSE = |x|^2 + |d|^2 - 2 x.d in exact integers (each term at most 1024 * 255^2): the
// squared norms are computed once (segments here, elements at upload), the inner loop is
// one multiply-add per sample and segment, and each thread takes two elements at a time so
// that a segment sample read from shared memory serves both.
__global__ void leaf_kernel(const Task* tasks, const int* residues, int N, int table, ScaleArgs sc, const double* bits,
                            double lambda, double* out_j, int* out_i, double* part_j, int* part_i, size_t part_stride) {
  const Task t = tasks[blockIdx.x];
  const int w = 1 << t.lw, h = 1 << t.lh, n = w * h, s = t.lw + 6 * t.lh;
  const int nx = N >> t.lw, per_residue = nx * (N >> t.lh);
  __shared__ int seg[kGroup * 32 * 32];
  __shared__ int seg_sq[kGroup];
  for (int idx = threadIdx.x; idx < t.count * n; idx += blockDim.x) {
    const int g = idx / n, q = idx - g * n, gg = t.g0 + g, k = gg / per_residue, at = gg - k * per_residue;
    const int x = (at % nx) * w + (q & (w - 1)), y = (at / nx) * h + (q >> t.lw);
    seg[g * n + q] = residues[static_cast<size_t>(k) * N * N + y * N + x];
  }
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int g = warp; g < t.count; g += blockDim.x >> 5) {
    int sq = 0;
    for (int q = lane; q < n; q += 32) sq += seg[g * n + q] * seg[g * n + q];
    for (int o = 16; o > 0; o >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, o);
    if (lane == 0) seg_sq[g] = sq;
  }
  __syncthreads();
  const int16_t* data = sc.data[s];
  const int* norms = sc.norms[s];
  const int count = sc.count[s];
  const double leaf = sc.leaf_bits[s];
  const double* b = bits + static_cast<size_t>(s) * kMaxIndex;
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
}

// Each new element's sum of squared samples (elements [from, to) of a scale of n samples).
__global__ void element_norms_kernel(const int16_t* data, int n, int from, int to, int* norms) {
  const int i = from + blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= to) return;
  int sq = 0;
  for (int q = 0; q < n; ++q) {
    const int v = data[static_cast<size_t>(i) * n + q];
    sq += v * v;
  }
  norms[i] = sq;
}

// The chunks' minima of the chunked tasks (one thread block per task, listed once).
__global__ void combine_kernel(const Task* tasks, int N, int table, const double* part_j, const int* part_i,
                               size_t part_stride, double* out_j, int* out_i) {
  const Task t = tasks[blockIdx.x];
  const int g = threadIdx.x;
  if (g >= t.count) return;
  const int nx = N >> t.lw, per_residue = nx * (N >> t.lh);
  const int gg = t.g0 + g, k = gg / per_residue, at = gg - k * per_residue;
  const size_t o = static_cast<size_t>(k) * table + t.out + at;
  double j = part_j[o];
  int i = part_i[o];
  for (int c = 1; c < t.chunks; ++c) take_min(j, i, part_j[c * part_stride + o], part_i[c * part_stride + o]);
  out_j[o] = j;
  out_i[o] = i == INT_MAX ? -1 : i;
}

class GpuLeafSearch final : public mmp::LeafSearch {
 public:
  GpuLeafSearch() : device_(current_device()) {}

  std::string name() const override { return "cuda:" + std::to_string(device_); }

  // Each calling thread has a lane (stream, index costs, buffers), so the tiles of a round,
  // coded on several threads, search at once; the dictionary mirrors are shared.
  void search(const mmp::LeafQuery& q, double* J, int* index) override {
    if (q.L < 2 || q.L > 5 || q.K < 1 || q.K > kMaxResidues)
      throw Error(ErrorKind::Usage, "MMP GPU search: units of 4..32 samples and 1..11 residues");
    const int64_t t0 = now_ns();
    set_device(device_);
    const int N = 1 << q.L, table = mmp::leaf_table_size(q.L);
    ScaleArgs args{};
    std::shared_ptr<Mirror> m;  // held until the kernel is done: eviction cannot free it under us
    const TaskList* tasks = nullptr;
    Lane* lp = nullptr;
    {
      std::lock_guard<std::mutex> lk(mu_);
      std::unique_ptr<Lane>& l = lanes_[std::this_thread::get_id()];
      if (!l) l = std::make_unique<Lane>();
      lp = l.get();
      tasks = &task_list(q.L, q.K, lp->stream.get());
      m = mirror(q);
      bool uploaded = false;
      for (int s = 0; s < kScales; ++s) {
        const mmp::ScaleView& v = q.scales[static_cast<size_t>(s)];
        if (v.count == 0) continue;
        uploaded |= sync_scale(*m, s, v, lp->stream.get());
        args.data[s] = reinterpret_cast<const int16_t*>(m->data[s].get());
        args.norms[s] = reinterpret_cast<const int*>(m->norms[s].get());
        args.count[s] = v.count;
        args.leaf_bits[s] = q.leaf_bits[static_cast<size_t>(s)];
      }
      if (uploaded) lp->stream.synchronize();  // before another lane reads the new elements
    }
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
    }
    const size_t res_bytes = sizeof(int) * static_cast<size_t>(q.K) * N * N;
    const size_t out = static_cast<size_t>(q.K) * table;
    grow(lane.residues, res_bytes, "MMP residues");
    grow(lane.out_j, out * sizeof(double), "MMP leaf table");
    grow(lane.out_i, out * sizeof(int), "MMP leaf table");
    if (tasks->combine_count) {
      grow(lane.part_j, out * tasks->max_chunks * sizeof(double), "MMP partial leaf tables");
      grow(lane.part_i, out * tasks->max_chunks * sizeof(int), "MMP partial leaf tables");
    }
    // Through pinned staging: the copies are then truly asynchronous, one wait at the end.
    std::memcpy(lane.stage_in.get(), q.residues, res_bytes);
    memcpy_h2d_async(lane.residues.get(), lane.stage_in.get(), res_bytes, st);
    lane.kernel_start.record(st);
    leaf_kernel<<<static_cast<unsigned>(tasks->count), kThreads, 0, st>>>(
        reinterpret_cast<const Task*>(tasks->buf.get()), reinterpret_cast<const int*>(lane.residues.get()), N, table,
        args, reinterpret_cast<const double*>(lane.bits.get()), q.lambda, reinterpret_cast<double*>(lane.out_j.get()),
        reinterpret_cast<int*>(lane.out_i.get()), reinterpret_cast<double*>(lane.part_j.get()),
        reinterpret_cast<int*>(lane.part_i.get()), out);
    VFP_CUDA_LAUNCHED("mmp leaf_kernel");
    if (tasks->combine_count) {
      combine_kernel<<<static_cast<unsigned>(tasks->combine_count), 32, 0, st>>>(
          reinterpret_cast<const Task*>(tasks->combine.get()), N, table,
          reinterpret_cast<const double*>(lane.part_j.get()), reinterpret_cast<const int*>(lane.part_i.get()), out,
          reinterpret_cast<double*>(lane.out_j.get()), reinterpret_cast<int*>(lane.out_i.get()));
      VFP_CUDA_LAUNCHED("mmp combine_kernel");
    }
    lane.kernel_end.record(st);
    memcpy_d2h_async(lane.stage_j.get(), lane.out_j.get(), out * sizeof(double), st);
    memcpy_d2h_async(lane.stage_i.get(), lane.out_i.get(), out * sizeof(int), st);
    lane.stream.synchronize();
    std::memcpy(J, lane.stage_j.get(), out * sizeof(double));
    std::memcpy(index, lane.stage_i.get(), out * sizeof(int));
    kernel_ns_ += static_cast<int64_t>(Event::elapsed_ms(lane.kernel_start, lane.kernel_end) * 1e6);
    wall_ns_ += now_ns() - t0;
    ++calls_;
  }

  std::string stats() const override {
    const int64_t n = calls_.load();
    if (n == 0) return "";
    const double wall = wall_ns_.load() * 1e-9, kernel = kernel_ns_.load() * 1e-9;
    return log::format(
        "%lld searches, %.0f us each: the kernel %.0f us, copies, launches and waits %.0f us (%.2f s "
        "in searches, summed over threads)",
        static_cast<long long>(n), wall / n * 1e6, kernel / n * 1e6, (wall - kernel) / n * 1e6, wall);
  }

 private:
  // A dictionary's device copy: per scale room for every index, filled up to `count`.
  struct Mirror {
    uint64_t id = 0;
    DeviceBuffer data[kScales], norms[kScales];
    int count[kScales] = {};
  };
  struct Pinned {
    explicit Pinned(size_t bytes) : p(host_alloc_pinned(bytes)) {}
    ~Pinned() { host_free_pinned(p); }
    Pinned(const Pinned&) = delete;
    Pinned& operator=(const Pinned&) = delete;
    void* get() const { return p; }
    void* p;
  };
  // The largest query: 11 residues of 32 x 32, 11 leaf tables of 63 x 63 segments.
  static constexpr size_t kMaxResidueBytes = sizeof(int) * kMaxResidues * 32 * 32;
  static constexpr size_t kMaxTable = static_cast<size_t>(kMaxResidues) * 63 * 63;
  struct Lane {
    Stream stream;
    Pinned stage_in{kMaxResidueBytes}, stage_j{kMaxTable * sizeof(double)}, stage_i{kMaxTable * sizeof(int)};
    DeviceBuffer bits{sizeof(double) * kScales * kMaxIndex, "MMP index costs"};
    DeviceBuffer residues, out_j, out_i, part_j, part_i;
    uint64_t costs_id = 0;  // the index costs in `bits`, for the scales of units up to 2^costs_L
    int costs_L = 0;
    Event kernel_start, kernel_end;
  };

  struct TaskList {
    DeviceBuffer buf, combine;  // the leaf kernel's tasks; the chunked ones, once each
    int count = 0, combine_count = 0, max_chunks = 1;
  };
  // The tasks of a query of K residues of 2^L x 2^L, made at first use (under mu_).
  const TaskList& task_list(int L, int K, StreamHandle st) {
    TaskList& tl = tasks_[L][K];
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
    std::vector<Task> combine;
    for (int lh = L; lh >= 0; --lh)
      for (int lw = L; lw >= 0; --lw) {
        const int segments = K * (N >> lw) * (N >> lh), out = mmp::leaf_scale_offset(L, lw, lh);
        for (int g0 = 0; g0 < segments; g0 += group) {
          const int count = std::min(group, segments - g0);
          const int chunks = std::clamp((1 << (lw + lh)) * count / 32, 1, kMaxChunks);
          for (int c = 0; c < chunks; ++c) tasks.push_back({lw, lh, g0, count, out, c, chunks});
          if (chunks > 1) combine.push_back(tasks.back());
          tl.max_chunks = std::max(tl.max_chunks, chunks);
        }
      }
    tl.buf = DeviceBuffer(tasks.size() * sizeof(Task), "MMP search tasks");
    memcpy_h2d_async(tl.buf.get(), tasks.data(), tasks.size() * sizeof(Task), st);
    if (!combine.empty()) {
      tl.combine = DeviceBuffer(combine.size() * sizeof(Task), "MMP search tasks");
      memcpy_h2d_async(tl.combine.get(), combine.data(), combine.size() * sizeof(Task), st);
    }
    VFP_CUDA(cudaStreamSynchronize(st));
    tl.count = static_cast<int>(tasks.size());
    tl.combine_count = static_cast<int>(combine.size());
    return tl;
  }

  std::shared_ptr<Mirror> mirror(const mmp::LeafQuery& q) {
    for (auto it = mirrors_.begin(); it != mirrors_.end(); ++it)
      if ((*it)->id == q.dict_id) {
        mirrors_.splice(mirrors_.begin(), mirrors_, it);  // most recently used first
        return mirrors_.front();
      }
    // Independent tiles have a dictionary each: keep the most recent ones.
    if (mirrors_.size() >= kMaxMirrors) mirrors_.pop_back();
    mirrors_.push_front(std::make_shared<Mirror>());
    mirrors_.front()->id = q.dict_id;
    return mirrors_.front();
  }

  // The scale's elements added since the last upload; true if there were any.
  static bool sync_scale(Mirror& m, int s, const mmp::ScaleView& v, StreamHandle st) {
    if (!m.data[s].get()) {
      m.data[s] = DeviceBuffer(sizeof(int16_t) * kMaxIndex * v.size, "MMP dictionary");
      m.norms[s] = DeviceBuffer(sizeof(int) * kMaxIndex, "MMP dictionary");
    }
    if (v.count < m.count[s]) m.count[s] = 0;  // not the dictionary mirrored (cannot shrink): all again
    if (v.count == m.count[s]) return false;
    const size_t from = static_cast<size_t>(m.count[s]) * v.size, to = static_cast<size_t>(v.count) * v.size;
    memcpy_h2d_async(m.data[s].get() + from * sizeof(int16_t), v.data + from, (to - from) * sizeof(int16_t), st);
    const int added = v.count - m.count[s];
    element_norms_kernel<<<static_cast<unsigned>((added + 127) / 128), 128, 0, st>>>(
        reinterpret_cast<const int16_t*>(m.data[s].get()), v.size, m.count[s], v.count,
        reinterpret_cast<int*>(m.norms[s].get()));
    VFP_CUDA_LAUNCHED("mmp element_norms_kernel");
    m.count[s] = v.count;
    return true;
  }

  static void grow(DeviceBuffer& b, size_t bytes, const char* what) {
    if (b.size() < bytes) b = DeviceBuffer(bytes, what);
  }

  static constexpr size_t kMaxMirrors = 64;
  std::mutex mu_;
  int device_;
  TaskList tasks_[6][kMaxResidues + 1];
  std::list<std::shared_ptr<Mirror>> mirrors_;
  std::unordered_map<std::thread::id, std::unique_ptr<Lane>> lanes_;
  std::atomic<int64_t> calls_{0}, wall_ns_{0}, kernel_ns_{0};  // the breakdown stats() reports
};

}  // namespace

std::shared_ptr<mmp::LeafSearch> make_mmp_leaf_search() {
  if (!probe().usable) throw Error(ErrorKind::Gpu, "MMP on the GPU: no usable CUDA device (" + probe().reason + ")");
  return std::make_shared<GpuLeafSearch>();
}

}  // namespace vfp::cuda
