// Marks the MMP codec's functions that the GPU encoder (cuda/mmp_search.cu) compiles too,
// so that both sides run one definition.
#pragma once

#if defined(__CUDACC__)
#define VFP_MMP_HD __host__ __device__
#else
#define VFP_MMP_HD
#endif
