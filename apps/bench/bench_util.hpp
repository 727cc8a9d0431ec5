// Shared by the GPU benchmark programs: CUDA-event timing and NPP's stream context.
#pragma once
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "core/gpu.hpp"
#include "pipeline/stats.hpp"
#if VFPIPE_HAVE_NPP
#include <cuda_runtime.h>
#include <nppdefs.h>
#endif

namespace vfp::bench {

// "a,b,c" -> {"a", "b", "c"} (the benchmarks' list options).
inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  std::string t;
  while (std::getline(ss, t, ',')) v.push_back(t);
  return v;
}

// False (with a message) where no GPU is usable.
inline bool require_gpu() {
  if (cuda::probe().usable) return true;
  std::fprintf(stderr, "no usable GPU: %s\n", cuda::probe().reason.c_str());
  return false;
}

// Time per call: median over `iters` samples, each a batch of `batch` back-to-back calls
// between two CUDA events (after 3 warm-up calls). Batching measures what a stream of
// frames sees; a single launch between events also counts the host's launch latency
// (~5-10 us), which dominates kernels of a few microseconds.
template <typename F>
double time_ms(int iters, cuda::Stream& s, F&& fn, int batch = 10) {
  cuda::Event a, b;
  for (int i = 0; i < 3; ++i) fn();
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    a.record(s.get());
    for (int k = 0; k < batch; ++k) fn();
    b.record(s.get());
    b.synchronize();
    t.push_back(cuda::Event::elapsed_ms(a, b) / batch);
  }
  return summarize(t).p50;
}

// Device memory bandwidth (read + write, GB/s) from a 512 MiB device-to-device copy, far
// larger than the 50 MB L2: the "memory floor" of a kernel is its bytes at this rate.
inline double measure_bandwidth_gbps(cuda::Stream& s) {
  const size_t big = size_t(512) << 20;
  cuda::DeviceBuffer a(big), b(big);
  const double ms = time_ms(5, s, [&] { cuda::memcpy_d2d_async(b.get(), a.get(), big, s.get()); });
  const double gbps = 2.0 * big / (ms * 1e6);
  std::printf("device bandwidth (512 MiB copy, read+write): %.0f GB/s\n", gbps);
  return gbps;
}

#if VFPIPE_HAVE_NPP
inline NppStreamContext npp_context(cudaStream_t s) {
  NppStreamContext c{};
  int dev = 0;
  cudaGetDevice(&dev);
  cudaDeviceProp p{};
  cudaGetDeviceProperties(&p, dev);
  c.hStream = s;
  c.nCudaDeviceId = dev;
  c.nMultiProcessorCount = p.multiProcessorCount;
  c.nMaxThreadsPerMultiProcessor = p.maxThreadsPerMultiProcessor;
  c.nMaxThreadsPerBlock = p.maxThreadsPerBlock;
  c.nSharedMemPerBlock = p.sharedMemPerBlock;
  c.nCudaDevAttrComputeCapabilityMajor = p.major;
  c.nCudaDevAttrComputeCapabilityMinor = p.minor;
  unsigned flags = 0;
  cudaStreamGetFlags(s, &flags);
  c.nStreamFlags = flags;
  return c;
}
#endif

}  // namespace vfp::bench
