// NCCL 2.28's device API structures (nccl_device/*.h), as Braid's library
// fills and reads them. A kernel built against NCCL's device headers reads
// these fields directly, so their layout is NCCL's to the byte; abi_test
// checks every size and offset against NCCL's headers where they are
// present (tests/unit/nccl_device_facts.inc).
//
// Braid supports the load/store-accessible (LSA) part: windows every rank
// of a node maps side by side, LSA barriers, resource buffers and the
// LL all-to-all. GPU-initiated networking (GIN) and multimem (NVLink
// multicast) are refused by ncclDevCommCreate.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nccl.h"

constexpr int kNcclGinMaxContexts = 4;  // NCCL_GIN_MAX_CONTEXTS

struct ncclTeam {
  int nRanks, rank, stride;
};

// What ncclWindow_t points at: device memory a kernel reads. Rank i of the
// LSA team has its window at lsaFlatBase + (i * stride4G << 32).
struct ncclWindow_vidmem {
  void* winHost;      // the library's own record of the window
  char* lsaFlatBase;  // where LSA rank 0's window starts in this GPU's address space
  int lsaRank;
  int worldRank;
  uint32_t stride4G;  // distance between two ranks' windows, in 4 GiB
  uint32_t mcOffset4K;
  uint32_t ginOffset4K;
  void* ginWins[kNcclGinMaxContexts];
};

struct ncclMultimemHandle {
  void* mcBasePtr;
};

typedef uint32_t ncclDevResourceHandle;  // offset in the resource window, in 128 bytes
constexpr size_t kNcclResourceUnit = 128;

struct ncclLsaBarrierHandle {
  ncclDevResourceHandle bufHandle;
  int nBarriers;
};
struct ncclGinBarrierHandle {
  uint32_t signal0;
  ncclDevResourceHandle bufHandle;
};
struct ncclLLA2AHandle {
  ncclDevResourceHandle bufHandle;
  uint32_t nSlots;
};

struct ncclDevResourceRequirements {
  ncclDevResourceRequirements* next;
  size_t bufferSize, bufferAlign;
  ncclDevResourceHandle* outBufferHandle;
  int ginSignalCount;
  int ginCounterCount;
  uint32_t* outGinSignalStart;
  uint32_t* outGinCounterStart;
};

struct ncclTeamRequirements {
  ncclTeamRequirements* next;
  ncclTeam team;
  bool multimem;
  ncclMultimemHandle* outMultimemHandle;
};

struct ncclDevCommRequirements {
  ncclDevResourceRequirements* resourceRequirementsList;
  ncclTeamRequirements* teamRequirementsList;
  bool lsaMultimem;
  int barrierCount;
  int lsaBarrierCount;
  int railGinBarrierCount;
  int lsaLLA2ABlockCount, lsaLLA2ASlotCount;
  bool ginForceEnable;
  int ginContextCount;
  int ginSignalCount;
  int ginCounterCount;
};

// Registered windows as a kernel finds them by address (ncclFindWindow):
// device memory, 32 entries a block, blocks chained.
struct ncclDevCommWindowTable {
  struct Entry {
    uintptr_t base, size;
    ncclWindow_t window;
  } entries[32];
  ncclDevCommWindowTable* next;
};

// What ncclDevCommCreate returns; the user passes it to kernels by value.
struct ncclDevComm {
  int rank, nRanks;
  uint32_t nRanks_rcp32;
  int lsaRank, lsaSize;
  uint32_t lsaSize_rcp32;
  ncclDevCommWindowTable* windowTable;
  ncclWindow_t resourceWindow;
  ncclWindow_vidmem resourceWindow_inlined;
  ncclMultimemHandle lsaMultimem;
  ncclLsaBarrierHandle lsaBarrier;
  ncclGinBarrierHandle railGinBarrier;
  uint8_t ginContextCount;
  uint8_t ginTypes[4];
  void* ginHandles[4];
  uint32_t ginSignalBase;
  int ginSignalCount;
  uint32_t ginCounterBase;
  int ginCounterCount;
  uint64_t* ginSignalShadows;
};

// The device API's host functions (nccl_device/core.h, lsa_barrier.h,
// ll_a2a.h, gin_barrier.h), defined in src/api/comm.cc.
extern "C" {
ncclResult_t ncclDevCommCreate(ncclComm_t comm, const ncclDevCommRequirements* reqs, ncclDevComm* outDevComm);
ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const ncclDevComm* devComm);
ncclTeam ncclTeamWorld(ncclComm_t comm);
ncclTeam ncclTeamLsa(ncclComm_t comm);
ncclTeam ncclTeamRail(ncclComm_t comm);
int ncclTeamRankToWorld(ncclComm_t comm, ncclTeam team, int rank);
int ncclTeamRankToLsa(ncclComm_t comm, ncclTeam team, int rank);
int ncclLLA2ACalcSlots(int maxElts, int maxEltSize);
ncclResult_t ncclLLA2ACreateRequirement(int nBlocks, int nSlots, ncclLLA2AHandle* outHandle,
                                        ncclDevResourceRequirements* outReq);
ncclResult_t ncclLsaBarrierCreateRequirement(ncclTeam team, int nBarriers, ncclLsaBarrierHandle* outHandle,
                                             ncclDevResourceRequirements* outReq);
ncclResult_t ncclGinBarrierCreateRequirement(ncclComm_t comm, ncclTeam team, int nBarriers,
                                             ncclGinBarrierHandle* outHandle,
                                             ncclDevResourceRequirements* outReq);
}

namespace braid {
// The reciprocal NCCL's kernels divide by (nccl::utility::idivFast32).
constexpr uint32_t ncclDivisorReciprocal(uint32_t x) {
  return UINT32_MAX / x + ((x & (x - 1)) == 0 ? 1u : 0u);
}
}  // namespace braid
