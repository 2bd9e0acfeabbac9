// Marks functions that run both on the host and in GPU kernels, so code shared
// by the host engine and the device executor is written once.
#pragma once

#if defined(__HIPCC__)
#include <hip/hip_runtime.h>  // __host__ and __device__ (ROCm clang does not predefine them)
#endif
#if defined(__CUDACC__) || defined(__HIPCC__)
#define BRAID_HOST_DEVICE __host__ __device__
#define BRAID_DEVICE __device__
#else
#define BRAID_HOST_DEVICE
#define BRAID_DEVICE
#endif
#define BRAID_INLINE inline __attribute__((always_inline))
