// NCCL's device API on the GPU backend (nccl_device.h, 2.28): what user
// kernels built against NCCL's device headers read.
//
// Every registered window gets a device descriptor (ncclWindow_vidmem),
// which ncclCommWindowRegister returns as the ncclWindow_t: the windows of
// this rank's LSA team (the ranks of its node, core/comm.h lsaSize()) are
// mapped side by side in one reserved range of this GPU's address space,
// rank i's at lsaFlatBase + i * stride, so a kernel reaches any team
// member's window with address arithmetic (ncclGetLsaPointer). Mapping
// needs virtual-memory allocations (ncclMemAlloc, cuMem*/hipMem*): peers'
// are mapped by the descriptors their processes lend (platform/gpu.h);
// a window of other memory still works for collectives, and its
// descriptor has no flat view (lsaFlatBase null, logged at INFO).
//
// A device communicator (ncclDevCommCreate) is a resource window of its
// own (barriers and the user's resource buffers, core/dev_resources.h),
// zeroed, mapped the same way, and the table a kernel searches windows in
// (ncclFindWindow). GIN and multimem are refused.
//
// Compiled in the GPU flavors only; reached through GpuEngine.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "core/nccl_device_abi.h"
#include "platform/gpu.h"
#include "util/status.h"

namespace braid {

class Communicator;

class LsaSpace {
 public:
  LsaSpace(Communicator* comm, int device) : comm_(comm), device_(device) {}
  ~LsaSpace();
  LsaSpace(const LsaSpace&) = delete;
  LsaSpace& operator=(const LsaSpace&) = delete;

  // Collective: the device descriptor of window `buff` (`size` bytes),
  // whose library record is `host`; listed in the window table.
  Status windowCreate(void* buff, size_t size, void* host, ncclWindow_t* win);
  // The library record of descriptor `win`; false if it is none of ours.
  bool hostOf(ncclWindow_t win, void** host) const;
  // Waits for this GPU's work, then unmaps and frees descriptor `win`.
  void windowDestroy(ncclWindow_t win);

  // Collective: a device communicator meeting `reqs` (every rank passes
  // the same), its resource handles written where `reqs` asks.
  Status devCommCreate(const ncclDevCommRequirements& reqs, ncclDevComm* out);
  Status devCommDestroy(const ncclDevComm& devComm);

 private:
  struct Window {
    void* host = nullptr;
    const char* buff = nullptr;
    size_t size = 0;
    GpuExport exp;  // this rank's allocation, lent to the team's other processes
    GpuFlatRange flat;
    int tableSlot = -1;  // in the window table; -1: not listed
  };
  struct Resources {
    void* memory = nullptr;
    size_t mapped = 0;
  };
  // Maps window `buff` of every team member (collective) into w->flat and
  // describes it; leaves `why` set where it cannot (not an error).
  Status mapTeam(void* buff, size_t size, Window* w, ncclWindow_vidmem* desc, std::string* why);
  // A descriptor for window `buff`; `why` says why it has no flat view.
  Status create(void* buff, size_t size, void* host, bool listed, ncclWindow_t* win, ncclWindow_vidmem* desc,
                std::string* why);
  Status stream();
  Status upload(void* dst, const void* src, size_t bytes, const char* what);
  // Lists `win` in the window table (growing it by a block when full).
  Status list(const Window& w, ncclWindow_t win, int* slot);
  Status writeSlot(int slot, const ncclDevCommWindowTable::Entry& e);
  Status ensureTable();
  Status addTableBlock();

  Communicator* comm_;
  int device_;
  void* stream_ = nullptr;  // hipStream_t: non-blocking, for uploads
  std::map<ncclWindow_t, Window> windows_;
  std::map<ncclWindow_t, Resources> devComms_;   // by resource window
  std::vector<ncclDevCommWindowTable*> tables_;  // device blocks, chained
  std::vector<bool> slotUsed_;
};

}  // namespace braid
