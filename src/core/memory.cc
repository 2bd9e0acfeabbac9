#include "core/memory.h"

#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <unordered_map>

#include "core/library.h"
#include "platform/gpu.h"
#include "util/log.h"

namespace braid {
namespace {
std::mutex gMutex;
// Every live allocation and whether it is on the GPU.
std::unordered_map<void*, bool>& allocations() {
  static auto* map = new std::unordered_map<void*, bool>();
  return *map;
}
}  // namespace

Status memAlloc(void** ptr, size_t bytes) {
  *ptr = nullptr;
  if (bytes == 0) return invalidArgument("argument 'size' is 0");
  Backend backend;
  BRAID_CHECK(selectBackend(&backend));
  void* p = nullptr;
  if (backend == Backend::Gpu) {
    BRAID_CHECK(gpuMalloc(&p, bytes));
  } else {
    size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    int err = posix_memalign(&p, page, bytes);
    if (err != 0) return Status(ncclSystemError, strCat("cannot allocate ", bytes, " bytes of host memory"));
  }
  {
    std::lock_guard<std::mutex> lock(gMutex);
    allocations()[p] = backend == Backend::Gpu;
  }
  BRAID_INFO(kLogAlloc, "ncclMemAlloc %zu bytes on %s at %p", bytes, backendName(backend), p);
  *ptr = p;
  return okStatus();
}

Status memFree(void* ptr) {
  bool onGpu;
  {
    std::lock_guard<std::mutex> lock(gMutex);
    auto it = allocations().find(ptr);
    if (it == allocations().end()) {
      return invalidArgument("pointer ", ptr, " was not allocated by ncclMemAlloc (or was freed already)");
    }
    onGpu = it->second;
    allocations().erase(it);
  }
  if (onGpu) return gpuFree(ptr);
  std::free(ptr);
  return okStatus();
}

}  // namespace braid
