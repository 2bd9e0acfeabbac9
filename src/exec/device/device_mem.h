// The few memory operations the device primitives need, per vendor: loads
// of memory another GPU writes (past the non-coherent L1), LL lines, the
// counters' acquire/release, and a clock for bounded waits. Device code only.
#pragma once

#include <cstdint>

#include "platform/gpu_runtime.h"

namespace braid::device {

#if defined(BRAID_GPU_CUDA)

__device__ __forceinline__ uint4 loadFresh(const uint4* p) { return __ldcg(p); }
__device__ __forceinline__ uint64_t loadAcquire(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void storeRelaxed(uint64_t* p, uint64_t v) {
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
// Orders this thread's earlier accesses (and, after a barrier, the block's)
// before its later stores, at system scope: lighter than
// __threadfence_system's sequentially consistent fence.
__device__ __forceinline__ void fenceRelease() {
  asm volatile("fence.acq_rel.sys;" ::: "memory");
}
// One 16-byte LL line {data0, flag, data1, flag}.
__device__ __forceinline__ void storeLine(void* p, uint64_t data, uint32_t flag) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(static_cast<uint32_t>(data)),
               "r"(flag), "r"(static_cast<uint32_t>(data >> 32)), "r"(flag)
               : "memory");
}
__device__ __forceinline__ uint4 loadLine(const void* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}
// One lane's 16 bytes of an LL128 line. A warp's 8 consecutive lanes cover
// a 128-byte line with one instruction; NVLink on sm_90 delivers it whole.
__device__ __forceinline__ void storeLL128(void* p, uint64_t a, uint64_t b) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1,%2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}
__device__ __forceinline__ void loadLL128(const void* p, uint64_t* a, uint64_t* b) {
  asm volatile("ld.volatile.global.v2.u64 {%0,%1}, [%2];" : "=l"(*a), "=l"(*b) : "l"(p) : "memory");
}
__device__ __forceinline__ uint64_t nanoseconds() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

#elif defined(BRAID_GPU_HIP)

// AMD: glc (device-coherent) loads through atomics; 8-byte halves, each
// carrying its own flag in LL lines, so 8-byte atomicity suffices.
__device__ __forceinline__ uint4 loadFresh(const uint4* p) {
  const uint64_t* q = reinterpret_cast<const uint64_t*>(p);
  uint64_t a = __atomic_load_n(q, __ATOMIC_RELAXED), b = __atomic_load_n(q + 1, __ATOMIC_RELAXED);
  return make_uint4(static_cast<uint32_t>(a), static_cast<uint32_t>(a >> 32), static_cast<uint32_t>(b),
                    static_cast<uint32_t>(b >> 32));
}
__device__ __forceinline__ uint64_t loadAcquire(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
__device__ __forceinline__ void storeRelaxed(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
__device__ __forceinline__ void fenceRelease() {
  __threadfence_system();
}
__device__ __forceinline__ void storeLine(void* p, uint64_t data, uint32_t flag) {
  uint64_t* q = static_cast<uint64_t*>(p);
  __atomic_store_n(q, (data & 0xffffffffull) | (static_cast<uint64_t>(flag) << 32), __ATOMIC_RELAXED);
  __atomic_store_n(q + 1, (data >> 32) | (static_cast<uint64_t>(flag) << 32), __ATOMIC_RELAXED);
}
__device__ __forceinline__ uint4 loadLine(const void* p) { return loadFresh(static_cast<const uint4*>(p)); }
// s_memrealtime ticks at 100 MHz on CDNA2/3 (not verified on hardware here).
__device__ __forceinline__ uint64_t nanoseconds() {
#if defined(__HIP_DEVICE_COMPILE__)
  return __builtin_amdgcn_s_memrealtime() * 10;
#else
  return 0;
#endif
}

#endif

}  // namespace braid::device
