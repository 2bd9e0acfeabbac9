// Queries of the GPUs this process can see, in every flavor (the host flavor
// sees none). Used by backend selection, braid-info and topology.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

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
}  // namespace braid
