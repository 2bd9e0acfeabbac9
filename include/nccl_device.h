/*
 * Braid's nccl_device.h: NCCL 2.28's device API, for user kernels that reach
 * the other GPUs of their node by load and store (the LSA team).
 *
 * The structures are NCCL 2.28's, byte for byte (the library fills them and
 * a kernel built against NCCL's own headers reads them too). The host
 * functions are Braid's library's. The device functions below are Braid's
 * own implementation, for the cuda flavor (nvcc): teams, window and
 * resource-buffer pointers, ncclFindWindow, ncclSymPtr, the cooperative
 * groups (ncclCoop*), ncclLsaBarrierSession and ncclLLA2ASession (send,
 * bcast, recv). Not provided: GPU-initiated networking (GIN, ncclGin*,
 * world barriers) and multimem (NVLink multicast), which
 * ncclDevCommCreate refuses, and the LL all-to-all's recvUnrolled and
 * recvReduce. In the hip flavor only the structures and host functions
 * are here. See docs/gpu.md, "NCCL's device API".
 */
#ifndef BRAID_NCCL_DEVICE_H
#define BRAID_NCCL_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

#if defined(__CUDACC__) || defined(__HIPCC__)
#define BRAID_DEV_HOST_DEVICE __host__ __device__ inline
#else
#define BRAID_DEV_HOST_DEVICE inline
#endif
#if defined(__CUDACC__)
#define BRAID_DEV_DEVICE __device__ __forceinline__
#include <cuda/atomic>
#endif

#ifndef __cplusplus
#include <stdbool.h>
#endif

#define NCCL_GIN_MAX_CONTEXTS 4

typedef struct ncclTeam {
  int nRanks, rank, stride;
} ncclTeam_t;

typedef void* ncclGinWindow_t;

/* What ncclWindow_t points at, in device memory. Rank i of the LSA team has
   its window at lsaFlatBase + (i * stride4G << 32). */
struct ncclWindow_vidmem {
  void* winHost;
  char* lsaFlatBase;
  int lsaRank;
  int worldRank;
  uint32_t stride4G;
  uint32_t mcOffset4K;
  uint32_t ginOffset4K;
  ncclGinWindow_t ginWins[NCCL_GIN_MAX_CONTEXTS];
};

typedef struct ncclMultimemHandle {
  void* mcBasePtr;
} ncclMultimemHandle_t;

/* A resource buffer: its offset in the device communicator's resource
   window, in units of 128 bytes. */
typedef uint32_t ncclDevResourceHandle;
typedef ncclDevResourceHandle ncclDevResourceHandle_t;
typedef uint32_t ncclGinSignal_t;
typedef uint32_t ncclGinCounter_t;

typedef struct ncclLsaBarrierHandle {
  ncclDevResourceHandle_t bufHandle;
  int nBarriers;
} ncclLsaBarrierHandle_t;
typedef struct ncclGinBarrierHandle {
  ncclGinSignal_t signal0;
  ncclDevResourceHandle_t bufHandle;
} ncclGinBarrierHandle_t;
typedef struct ncclLLA2AHandle {
  ncclDevResourceHandle_t bufHandle;
  uint32_t nSlots;
} ncclLLA2AHandle_t;

typedef struct ncclDevResourceRequirements {
  struct ncclDevResourceRequirements* next;
  size_t bufferSize, bufferAlign;
  ncclDevResourceHandle_t* outBufferHandle; /* set by ncclDevCommCreate */
  int ginSignalCount;
  int ginCounterCount;
  ncclGinSignal_t* outGinSignalStart;
  ncclGinCounter_t* outGinCounterStart;
} ncclDevResourceRequirements_t;

typedef struct ncclTeamRequirements {
  struct ncclTeamRequirements* next;
  ncclTeam_t team;
  bool multimem;
  ncclMultimemHandle_t* outMultimemHandle;
} ncclTeamRequirements_t;

