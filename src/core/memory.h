// ncclMemAlloc / ncclMemFree: memory suited to communication on the active
// backend. GPU backend: device memory of the current GPU, as virtual memory
// other processes can map (platform/gpu.h, gpuMallocShareable; the
// runtime's allocator where the driver cannot). Host backend:
// page-aligned host memory other processes of the host can map
// (platform/shared_memory.h), so windows registered on it give zero-copy
// collectives. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

#include "util/status.h"

namespace braid {

// Whether [base, base + size) holds [p, p + bytes) (an empty range at its end too).
inline bool spanHolds(const void* base, size_t size, const void* p, size_t bytes) {
  const uintptr_t b = reinterpret_cast<uintptr_t>(base), a = reinterpret_cast<uintptr_t>(p);
  return a >= b && a - b <= size && bytes <= size - (a - b);
}

Status memAlloc(void** ptr, size_t bytes);
// Frees memory from memAlloc; anything else is ncclInvalidArgument. Memory
// that a live registration or window holds is refused (ncclInvalidUsage).
Status memFree(void* ptr);

// The host allocation of memAlloc holding [p, p + bytes), if there is one.
struct SharedAllocation {
  int fd;
  void* base;
  size_t bytes;
};
bool findSharedAllocation(const void* p, size_t bytes, SharedAllocation* out);
// The GPU allocation of memAlloc holding [p, p + bytes), if there is one.
bool findGpuAllocation(const void* p, size_t bytes, void** base, size_t* allocBytes);

// The buffers registered with one communicator: ncclCommRegister /
// ncclCommDeregister (kind Buffer) and ncclCommWindowRegister /
// ncclCommWindowDeregister (kind Window). A GPU communicator accepts memory
// of its own GPU only; a host communicator any host memory. Handles are
// checked before use: a foreign, stale or twice-deregistered handle, or one
// of the other kind, is an error, never a crash. Registrations left at
// destroy are released. Thread-safe.
//
// Registration is a promise about a buffer's lifetime, as in NCCL. Host
// windows are also mapped into the peers (core/symmetric.h) for zero-copy
// collectives, and GPU windows of ncclMemAlloc memory into the peers' GPUs;
// GPU buffer registrations are shared with the host's other processes
// (core/peer_buffers.h) for direct writes.
class BufferRegistry {
 public:
  enum class Kind { Buffer, Window };
  // `gpu`: the communicator's GPU, or -1 for a host communicator.
  explicit BufferRegistry(int gpu) : gpu_(gpu) {}
  ~BufferRegistry();  // releases what is still registered
  BufferRegistry(const BufferRegistry&) = delete;
  BufferRegistry& operator=(const BufferRegistry&) = delete;
  Status add(void* buff, size_t size, void** handle, Kind kind = Kind::Buffer);
  Status remove(void* handle, Kind kind = Kind::Buffer);

 private:
  struct Entry {
    const void* base;
    size_t size;
    Kind kind;
    uintptr_t allocation;  // the ncclMemAlloc memory holding it (0: none), which ncclMemFree then refuses
  };
  int gpu_;
  std::mutex mu_;
  // By handle: a number never reused in the process, so a stale handle or
  // another communicator's never matches a live registration.
  std::map<uintptr_t, Entry> entries_;
};

}  // namespace braid
