// Host memory other processes of this host can map: an anonymous memory file
// (memfd) mapped shared. The host backend's ncclMemAlloc returns it, so a
// window registered on it (ncclCommWindowRegister) can be mapped by the
// peers, which then read and write it directly (zero-copy collectives).
//
// A peer maps it through /proc/<pid>/fd/<fd> of the owner, which needs the
// same user (ptrace read access); no name is ever created, so a crash
// leaks nothing, and a mapping stays valid after its owner frees or dies
// (the pages live as long as any mapping of them).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "util/status.h"

namespace braid {

// Refuses to reserve `bytes` of shared memory (`what` names it) beyond what
// the host can give: MemAvailable plus SwapFree (/proc/meminfo), and what
// the process's cgroup (v2) still allows. Shared memory is charged to no
// process, so reserving more than that makes the kernel kill processes to
// make room, the caller's neighbours first, instead of failing the call.
Status checkMemoryAvailable(size_t bytes, const char* what);

// `bytes` of zeroed memory, reserved up front (an exhausted memory limit is
// an error here, not a SIGBUS on first touch). Returns the mapping and the
// file descriptor that peers open.
Status sharedMemoryCreate(size_t bytes, int* fd, void** addr);
// Unmaps and closes what sharedMemoryCreate made.
void sharedMemoryDestroy(int fd, void* addr, size_t bytes);
// Maps `bytes` at `offset` (a multiple of the page size) of process `pid`'s
// memory file `fd`, read-write.
Status sharedMemoryMapPeer(pid_t pid, int fd, size_t offset, size_t bytes, void** addr);
void sharedMemoryUnmap(void* addr, size_t bytes);
// The id of this process's PID namespace (0: unknown). A peer's pid names
// its process, and /proc/<pid>/fd reaches its files, only from inside the
// same namespace.
uint64_t pidNamespaceId();
size_t pageBytes();

}  // namespace braid