typedef struct ncclDevCommRequirements {
  ncclDevResourceRequirements_t* resourceRequirementsList;
  ncclTeamRequirements_t* teamRequirementsList;
  bool lsaMultimem;
  int barrierCount;
  int lsaBarrierCount;
  int railGinBarrierCount;
  int lsaLLA2ABlockCount, lsaLLA2ASlotCount;
  bool ginForceEnable;
  int ginContextCount;
  int ginSignalCount;
  int ginCounterCount;
} ncclDevCommRequirements_t;

#ifdef __cplusplus
/* Registered windows as a kernel finds them by address (ncclFindWindow):
   32 entries a block, blocks chained. */
struct ncclDevCommWindowTable {
  struct Entry {
    uintptr_t base, size;
    ncclWindow_t window;
  } entries[32];
  ncclDevCommWindowTable* next;
};
#else
struct ncclDevCommWindowTable;
#endif

/* What ncclDevCommCreate returns; kernels take it by value. */
typedef struct ncclDevComm {
  int rank, nRanks;
  uint32_t nRanks_rcp32;
  int lsaRank, lsaSize;
  uint32_t lsaSize_rcp32;
  struct ncclDevCommWindowTable* windowTable;
  ncclWindow_t resourceWindow;
  struct ncclWindow_vidmem resourceWindow_inlined;
  ncclMultimemHandle_t lsaMultimem;
  ncclLsaBarrierHandle_t lsaBarrier;
  ncclGinBarrierHandle_t railGinBarrier;
  uint8_t ginContextCount;
  uint8_t ginTypes[4];
  void* ginHandles[4];
  uint32_t ginSignalBase;
  int ginSignalCount;
  uint32_t ginCounterBase;
  int ginCounterCount;
  uint64_t* ginSignalShadows;
} ncclDevComm_t;

/* --- host functions (Braid's library) --- */
#ifdef __cplusplus
extern "C" {
#endif
ncclResult_t ncclDevCommCreate(ncclComm_t comm, const ncclDevCommRequirements_t* reqs,
                               ncclDevComm_t* outDevComm);
ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const ncclDevComm_t* devComm);
ncclTeam_t ncclTeamWorld(ncclComm_t comm);
ncclTeam_t ncclTeamLsa(ncclComm_t comm);
ncclTeam_t ncclTeamRail(ncclComm_t comm);
int ncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t team, int rank);
int ncclTeamRankToLsa(ncclComm_t comm, ncclTeam_t team, int rank);
int ncclLLA2ACalcSlots(int maxElts, int maxEltSize);
ncclResult_t ncclLLA2ACreateRequirement(int nBlocks, int nSlots, ncclLLA2AHandle_t* outHandle,
                                        ncclDevResourceRequirements_t* outReq);
ncclResult_t ncclLsaBarrierCreateRequirement(ncclTeam_t team, int nBarriers,
                                             ncclLsaBarrierHandle_t* outHandle,
                                             ncclDevResourceRequirements_t* outReq);
/* GIN: always ncclInvalidUsage in Braid. */
ncclResult_t ncclGinBarrierCreateRequirement(ncclComm_t comm, ncclTeam_t team, int nBarriers,
                                             ncclGinBarrierHandle_t* outHandle,
                                             ncclDevResourceRequirements_t* outReq);
#ifdef __cplusplus
}
#endif

#ifdef __cplusplus

/* --- teams: a team is every stride-th rank, nRanks of them --- */
struct ncclTeamTagWorld {};
struct ncclTeamTagLsa {};
struct ncclTeamTagRail {};

