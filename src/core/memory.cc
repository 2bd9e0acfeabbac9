#include "core/memory.h"

#include <unistd.h>

#include <atomic>
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

namespace {
const char* registerName(BufferRegistry::Kind k) {
  return k == BufferRegistry::Kind::Window ? "ncclCommWindowRegister" : "ncclCommRegister";
}
}  // namespace

Status BufferRegistry::add(void* buff, size_t size, void** handle, Kind kind) {
  *handle = nullptr;
  if (gpu_ >= 0) {
    int device = -1;
    BRAID_CHECK(gpuPointerDevice(buff, &device));
    if (device < 0) {
      return invalidArgument("argument 'buff' (", buff,
                             ") is not GPU memory; a GPU communicator registers memory of its GPU (", gpu_,
                             ")");
    }
    if (device != gpu_) {
      return invalidArgument("argument 'buff' (", buff, ") is memory of GPU ", device,
                             "; this communicator runs on GPU ", gpu_);
    }
  }
  static std::atomic<uintptr_t> lastId{0};
  const uintptr_t id = ++lastId;
  {
    std::lock_guard<std::mutex> lock(mu_);
    entries_[id] = Entry{buff, size, kind};
  }
  *handle = reinterpret_cast<void*>(id);
  BRAID_INFO(
      kLogAlloc, "%s %p (%zu bytes): handle %p%s", registerName(kind), buff, size, *handle,
      kind == Kind::Window ? " (no symmetric kernels yet: collectives on it run as on any buffer)" : "");
  return okStatus();
}

Status BufferRegistry::remove(void* handle, Kind kind) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(reinterpret_cast<uintptr_t>(handle));
  if (it == entries_.end() || it->second.kind != kind) {
    return invalidArgument("argument '", kind == Kind::Window ? "win" : "handle", "' (", handle,
                           ") was not returned by ", registerName(kind),
                           " on this communicator, or was deregistered already");
  }
  BRAID_INFO(kLogAlloc, "%s: deregistered %p (%zu bytes at %p)", registerName(kind), handle, it->second.size,
             it->second.base);
  entries_.erase(it);
  return okStatus();
}

}  // namespace braid
