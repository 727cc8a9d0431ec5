#include "cuda/mmp_search.hpp"

#include <cuda_runtime.h>
#include <math_constants.h>

#include <algorithm>
#include <climits>
#include <list>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/error.hpp"
#include "core/gpu.hpp"

namespace vfp::cuda {

namespace {

constexpr int kScales = mmp::kSearchScales;
constexpr int kMaxIndex = 4096;  // 12-bit dictionary indices
constexpr int kThreads = 128;

struct Task {  // one segment of one scale of a unit
  int lw, lh, x0, y0, out;
};

struct ScaleArgs {
  const int16_t* data[kScales];
  int count[kScales];
  double leaf_bits[kScales];
};

// (J, index) lexicographic minimum; index INT_MAX: none yet.
__device__ inline void take_min(double& bj, int& bi, double oj, int oi) {
  if (oj < bj || (oj == bj && oi < bi)) bj = oj, bi = oi;
}

__global__ void leaf_kernel(const Task* tasks, const int* residues, int N, int table, ScaleArgs sc,
                            const double* bits, double lambda, double* out_j, int* out_i) {
  const Task t = tasks[blockIdx.x];
  const int k = blockIdx.y;
  const int w = 1 << t.lw, h = 1 << t.lh, n = w * h, s = t.lw + 6 * t.lh;
  __shared__ int seg[32 * 32];
  const int* r = residues + static_cast<size_t>(k) * N * N;
  for (int q = threadIdx.x; q < n; q += blockDim.x) seg[q] = r[(t.y0 + (q >> t.lw)) * N + t.x0 + (q & (w - 1))];
  __syncthreads();
  const int16_t* data = sc.data[s];
  const int count = sc.count[s];
  const double leaf = sc.leaf_bits[s];
  const double* b = bits + static_cast<size_t>(s) * kMaxIndex;
  double bj = CUDART_INF;
  int bi = INT_MAX;
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    const int16_t* e = data + static_cast<size_t>(i) * n;
    int sse = 0;
    for (int q = 0; q < n; ++q) {
      const int d = seg[q] - e[q];
      sse += d * d;
    }
    const double j = __dadd_rn(static_cast<double>(sse), __dmul_rn(lambda, __dadd_rn(b[i], leaf)));
    take_min(bj, bi, j, i);
  }
  for (int o = 16; o > 0; o >>= 1) {
    const double oj = __shfl_down_sync(0xffffffffu, bj, o);
    const int oi = __shfl_down_sync(0xffffffffu, bi, o);
    take_min(bj, bi, oj, oi);
  }
  __shared__ double wj[kThreads / 32];
  __shared__ int wi[kThreads / 32];
  const int warp = threadIdx.x >> 5;
  if ((threadIdx.x & 31) == 0) wj[warp] = bj, wi[warp] = bi;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int q = 1; q < kThreads / 32; ++q) take_min(bj, bi, wj[q], wi[q]);
    out_j[static_cast<size_t>(k) * table + t.out] = bj;
    out_i[static_cast<size_t>(k) * table + t.out] = bi == INT_MAX ? -1 : bi;
  }
}

class GpuLeafSearch final : public mmp::LeafSearch {
 public:
  GpuLeafSearch() : device_(current_device()) {
    for (int L = 2; L <= 5; ++L) {
      std::vector<Task> tasks;
      const int N = 1 << L;
      for (int lh = 0; lh <= L; ++lh)
        for (int lw = 0; lw <= L; ++lw)
          for (int iy = 0; iy < (N >> lh); ++iy)
            for (int ix = 0; ix < (N >> lw); ++ix)
              tasks.push_back({lw, lh, ix << lw, iy << lh, mmp::leaf_scale_offset(L, lw, lh) + ix + iy * (N >> lw)});
      task_count_[L] = static_cast<int>(tasks.size());
      tasks_[L] = DeviceBuffer(tasks.size() * sizeof(Task), "MMP search tasks");
      VFP_CUDA(cudaMemcpy(tasks_[L].get(), tasks.data(), tasks.size() * sizeof(Task), cudaMemcpyHostToDevice));
    }
  }

  std::string name() const override { return "cuda:" + std::to_string(device_); }