BRAID_DEV_HOST_DEVICE ncclTeam ncclTeamWorld(ncclDevComm const& comm) {
  return ncclTeam{comm.nRanks, comm.rank, 1};
}
BRAID_DEV_HOST_DEVICE ncclTeam ncclTeamLsa(ncclDevComm const& comm) {
  return ncclTeam{comm.lsaSize, comm.lsaRank, 1};
}
/* This rank's place among the LSA teams: one rank of each. */
BRAID_DEV_HOST_DEVICE ncclTeam ncclTeamRail(ncclDevComm const& comm) {
  return ncclTeam{comm.nRanks / comm.lsaSize, comm.rank / comm.lsaSize, comm.lsaSize};
}
/* Whether rank bRank of team b is in team a (both holding this rank). */
BRAID_DEV_HOST_DEVICE bool ncclTeamRankIsMember(ncclTeam a, ncclTeam b, int bRank) {
  const int distance = (bRank - b.rank) * b.stride;  // in world ranks, from this rank
  if (distance % a.stride != 0) return false;
  const int aRank = a.rank + distance / a.stride;
  return 0 <= aRank && aRank < a.nRanks;
}
/* Rank bRank of team b as a rank of team a (meaningful when a member). */
BRAID_DEV_HOST_DEVICE int ncclTeamRankToTeam(ncclTeam a, ncclTeam b, int bRank) {
  return a.rank + (bRank - b.rank) * b.stride / a.stride;
}
BRAID_DEV_HOST_DEVICE int ncclTeamRankToWorld(ncclDevComm const& comm, ncclTeam team, int rank) {
  return comm.rank + (rank - team.rank) * team.stride;
}
BRAID_DEV_HOST_DEVICE int ncclTeamRankToLsa(ncclDevComm const& comm, ncclTeam team, int rank) {
  return comm.lsaRank + (rank - team.rank) * team.stride;
}
/* The blocks of innerSize consecutive members: this rank's block, and the
   team of the blocks' members at this rank's position. */
BRAID_DEV_HOST_DEVICE ncclTeam ncclTeamInnerFactor(ncclTeam parent, int innerSize) {
  return ncclTeam{innerSize, parent.rank % innerSize, parent.stride};
}
BRAID_DEV_HOST_DEVICE ncclTeam ncclTeamOuterFactor(ncclTeam parent, int innerSize) {
  return ncclTeam{parent.nRanks / innerSize, parent.rank / innerSize, parent.stride * innerSize};
}
/* The index-th member of parent (in parent's order) that is not in subset,
   as a rank of parent; -1 if there are fewer. */
BRAID_DEV_HOST_DEVICE int ncclTeamRankInDifference(ncclTeam parent, ncclTeam subset, int index) {
  for (int p = 0; p < parent.nRanks; ++p) {
    if (ncclTeamRankIsMember(subset, parent, p)) continue;
    if (index-- == 0) return p;
  }
  return -1;
}

BRAID_DEV_HOST_DEVICE size_t ncclGetResourceBufferOffset(ncclDevResourceHandle_t h) {
  return size_t(h) * 128;
}

#if defined(__CUDACC__)

namespace braid_device {
// Where LSA rank `lsaRank`'s copy of a window starts.
BRAID_DEV_DEVICE char* lsaBase(const ncclWindow_vidmem& w, int lsaRank) {
  return w.lsaFlatBase + (uint64_t(uint32_t(lsaRank) * w.stride4G) << 32);
}
BRAID_DEV_DEVICE char* lsaBase(ncclWindow_t w, int lsaRank) {
  return reinterpret_cast<char*>(__ldg(reinterpret_cast<const unsigned long long*>(&w->lsaFlatBase))) +
         (uint64_t(uint32_t(lsaRank) * __ldg(&w->stride4G)) << 32);
}
BRAID_DEV_DEVICE cuda::memory_order releasePart(cuda::memory_order order) {
  return order == cuda::memory_order_acq_rel || order == cuda::memory_order_seq_cst
             ? cuda::memory_order_release
         : order == cuda::memory_order_release ? order
                                               : cuda::memory_order_relaxed;
}
BRAID_DEV_DEVICE cuda::memory_order acquirePart(cuda::memory_order order) {
  return order == cuda::memory_order_acq_rel || order == cuda::memory_order_seq_cst
             ? cuda::memory_order_acquire
         : order == cuda::memory_order_acquire ? order
                                               : cuda::memory_order_relaxed;
}
BRAID_DEV_DEVICE int lane() {
  return threadIdx.x % 32;
}
}  // namespace braid_device

