// Shared by the GPU tests: skip (never fail) where no GPU is usable; on the GPU machine
// the device script fails the run if any GPU test skipped.
#pragma once
#include <gtest/gtest.h>

#if VFPIPE_HAVE_CUDA
#include "cuda/runtime.hpp"

#define REQUIRE_GPU()                                                                      \
  do {                                                                                     \
    if (!::vfp::cuda::probe().usable) GTEST_SKIP() << "no usable GPU: " << ::vfp::cuda::probe().reason; \
  } while (0)
#endif
