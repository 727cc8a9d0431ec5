// What a step of the MMP block search's critical path costs to synchronise, by mechanism.
// The untiled search of a block is a chain of 16 4x4 units, each a wide leaf search (one
// to two hundred thread blocks) followed by a one-block chain link that reads all of it
// and writes what the next search reads: 32 dependent steps a block. The encoder runs them
// as a CUDA graph (one launch a block); the issue asks whether a persistent kernel or
// cooperative groups would do better. This program runs that dependency pattern with
// almost no work in each step, so the time is the synchronisation alone:
//   stream      32 kernel launches a block, queued on one stream
//   graph       the same 32 kernels as one CUDA graph (what the encoder does)
//   cooperative one cooperative kernel a block, cg::this_grid().sync() between the steps
//   flags       one cooperative kernel a block, the wide step's blocks counted by an atomic
//               and the one-block step's end published by a flag (no full barrier)
// Each mode's result is checked against the host's, so the steps really ran in order.
//     vfpipe-bench-mmp-sync [--wide 132,264] [--units 16] [--iters 200]
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "apps/bench/bench_util.hpp"
#include "core/error.hpp"
#include "core/gpu.hpp"

namespace cg = cooperative_groups;
using namespace vfp;

namespace {
constexpr int kThreads = 128;

// The wide step: every block reads what the last one-block step wrote and leaves a value.
__device__ inline void wide_step(const int* val, int* acc) {
  if (threadIdx.x == 0) acc[blockIdx.x] = __ldcg(val) + static_cast<int>(blockIdx.x);
}
// The one-block step: reads every wide block's value, writes the next search's input.
__device__ inline void narrow_step(const int* acc, int* val, int wide) {
  __shared__ int part[kThreads];
  int s = 0;
  for (int b = threadIdx.x; b < wide; b += kThreads) s += __ldcg(&acc[b]);
  part[threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    int t = 0;
    for (int i = 0; i < kThreads; ++i) t += part[i];
    *val = t & 0xFFFF;
  }
  __syncthreads();
}

__global__ void wide_kernel(const int* val, int* acc) { wide_step(val, acc); }
__global__ void narrow_kernel(const int* acc, int* val, int wide) { narrow_step(acc, val, wide); }

__global__ void cooperative_kernel(int* val, int* acc, int units) {
  cg::grid_group grid = cg::this_grid();
  for (int u = 0; u < units; ++u) {
    wide_step(val, acc);
    grid.sync();
    if (blockIdx.x == 0) narrow_step(acc, val, static_cast<int>(gridDim.x));
    grid.sync();
  }
}

// `arrived` counts the wide steps' blocks over the whole run, `done` the one-block steps:
// the chain's dependencies and nothing more (block 0 waits for the wide step, the others
// for block 0).
__global__ void flags_kernel(int* val, int* acc, int units, unsigned* arrived, volatile unsigned* done, unsigned base) {
  const unsigned wide = gridDim.x;
  for (int u = 0; u < units; ++u) {
    wide_step(val, acc);
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      atomicAdd(arrived, 1u);
    }
    if (blockIdx.x == 0) {
      if (threadIdx.x == 0)
        while (atomicAdd(arrived, 0u) < (base + u + 1) * wide) {
        }
      __syncthreads();
      __threadfence();
      narrow_step(acc, val, static_cast<int>(wide));
      if (threadIdx.x == 0) {
        __threadfence();
        *done = base + u + 1;
      }
    } else {
      if (threadIdx.x == 0)
        while (*done < base + u + 1) {
        }
      __syncthreads();
      __threadfence();
    }
  }
}