/* --- windows --- */
BRAID_DEV_DEVICE void* ncclGetLocalPointer(ncclWindow_t w, size_t offset) {
  return braid_device::lsaBase(w, __ldg(&w->lsaRank)) + offset;
}
BRAID_DEV_DEVICE void* ncclGetLsaPointer(ncclWindow_t w, size_t offset, int peer) {
  return braid_device::lsaBase(w, peer) + offset;
}
/* World rank `peer`, which must be in this rank's LSA team. */
BRAID_DEV_DEVICE void* ncclGetPeerPointer(ncclWindow_t w, size_t offset, int peer) {
  return braid_device::lsaBase(w, __ldg(&w->lsaRank) + peer - __ldg(&w->worldRank)) + offset;
}
/* Rank `peer` of `team` (a team within the LSA team). */
BRAID_DEV_DEVICE void* ncclGetPeerPointer(ncclWindow_t w, size_t offset, ncclTeam team, int peer) {
  return braid_device::lsaBase(w, __ldg(&w->lsaRank) + (peer - team.rank) * team.stride) + offset;
}

/* --- resource buffers, in the device communicator's resource window --- */
BRAID_DEV_DEVICE void* ncclGetResourceBufferLsaPointer(ncclDevComm const& comm, ncclDevResourceHandle h,
                                                       int peer) {
  return braid_device::lsaBase(comm.resourceWindow_inlined, peer) + ncclGetResourceBufferOffset(h);
}
BRAID_DEV_DEVICE void* ncclGetResourceBufferLocalPointer(ncclDevComm const& comm, ncclDevResourceHandle h) {
  return ncclGetResourceBufferLsaPointer(comm, h, comm.lsaRank);
}
BRAID_DEV_DEVICE void* ncclGetResourceBufferPeerPointer(ncclDevComm const& comm, ncclDevResourceHandle h,
                                                        ncclTeam team, int peer) {
  return ncclGetResourceBufferLsaPointer(comm, h, comm.lsaRank + (peer - team.rank) * team.stride);
}

/* --- cooperative groups: who works together and how they synchronize --- */
/* An aligned power-of-two group of lanes of one warp. */
template <int nThreadsPow2>
struct ncclCoopTile {
  static_assert(nThreadsPow2 > 0 && nThreadsPow2 <= 32 && (nThreadsPow2 & (nThreadsPow2 - 1)) == 0,
                "a tile is a power of two of at most 32 lanes");
  BRAID_DEV_DEVICE int thread_rank() const { return braid_device::lane() % nThreadsPow2; }
  BRAID_DEV_DEVICE constexpr int size() const { return nThreadsPow2; }
  BRAID_DEV_DEVICE constexpr int num_threads() const { return nThreadsPow2; }
  BRAID_DEV_DEVICE uint32_t laneMask() const {
    const uint32_t ones = nThreadsPow2 == 32 ? 0xffffffffu : (1u << nThreadsPow2) - 1;
    return ones << (braid_device::lane() & ~(nThreadsPow2 - 1));
  }
  BRAID_DEV_DEVICE void sync() {
    if (nThreadsPow2 > 1) __syncwarp(laneMask());
  }
};
typedef ncclCoopTile<1> ncclCoopThread;
typedef ncclCoopTile<32> ncclCoopWarp;

/* Any set of lanes of one warp. */
struct ncclCoopLanes {
  uint32_t lmask;
  BRAID_DEV_DEVICE constexpr ncclCoopLanes(uint32_t lmask = 0xffffffffu) : lmask(lmask) {}
  BRAID_DEV_DEVICE int thread_rank() const { return __popc(lmask & ((1u << braid_device::lane()) - 1)); }
  BRAID_DEV_DEVICE int size() const { return __popc(lmask); }
  BRAID_DEV_DEVICE int num_threads() const { return __popc(lmask); }
  BRAID_DEV_DEVICE void sync() { __syncwarp(lmask); }
};

/* Warps warp0 .. warp0 + nWarps - 1 of the block, meeting at named barrier id. */
struct ncclCoopWarpSpan {
  uint32_t warp0 : 8, nWarps : 8, id : 8;
  BRAID_DEV_DEVICE constexpr ncclCoopWarpSpan(int warp0, int nWarps, int id)
      : warp0(uint32_t(warp0)), nWarps(uint32_t(nWarps)), id(uint32_t(id)) {}
  BRAID_DEV_DEVICE int thread_rank() const { return int(threadIdx.x) - 32 * int(warp0); }
  BRAID_DEV_DEVICE int size() const { return 32 * int(nWarps); }
  BRAID_DEV_DEVICE int num_threads() const { return 32 * int(nWarps); }
  BRAID_DEV_DEVICE void sync() {
    asm volatile("bar.sync %0, %1;" ::"r"(uint32_t(id)), "r"(32 * uint32_t(nWarps)) : "memory");
  }
};

