#include "core/memory.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>

#include "core/library.h"
#include "platform/gpu.h"
#include "platform/shared_memory.h"
#include "util/log.h"
#include "util/strings.h"

namespace braid {
namespace {
struct Allocation {
  bool gpu;
  int fd;  // host memory: the memory file peers map
  size_t bytes;
  bool vmm;  // GPU memory: a shareable virtual-memory allocation (bytes: what is mapped)
  int registrations = 0;  // live ncclCommRegister / ncclCommWindowRegister inside it
};
std::mutex gMutex;
// Every live allocation by address.
std::map<uintptr_t, Allocation>& allocations() {
  static auto* map = new std::map<uintptr_t, Allocation>();
  return *map;
}
}  // namespace

Status memAlloc(void** ptr, size_t bytes) {
  *ptr = nullptr;
  if (bytes == 0) return invalidArgument("argument 'size' is 0");
  Backend backend;
  BRAID_CHECK(selectBackend(&backend));
  void* p = nullptr;
  int fd = -1;
  size_t mapped = bytes;
  bool vmm = false;
  if (backend == Backend::Gpu) {
    // Virtual memory, as NCCL's: other processes map it by a lent
    // descriptor (platform/gpu.h). Where the driver cannot make it, the
    // runtime's allocator (IPC handles).
    Status s = gpuMallocShareable(bytes, &p, &mapped);
    vmm = s.ok();
    if (!vmm) {
      BRAID_INFO(kLogAlloc, "ncclMemAlloc: no shareable virtual memory (%s); using the runtime's allocator",
                 s.message().c_str());
      BRAID_CHECK(gpuMalloc(&p, bytes));
    }
  } else {
    BRAID_CHECK(sharedMemoryCreate(bytes, &fd, &p).withContext("ncclMemAlloc"));
  }
  {
    std::lock_guard<std::mutex> lock(gMutex);
    allocations()[reinterpret_cast<uintptr_t>(p)] = Allocation{backend == Backend::Gpu, fd, mapped, vmm, 0};
  }
  BRAID_INFO(kLogAlloc, "ncclMemAlloc %zu bytes on %s at %p%s", bytes, backendName(backend), p,
             vmm ? strCat(" (virtual memory, ", mapped, " bytes mapped)").c_str() : "");
  *ptr = p;
  return okStatus();
}

Status memFree(void* ptr) {
  Allocation a;
  {
    std::lock_guard<std::mutex> lock(gMutex);
    auto it = allocations().find(reinterpret_cast<uintptr_t>(ptr));
    if (it == allocations().end()) {
      return invalidArgument("pointer ", ptr, " was not allocated by ncclMemAlloc (or was freed already)");
    }
    a = it->second;
    if (a.registrations > 0) {
      // Freed under a window, the memory would come back from the next
      // ncclMemAlloc at the same address, and the window's zero-copy
      // collectives would read and write the peers' mappings of the old one.
      return invalidUsage("ncclMemFree: the memory at ", ptr, " still holds ", a.registrations,
                          " registration(s) (ncclCommRegister or ncclCommWindowRegister); deregister "
                          "them (ncclCommDeregister / ncclCommWindowDeregister) or destroy their "
                          "communicator first");
    }
    allocations().erase(it);
  }
  if (a.gpu) return a.vmm ? gpuFreeShareable(ptr, a.bytes) : gpuFree(ptr);
  sharedMemoryDestroy(a.fd, ptr, a.bytes);
  return okStatus();
}

namespace {
// The live allocation holding [p, p + bytes) (gMutex held), or null.
const std::pair<const uintptr_t, Allocation>* allocationHolding(const void* p, size_t bytes) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  auto it = allocations().upper_bound(addr);
  if (it == allocations().begin()) return nullptr;
  --it;
  const Allocation& a = it->second;
  if (!spanHolds(reinterpret_cast<const void*>(it->first), a.bytes, p, bytes)) return nullptr;
  return &*it;
}

// Counts a registration in the allocation holding [p, p + bytes); returns
// the allocation's address, or 0 where none holds it.
uintptr_t holdAllocation(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(gMutex);
  auto* e = const_cast<std::pair<const uintptr_t, Allocation>*>(allocationHolding(p, bytes));
  if (e == nullptr) return 0;
  ++e->second.registrations;
  return e->first;
}

void releaseAllocation(uintptr_t base) {
  if (base == 0) return;
  std::lock_guard<std::mutex> lock(gMutex);
  auto it = allocations().find(base);
  if (it != allocations().end() && it->second.registrations > 0) --it->second.registrations;
}

}  // namespace

bool findSharedAllocation(const void* p, size_t bytes, SharedAllocation* out) {
  std::lock_guard<std::mutex> lock(gMutex);
  const auto* e = allocationHolding(p, bytes);
  if (e == nullptr || e->second.gpu) return false;
  *out = SharedAllocation{e->second.fd, reinterpret_cast<void*>(e->first), e->second.bytes};
  return true;
}

bool findGpuAllocation(const void* p, size_t bytes, void** base, size_t* allocBytes) {
  std::lock_guard<std::mutex> lock(gMutex);
  const auto* e = allocationHolding(p, bytes);
  if (e == nullptr || !e->second.gpu) return false;
  *base = reinterpret_cast<void*>(e->first);
  *allocBytes = e->second.bytes;
  return true;
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
    entries_[id] = Entry{buff, size, kind, holdAllocation(buff, size)};
  }
  *handle = reinterpret_cast<void*>(id);
  BRAID_INFO(kLogAlloc, "%s %p (%zu bytes): handle %p", registerName(kind), buff, size, *handle);
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
  releaseAllocation(it->second.allocation);
  entries_.erase(it);
  return okStatus();
}

BufferRegistry::~BufferRegistry() {
  for (const auto& [id, e] : entries_) releaseAllocation(e.allocation);
}

}  // namespace braid