int expected(int wide, int units, int blocks) {
  long long v = 0;
  for (int i = 0; i < units * blocks; ++i) v = (wide * v + static_cast<long long>(wide) * (wide - 1) / 2) & 0xFFFF;
  return static_cast<int>(v);
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"the MMP search's critical path: a step's synchronisation by mechanism"};
  std::string wides = "132,264";
  int units = 16, iters = 200;
  app.add_option("--wide", wides, "thread blocks of the wide step (comma-separated)");
  app.add_option("--units", units, "4x4 units a block (two steps each)")->check(CLI::Range(1, 1024));
  app.add_option("--iters", iters, "blocks timed per mode")->check(CLI::Range(10, 100000));
  CLI11_PARSE(app, argc, argv);
  if (!bench::require_gpu()) return 1;
  try {
    int dev = 0, sms = 0, coop = 0, per_sm = 0;
    VFP_CUDA(cudaGetDevice(&dev));
    VFP_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    VFP_CUDA(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
    VFP_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, flags_kernel, kThreads, 0));
    int per_sm_coop = 0;
    VFP_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm_coop, cooperative_kernel, kThreads, 0));
    std::printf("device: %s, %d SMs; cooperative launch %s; co-resident blocks of %d threads: %d an SM\n",
                vfp::cuda::device_name(dev).c_str(), sms, coop ? "yes" : "no", kThreads, std::min(per_sm, per_sm_coop));
    std::printf("a block: %d units = %d dependent steps; %d blocks timed, median of 5 runs\n", units, 2 * units, iters);
    std::printf("%-6s %-12s %14s %14s\n", "wide", "mode", "us a block", "us a step");
    cudaStream_t st;
    VFP_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    for (const std::string& w : bench::split_list(wides)) {
      const int wide = std::stoi(w);
      if (wide < 1 || wide > std::min(per_sm, per_sm_coop) * sms) {
        std::printf("%-6d (skipped: more blocks than can be co-resident)\n", wide);
        continue;
      }
      int *val = nullptr, *acc = nullptr;
      unsigned *arrived = nullptr, *done = nullptr;
      VFP_CUDA(cudaMalloc(&val, sizeof(int)));
      VFP_CUDA(cudaMalloc(&acc, sizeof(int) * static_cast<size_t>(wide)));
      VFP_CUDA(cudaMalloc(&arrived, sizeof(unsigned)));
      VFP_CUDA(cudaMalloc(&done, sizeof(unsigned)));
      unsigned base = 0;  // flags_kernel's counters keep counting from launch to launch
      auto reset = [&] {
        VFP_CUDA(cudaMemsetAsync(val, 0, sizeof(int), st));
        VFP_CUDA(cudaMemsetAsync(arrived, 0, sizeof(unsigned), st));
        VFP_CUDA(cudaMemsetAsync(done, 0, sizeof(unsigned), st));
        base = 0;
      };
      auto enqueue_steps = [&] {
        for (int u = 0; u < units; ++u) {
          wide_kernel<<<wide, kThreads, 0, st>>>(val, acc);
          narrow_kernel<<<1, kThreads, 0, st>>>(acc, val, wide);
        }
      };
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      VFP_CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
      enqueue_steps();
      VFP_CUDA(cudaStreamEndCapture(st, &graph));
      VFP_CUDA(cudaGraphInstantiate(&exec, graph, 0));
      struct Mode {
        const char* name;
        std::function<void()> block;
      };
      const std::vector<Mode> modes = {
          {"stream", enqueue_steps},
          {"graph", [&] { VFP_CUDA(cudaGraphLaunch(exec, st)); }},
          {"cooperative",
           [&] {
             void* args[] = {&val, &acc, &units};
             VFP_CUDA(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(cooperative_kernel), dim3(wide),
                                                  dim3(kThreads), args, 0, st));
           }},
          {"flags",
           [&] {
             void* args[] = {&val, &acc, &units, &arrived, &done, &base};
             VFP_CUDA(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(flags_kernel), dim3(wide), dim3(kThreads),
                                                  args, 0, st));
             base += static_cast<unsigned>(units);
           }},
      };
      for (const Mode& m : modes) {
        if (!coop && std::string(m.name) != "stream" && std::string(m.name) != "graph") continue;
        std::vector<double> runs;
        for (int run = 0; run < 5; ++run) {
          reset();
          m.block();  // warm-up, also checked below
          vfp::cuda::Event a, b;
          a.record(st);
          for (int i = 0; i < iters; ++i) m.block();
          b.record(st);
          b.synchronize();
          const float ms = vfp::cuda::Event::elapsed_ms(a, b);
          int got = -1;
          VFP_CUDA(cudaMemcpy(&got, val, sizeof(int), cudaMemcpyDeviceToHost));
          if (got != expected(wide, units, iters + 1))
            throw Error(ErrorKind::Internal, std::string(m.name) + ": the steps ran out of order (result " +
                                                 std::to_string(got) + ", expected " +
                                                 std::to_string(expected(wide, units, iters + 1)) + ")");
          runs.push_back(ms * 1e3 / iters);
        }
        std::sort(runs.begin(), runs.end());
        std::printf("%-6d %-12s %14.2f %14.3f\n", wide, m.name, runs[2], runs[2] / (2 * units));
      }
      VFP_CUDA(cudaGraphExecDestroy(exec));
      VFP_CUDA(cudaGraphDestroy(graph));
      VFP_CUDA(cudaFree(val));
      VFP_CUDA(cudaFree(acc));
      VFP_CUDA(cudaFree(arrived));
      VFP_CUDA(cudaFree(done));
    }
    VFP_CUDA(cudaStreamDestroy(st));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vfpipe-bench-mmp-sync: %s\n", e.what());
    return 1;
  }
  return 0;
}