/* The whole block (one-dimensional). */
struct ncclCoopCta {
  BRAID_DEV_DEVICE int thread_rank() const { return int(threadIdx.x); }
  BRAID_DEV_DEVICE int size() const { return int(blockDim.x); }
  BRAID_DEV_DEVICE int num_threads() const { return int(blockDim.x); }
  BRAID_DEV_DEVICE void sync() { __syncthreads(); }
};

template <int n>
BRAID_DEV_DEVICE uint32_t ncclCoopGetLaneMask(ncclCoopTile<n> coop) {
  return coop.laneMask();
}
BRAID_DEV_DEVICE uint32_t ncclCoopGetLaneMask(ncclCoopLanes coop) {
  return coop.lmask;
}
BRAID_DEV_DEVICE uint32_t ncclCoopGetLaneMask(ncclCoopWarpSpan) {
  return 0xffffffffu;
}
BRAID_DEV_DEVICE uint32_t ncclCoopGetLaneMask(ncclCoopCta) {
  return 0xffffffffu;
}

template <int n>
BRAID_DEV_DEVICE constexpr bool ncclCoopIsThread(ncclCoopTile<n>) {
  return n == 1;
}
BRAID_DEV_DEVICE constexpr bool ncclCoopIsThread(ncclCoopLanes) {
  return false;
}
BRAID_DEV_DEVICE constexpr bool ncclCoopIsThread(ncclCoopWarpSpan) {
  return false;
}
BRAID_DEV_DEVICE constexpr bool ncclCoopIsThread(ncclCoopCta) {
  return false;
}
template <int n>
BRAID_DEV_DEVICE constexpr bool ncclCoopWithinWarp(ncclCoopTile<n>) {
  return true;
}
BRAID_DEV_DEVICE constexpr bool ncclCoopWithinWarp(ncclCoopLanes) {
  return true;
}
BRAID_DEV_DEVICE constexpr bool ncclCoopWithinWarp(ncclCoopWarpSpan) {
  return false;
}
BRAID_DEV_DEVICE constexpr bool ncclCoopWithinWarp(ncclCoopCta) {
  return false;
}

/* The lanes running this code now, and the part of a group within this warp. */
BRAID_DEV_DEVICE ncclCoopLanes ncclCoopCoalesced() {
  return ncclCoopLanes(__activemask());
}
template <typename Coop>
BRAID_DEV_DEVICE ncclCoopWarp ncclCoopCoalesced(Coop) {
  return ncclCoopWarp();
}
BRAID_DEV_DEVICE ncclCoopLanes ncclCoopCoalesced(ncclCoopLanes coop) {
  return coop;
}
template <int n>
BRAID_DEV_DEVICE ncclCoopTile<n> ncclCoopCoalesced(ncclCoopTile<n> coop) {
  return coop;
}

/* `value` of the group's thread `root`, for every thread of a group within a warp. */
namespace braid_device {
template <typename T>
BRAID_DEV_DEVICE T shuffle(uint32_t mask, T value, int srcLane) {
  static_assert(sizeof(T) % 4 == 0, "ncclCoopBcast moves whole 32-bit words");
  union {
    T v;
    uint32_t w[sizeof(T) / 4];
  } u;
  u.v = value;
  for (unsigned i = 0; i < sizeof(T) / 4; ++i) u.w[i] = __shfl_sync(mask, u.w[i], srcLane);
  return u.v;
}
}  // namespace braid_device
template <int n, typename T>
BRAID_DEV_DEVICE T ncclCoopBcast(ncclCoopTile<n> coop, T value, int root, bool entrySync = true) {
  (void)entrySync;  // a shuffle synchronizes the lanes
  return braid_device::shuffle(coop.laneMask(), value, (braid_device::lane() & ~(n - 1)) + root);
}
template <typename T>
BRAID_DEV_DEVICE T ncclCoopBcast(ncclCoopLanes coop, T value, int root, bool entrySync = true) {
  (void)entrySync;
  uint32_t m = coop.lmask;
  for (int i = 0; i < root; ++i) m &= m - 1;  // drop the lanes ranked below root
  return braid_device::shuffle(coop.lmask, value, __ffs(m) - 1);
}