  // Each calling thread has a lane (stream, index costs, buffers), so the tiles of a round,
  // coded on several threads, search at once; the dictionary mirrors are shared.
  void search(const mmp::LeafQuery& q, double* J, int* index) override {
    set_device(device_);
    Lane& lane = this_lane();
    const StreamHandle st = lane.stream.get();
    const int N = 1 << q.L, table = mmp::leaf_table_size(q.L);
    ScaleArgs args{};
    std::shared_ptr<Mirror> m;  // held until the kernel is done: eviction cannot free it under us
    {
      std::lock_guard<std::mutex> lk(mu_);
      m = mirror(q);
      bool uploaded = false;
      for (int s = 0; s < kScales; ++s) {
        const mmp::ScaleView& v = q.scales[static_cast<size_t>(s)];
        if (v.count == 0) continue;
        uploaded |= sync_scale(*m, s, v, st);
        args.data[s] = reinterpret_cast<const int16_t*>(m->data[s].get());
        args.count[s] = v.count;
        args.leaf_bits[s] = q.leaf_bits[static_cast<size_t>(s)];
      }
      if (uploaded) lane.stream.synchronize();  // before another lane reads the new elements
    }
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
    memcpy_h2d_async(lane.residues.get(), q.residues, res_bytes, st);
    leaf_kernel<<<dim3(static_cast<unsigned>(task_count_[q.L]), static_cast<unsigned>(q.K)), kThreads, 0, st>>>(
        reinterpret_cast<const Task*>(tasks_[q.L].get()), reinterpret_cast<const int*>(lane.residues.get()), N, table,
        args, reinterpret_cast<const double*>(lane.bits.get()), q.lambda, reinterpret_cast<double*>(lane.out_j.get()),
        reinterpret_cast<int*>(lane.out_i.get()));
    VFP_CUDA_LAUNCHED("mmp leaf_kernel");
    memcpy_d2h_async(J, lane.out_j.get(), out * sizeof(double), st);
    memcpy_d2h_async(index, lane.out_i.get(), out * sizeof(int), st);
    lane.stream.synchronize();
  }

 private:
  // A dictionary's device copy: per scale room for every index, filled up to `count`.
  struct Mirror {
    uint64_t id = 0;
    DeviceBuffer data[kScales];
    int count[kScales] = {};
  };
  struct Lane {
    Stream stream;
    DeviceBuffer bits{sizeof(double) * kScales * kMaxIndex, "MMP index costs"};
    DeviceBuffer residues, out_j, out_i;
    uint64_t costs_id = 0;  // the index costs in `bits`, for the scales of units up to 2^costs_L
    int costs_L = 0;
  };

  Lane& this_lane() {
    std::lock_guard<std::mutex> lk(mu_);
    std::unique_ptr<Lane>& l = lanes_[std::this_thread::get_id()];
    if (!l) l = std::make_unique<Lane>();
    return *l;
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
    if (!m.data[s].get()) m.data[s] = DeviceBuffer(sizeof(int16_t) * kMaxIndex * v.size, "MMP dictionary");
    if (v.count < m.count[s]) m.count[s] = 0;  // not the dictionary mirrored (cannot shrink): all again
    if (v.count == m.count[s]) return false;
    const size_t from = static_cast<size_t>(m.count[s]) * v.size, to = static_cast<size_t>(v.count) * v.size;
    memcpy_h2d_async(m.data[s].get() + from * sizeof(int16_t), v.data + from, (to - from) * sizeof(int16_t), st);
    m.count[s] = v.count;
    return true;
  }

  static void grow(DeviceBuffer& b, size_t bytes, const char* what) {
    if (b.size() < bytes) b = DeviceBuffer(bytes, what);
  }

  static constexpr size_t kMaxMirrors = 64;
  std::mutex mu_;
  int device_;
  DeviceBuffer tasks_[6];
  int task_count_[6] = {};
  std::list<std::shared_ptr<Mirror>> mirrors_;
  std::unordered_map<std::thread::id, std::unique_ptr<Lane>> lanes_;
};

}  // namespace

std::shared_ptr<mmp::LeafSearch> make_mmp_leaf_search() {
  if (!probe().usable) throw Error(ErrorKind::Gpu, "MMP on the GPU: no usable CUDA device (" + probe().reason + ")");
  return std::make_shared<GpuLeafSearch>();
}

}  // namespace vfp::cuda
