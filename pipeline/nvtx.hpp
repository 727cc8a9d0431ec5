// NVTX ranges, so that Nsight Systems shows vfpipe's structure: host threads, CUDA streams,
// and a range per source read, stage launch, copy and sink write (with the frame number as
// payload). NVTX3 is header-only and ships with the CUDA toolkit; without it (CPU-only
// builds) these compile to nothing. With no tool attached a range costs a few ns.
#pragma once
#include <cstdint>

#if VFPIPE_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#include <nvtx3/nvToolsExtCudaRt.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

struct CUstream_st;

namespace vfp {

#if VFPIPE_HAVE_NVTX
class NvtxRange {
 public:
  NvtxRange(const char* name, int64_t frame) {
    nvtxEventAttributes_t a{};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = name;
    a.payloadType = NVTX_PAYLOAD_TYPE_INT64;
    a.payload.llValue = frame;
    nvtxRangePushEx(&a);
  }
  ~NvtxRange() { nvtxRangePop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};
inline void nvtx_name_thread(const char* name) { nvtxNameOsThreadA(static_cast<uint32_t>(syscall(SYS_gettid)), name); }
inline void nvtx_name_stream(CUstream_st* s, const char* name) { nvtxNameCudaStreamA(s, name); }
#else
class NvtxRange {
 public:
  NvtxRange(const char*, int64_t) {}
};
inline void nvtx_name_thread(const char*) {}
inline void nvtx_name_stream(CUstream_st*, const char*) {}
#endif

}  // namespace vfp