/* --- finding a window from a pointer into it --- */
template <typename Coop>
BRAID_DEV_DEVICE ncclWindow_t ncclFindWindow(Coop, ncclDevComm const& comm, void const* ptr) {
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  for (const ncclDevCommWindowTable* t = comm.windowTable; t != nullptr; t = t->next) {
    for (int i = 0; i < 32; ++i) {
      const ncclDevCommWindowTable::Entry& e = t->entries[i];
      if (e.window != nullptr && e.size != 0 && p - e.base < e.size) return e.window;
    }
  }
  return nullptr;
}

/* --- a symmetric pointer: a window and an offset into every rank's copy --- */
template <typename T>
struct ncclSymPtr {
  using ElementType = T;
  ncclWindow_t window;
  size_t offset;  // in bytes

  BRAID_DEV_HOST_DEVICE constexpr ncclSymPtr(ncclWindow_t window = nullptr, size_t offset = 0)
      : window(window), offset(offset) {}
  template <typename U>
  BRAID_DEV_HOST_DEVICE operator ncclSymPtr<U>() const {
    return ncclSymPtr<U>(window, offset);
  }
  template <typename Int>
  BRAID_DEV_HOST_DEVICE ncclSymPtr& operator+=(Int d) {
    offset += ptrdiff_t(d) * ptrdiff_t(sizeof(T));
    return *this;
  }
  template <typename Int>
  BRAID_DEV_HOST_DEVICE ncclSymPtr& operator-=(Int d) {
    offset -= ptrdiff_t(d) * ptrdiff_t(sizeof(T));
    return *this;
  }
  BRAID_DEV_DEVICE T* localPtr() const { return static_cast<T*>(ncclGetLocalPointer(window, offset)); }
  BRAID_DEV_DEVICE T* lsaPtr(int peer) const {
    return static_cast<T*>(ncclGetLsaPointer(window, offset, peer));
  }
  BRAID_DEV_DEVICE T* peerPtr(int peer) const {
    return static_cast<T*>(ncclGetPeerPointer(window, offset, peer));
  }
  BRAID_DEV_DEVICE T* peerPtr(ncclTeam team, int peer) const {
    return static_cast<T*>(ncclGetPeerPointer(window, offset, team, peer));
  }
};
template <typename T, typename Int>
BRAID_DEV_HOST_DEVICE ncclSymPtr<T> operator+(ncclSymPtr<T> p, Int d) {
  return p += d;
}
template <typename T, typename Int>
BRAID_DEV_HOST_DEVICE ncclSymPtr<T> operator-(ncclSymPtr<T> p, Int d) {
  return p -= d;
}
template <typename T>
BRAID_DEV_HOST_DEVICE ptrdiff_t operator-(ncclSymPtr<T> a, ncclSymPtr<T> b) {
  return (ptrdiff_t(a.offset) - ptrdiff_t(b.offset)) / ptrdiff_t(sizeof(T));
}
template <typename T>
BRAID_DEV_HOST_DEVICE bool operator==(ncclSymPtr<T> a, ncclSymPtr<T> b) {
  return a.window == b.window && a.offset == b.offset;
}
template <typename T>
BRAID_DEV_HOST_DEVICE bool operator!=(ncclSymPtr<T> a, ncclSymPtr<T> b) {
  return !(a == b);
}
BRAID_DEV_DEVICE ncclSymPtr<char> ncclGetResourceBuffer(ncclDevComm const& comm, ncclDevResourceHandle h) {
  return ncclSymPtr<char>(comm.resourceWindow, ncclGetResourceBufferOffset(h));
}

