// Every kernel's start and end on the GPU, from CUPTI's activity records, for a process
// that several threads drive with CUDA graphs (where `ncu` stops inside its own injection
// library: docs/perf.md, session 19). Loaded by the CUDA driver at initialisation:
//     g++ -O2 -shared -fPIC -o libkernel_trace.so kernel_trace.cpp -lcupti
//         (with -I and -L for CUDA's include and lib64 folders)
//     KERNEL_TRACE_OUT=trace.csv CUDA_INJECTION64_PATH=$PWD/libkernel_trace.so vfpipe ...
//     python3 kernel_trace.py trace.csv
// One line per kernel: start ns, end ns, stream, thread blocks, threads a block,
// registers a thread, the launch's correlation id (a graph's kernels share their
// cudaGraphLaunch's), shared memory a block (static + dynamic bytes), mangled name.
// KERNEL_TRACE_COPIES=1 adds a line per copy: "copy", start ns, end ns, stream, bytes, copy
// kind (CUpti_ActivityMemcpyKind: 1 host to device, 2 device to host), correlation id.
// KERNEL_TRACE_API=1 adds a line per CUDA runtime call: "api", start ns, end ns, thread
// id, correlation id, the call's name (which calls block, and for how long, with many
// threads driving one device).
#include <cupti.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace {

FILE* g_out = nullptr;
std::mutex g_mu;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 8u << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::lock_guard<std::mutex> lock(g_mu);
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
      const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(record);
      const char* name = nullptr;
      if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, a->cbid, &name) != CUPTI_SUCCESS || !name) name = "?";
      std::fprintf(g_out, "api,%llu,%llu,%u,%u,%s\n", static_cast<unsigned long long>(a->start),
                   static_cast<unsigned long long>(a->end), a->threadId, a->correlationId, name);
      continue;
    }
    if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      std::fprintf(g_out, "copy,%llu,%llu,%u,%llu,%u,%u\n", static_cast<unsigned long long>(m->start),
                   static_cast<unsigned long long>(m->end), m->streamId, static_cast<unsigned long long>(m->bytes),
                   static_cast<unsigned>(m->copyKind), m->correlationId);
      continue;
    }
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    std::fprintf(g_out, "%llu,%llu,%u,%d,%d,%u,%u,%d,%s\n", static_cast<unsigned long long>(k->start),
                 static_cast<unsigned long long>(k->end), k->streamId, k->gridX * k->gridY * k->gridZ,
                 k->blockX * k->blockY * k->blockZ, static_cast<unsigned>(k->registersPerThread), k->correlationId,
                 static_cast<int>(k->staticSharedMemory + k->dynamicSharedMemory), k->name ? k->name : "?");
  }
  std::free(buffer);
}

void finish() {
  cuptiActivityFlushAll(1);
  if (g_out) std::fclose(g_out);
}

}  // namespace

extern "C" int InitializeInjection(void) {
  const char* path = std::getenv("KERNEL_TRACE_OUT");
  g_out = std::fopen(path ? path : "kernel-trace.csv", "w");
  if (!g_out) return 0;
  cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  if (const char* copies = std::getenv("KERNEL_TRACE_COPIES"); copies && copies[0] == '1')
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
  if (const char* api = std::getenv("KERNEL_TRACE_API"); api && api[0] == '1')
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME);
  std::atexit(finish);
  return 1;
}
