// Marks functions compiled for both host and device, so the CPU reference and the CUDA
// kernel share one definition of the arithmetic (bit-exact by construction, and tested).
#pragma once
#if defined(__CUDACC__)
#define VFP_HD __host__ __device__ __forceinline__
#else
#define VFP_HD inline
#endif