/* --- LSA barriers ---
   A barrier's memory (ncclLsaBarrierCreateRequirement sizes it): per
   barrier an epoch word for multimem (unused here) and one for unicast,
   a multimem inbox (unused), then per barrier one inbox per team rank.
   Arriving writes epoch + 1 into this rank's inbox at every peer; waiting
   reads every peer's inbox here until it reaches epoch + 1. The epoch
   persists across kernels in the barrier's epoch word. */
template <typename Coop>
struct ncclLsaBarrierSession {
  BRAID_DEV_DEVICE ncclLsaBarrierSession(Coop coop, ncclDevComm const& comm, ncclTeam team,
                                         ncclLsaBarrierHandle handle, uint32_t index, bool multimem = false,
                                         ncclMultimemHandle mmHandle = {})
      : coop_(coop), comm_(comm), team_(team), handle_(handle), index_(int(index)) {
    (void)mmHandle;
    if (multimem) __trap();  // ncclDevCommCreate refuses multimem: no such handle exists
    epoch_ = epochWord()[0];
  }
  BRAID_DEV_DEVICE ncclLsaBarrierSession(Coop coop, ncclDevComm const& comm, ncclTeamTagLsa, uint32_t index,
                                         bool multimem = false)
      : ncclLsaBarrierSession(coop, comm, ncclTeamLsa(comm), comm.lsaBarrier, index, multimem) {}
  ncclLsaBarrierSession(ncclLsaBarrierSession const&) = delete;
  BRAID_DEV_DEVICE ~ncclLsaBarrierSession() {
    coop_.sync();
    if (coop_.thread_rank() == 0) epochWord()[0] = epoch_;
    coop_.sync();
  }

  BRAID_DEV_DEVICE void arrive(Coop, cuda::memory_order order) {
    coop_.sync();
    for (int i = coop_.thread_rank(); i < team_.nRanks - 1; i += coop_.size()) {
      const int peer = i < team_.rank ? i : i + 1;
      cuda::atomic_ref<uint32_t, cuda::thread_scope_system> box(*inbox(peer, team_.rank));
      box.store(epoch_ + 1, braid_device::releasePart(order));
    }
  }
  BRAID_DEV_DEVICE void wait(Coop, cuda::memory_order order) {
    for (int i = coop_.thread_rank(); i < team_.nRanks - 1; i += coop_.size()) {
      const int peer = i < team_.rank ? i : i + 1;
      cuda::atomic_ref<uint32_t, cuda::thread_scope_system> box(*inbox(team_.rank, peer));
      while (int32_t(box.load(braid_device::acquirePart(order)) - (epoch_ + 1)) < 0) {
      }
    }
    ++epoch_;
    coop_.sync();
  }
  BRAID_DEV_DEVICE void sync(Coop coop, cuda::memory_order order) {
    arrive(coop, order);
    wait(coop, order);
  }

 private:
  BRAID_DEV_DEVICE uint32_t* words(int owner) const {
    return static_cast<uint32_t*>(ncclGetResourceBufferPeerPointer(comm_, handle_.bufHandle, team_, owner));
  }
  BRAID_DEV_DEVICE uint32_t* epochWord() const { return words(team_.rank) + handle_.nBarriers + index_; }
  // Rank `owner`'s inbox for what rank `from` posts.
  BRAID_DEV_DEVICE uint32_t* inbox(int owner, int from) const {
    return words(owner) + 3 * handle_.nBarriers + index_ * team_.nRanks + from;
  }

  Coop coop_;
  ncclDevComm const& comm_;
  ncclTeam team_;
  ncclLsaBarrierHandle handle_;
  int index_;
  uint32_t epoch_;
};

/* --- the LL all-to-all ---
   Per block a header line and two halves of nSlots 16-byte slots, used by
   alternate epochs. A slot carries 8 bytes of data and the epoch twice
   ({lo, epoch, hi, epoch}, one 16-byte store), so a reader knows it whole
   and current. An element of more than 8 bytes takes a slot per 8 bytes,
   maxElts apart. Every rank must send to and receive from every peer in
   an epoch before ending it (endEpoch), which keeps the ranks within one
   epoch of each other. Epochs are 32-bit and count on across kernels,
   from 1; none is ever 0, the value of a cleared slot. At the wrap a slot
   could still hold the epoch of 2^32 epochs ago and pass for current, so
   the last two epochs before it each clear their half of the rank's own
   inbox once every peer has written it and it has been read (no peer
   writes that half again before this rank's next epoch, whose sends come
   after the clear), and the count goes on at 2, keeping the halves'
   alternation. */
