// Queries of the GPUs this process can see, in every flavor (the host flavor
// sees none). Used by backend selection, braid-info and topology.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "platform/fd_lending.h"
#include "util/status.h"

namespace braid {

struct GpuInfo {
  int index = -1;
  std::string name;
  std::string busId;  // "0000:19:00.0"
  std::string arch;   // "sm_90", "gfx90a"
  size_t memoryBytes = 0;
};

// "cuda", "hip" or "none".
const char* gpuFlavorName();
// Number of visible GPUs; 0 (and ok) when the runtime finds none or no driver.
Status gpuDeviceCount(int* count);
Status gpuDeviceInfo(int index, GpuInfo* info);
// Whether GPU `dev` can map GPU `peer`'s memory (PCIe or fabric peer
// access); false in the host flavor. The answer may differ by direction.
Status gpuCanAccessPeer(int dev, int peer, bool* can);
// The runtime's and driver's versions as text ("" in the host flavor).
std::string gpuRuntimeVersion();

}  // namespace braid

namespace braid {
// Device memory on the current GPU (cuda/hip flavors; an error in the host flavor).
Status gpuMalloc(void** ptr, size_t bytes);
Status gpuFree(void* ptr);
// The GPU whose device memory holds `ptr`, or -1 for any other memory (host,
// pinned host, unknown pointers; always -1 in the host flavor).
Status gpuPointerDevice(const void* ptr, int* device);
// The device allocation holding `ptr` (the runtime's allocator or the
// driver's): its first address and size. An error for other memory, and
// in the host flavor.
Status gpuAllocationRange(const void* ptr, void** base, size_t* bytes);

// --- platform/gpu_vmm.cc ---
// Device memory of the current GPU that other processes can map: a virtual-
// memory allocation with a POSIX-descriptor handle, mapped read-write for
// every GPU of this process that can reach it. `*mapped` is `bytes` rounded
// up to the allocation granularity; gpuFreeShareable takes it back.
Status gpuMallocShareable(size_t bytes, void** ptr, size_t* mapped);
Status gpuFreeShareable(void* ptr, size_t mapped);

// How another process of this host maps one GPU allocation: the runtime's
// IPC handle where the runtime made it, else (a virtual-memory allocation)
// a descriptor of it lent by this process (platform/fd_lending.h). Plain
// bytes: it travels in all-gathers and shared tables, and its bytes tell
// one export from another (a new allocation at a freed one's address).
struct GpuExport {
  enum Kind : uint32_t { kNone = 0, kIpc = 1, kDescriptor = 2 };
  uint32_t kind = kNone;
  uint32_t reserved = 0;
  uint64_t bytes = 0;          // the allocation's size
  LentFd lent;                 // kDescriptor
  unsigned char ipc[64] = {};  // kIpc
};
// Exports the allocation that starts at `base` and spans `bytes`. Each
// success is paired with gpuUnexport; exports of one allocation are one
// (the same bytes, so importers map it once) until the last is undone,
// which stops lending the descriptor.
Status gpuExport(void* base, size_t bytes, GpuExport* out);
void gpuUnexport(const GpuExport& e);
// How long an importer waits for a peer process to lend it a descriptor
// (platform/fd_lending.h); a live peer answers at once, a dead one refuses
// at once.
constexpr int kGpuImportTimeoutMs = 5000;
// Maps another process's export on the current GPU; a descriptor's owner
// must answer within `timeoutMs`. gpuUnimport unmaps it.
Status gpuImport(const GpuExport& e, int timeoutMs, char** ptr);
void gpuUnimport(const GpuExport& e, char* ptr);

// Several virtual-memory allocations mapped side by side, each at a chosen
// offset of one reserved range of the current GPU's address space (NCCL's
// flat view of an LSA team's windows). A part is an allocation of this
// process (`local`, its first address) or another process's export.
struct GpuFlatPart {
  const void* local = nullptr;
  GpuExport exp;      // kDescriptor, where local is null
  size_t bytes = 0;   // the allocation's size
  size_t offset = 0;  // where it goes in the range (a multiple of the granularity)
};
struct GpuFlatRange {
  char* base = nullptr;
  size_t bytes = 0;
  std::vector<std::pair<size_t, size_t>> mapped;  // offset and size of each part mapped
};
// The current GPU's virtual-memory granularity (mappings start and end on it).
Status gpuVmmGranularity(size_t* granularity);
// Reserves `bytes` (a multiple of the granularity) and maps every part;
// all or nothing. Owners of descriptors must answer within `timeoutMs`.
Status gpuFlatMap(const std::vector<GpuFlatPart>& parts, size_t bytes, int timeoutMs, GpuFlatRange* out);
void gpuFlatUnmap(GpuFlatRange* range);
}  // namespace braid