template <typename Coop>
struct ncclLLA2ASession {
  BRAID_DEV_DEVICE ncclLLA2ASession(Coop coop, ncclDevComm const& comm, ncclTeam team, ncclLLA2AHandle handle,
                                    uint32_t block, int maxElts, bool multimem = false,
                                    ncclMultimemHandle mmHandle = {})
      : coop_(coop), comm_(comm), team_(team), handle_(handle), block_(int(block)), pitch_(maxElts) {
    (void)mmHandle;
    if (multimem) __trap();  // ncclDevCommCreate refuses multimem
    epoch_ = lines(team_.rank)[0].x + 1;
  }
  ncclLLA2ASession(ncclLLA2ASession const&) = delete;
  BRAID_DEV_DEVICE ~ncclLLA2ASession() {
    coop_.sync();
    if (coop_.thread_rank() == 0) lines(team_.rank)[0].x = epoch_ - 1;
    coop_.sync();
  }

  template <typename T>
  BRAID_DEV_DEVICE void send(int peer, int slot, T data) {
    Words<T> w;
    w.value = data;
    uint4* dst = slots(peer) + slot;
    for (int c = 0; c < Words<T>::kChunks; ++c) {
      asm volatile("st.volatile.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(dst + c * pitch_), "r"(w.word[2 * c]),
                   "r"(epoch_), "r"(w.word[2 * c + 1]), "r"(epoch_)
                   : "memory");
    }
  }
  template <typename T>
  BRAID_DEV_DEVICE void bcast(int slot, T data) {
    for (int peer = 0; peer < team_.nRanks; ++peer) send(peer, slot, data);
  }
  template <typename T>
  BRAID_DEV_DEVICE T recv(int slot) {
    Words<T> w;
    const uint4* src = slots(team_.rank) + slot;
    for (int c = 0; c < Words<T>::kChunks; ++c) {
      uint4 v;
      do {
        asm volatile("ld.volatile.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "l"(src + c * pitch_)
                     : "memory");
      } while (v.y != epoch_ || v.w != epoch_);
      w.word[2 * c] = v.x;
      w.word[2 * c + 1] = v.z;
    }
    return w.value;
  }
  BRAID_DEV_DEVICE void endEpoch(Coop) {
    coop_.sync();
    if (epoch_ >= kLastEpoch - 1) {
      uint4* mine = slots(team_.rank);
      for (int i = coop_.thread_rank(); i < int(handle_.nSlots); i += coop_.size())
        asm volatile("st.volatile.v4.u32 [%0], {%1, %1, %1, %1};" ::"l"(mine + i), "r"(0u) : "memory");
      __threadfence_system();  // cleared before this rank's next sends, which let peers write here again
      coop_.sync();
    }
    epoch_ = epoch_ == kLastEpoch ? 2u : epoch_ + 1;
  }

 private:
  template <typename T>
  union Words {
    static constexpr int kChunks = int((sizeof(T) + 7) / 8);
    T value;
    uint32_t word[2 * kChunks];
    BRAID_DEV_DEVICE Words() : word{} {}
  };
  BRAID_DEV_DEVICE uint4* lines(int rank) const {
    return static_cast<uint4*>(ncclGetResourceBufferPeerPointer(comm_, handle_.bufHandle, team_, rank)) +
           size_t(block_) * (1 + 2 * size_t(handle_.nSlots));
  }
  BRAID_DEV_DEVICE uint4* slots(int rank) const { return lines(rank) + 1 + (epoch_ & 1) * handle_.nSlots; }

  static constexpr uint32_t kLastEpoch = 0xffffffffu;

  Coop coop_;
  ncclDevComm const& comm_;
  ncclTeam team_;
  ncclLLA2AHandle handle_;
  int block_;
  int pitch_;
  uint32_t epoch_;
};

#endif /* __CUDACC__ */
#endif /* __cplusplus */
#endif /* BRAID_NCCL_DEVICE_H */
