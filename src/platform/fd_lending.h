// File descriptors lent to other processes of this host. Some memory can
// only be shared as a descriptor the exporting process holds: a GPU's
// virtual-memory allocation exported as a POSIX file descriptor
// (platform/gpu.h, gpuExport) is an object of the driver, not a file a
// peer could open by path (as it opens memory files through
// /proc/<pid>/fd, platform/shared_memory.h).
//
// The owner lends a descriptor: the process starts, on first use, one
// thread listening on an abstract Unix socket named after its pid, and
// records the descriptor with a random token. A peer that learned
// (pid, fd, token) some other way (a bootstrap all-gather, a shared table)
// connects, asks, and receives a duplicate (SCM_RIGHTS). The server only
// answers processes of its own user (or root) presenting the token of a
// descriptor still lent; everything else gets a refusal, never a
// descriptor. Abstract sockets belong to a network namespace: processes in
// different namespaces cannot borrow from each other, and say so.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "util/status.h"

namespace braid {

// What a borrower needs to ask for one lent descriptor.
struct LentFd {
  int32_t pid = 0;
  int32_t fd = -1;
  uint64_t token = 0;
};

// Lends `fd` (the caller keeps it open until fdReturn) and describes it.
Status fdLend(int fd, LentFd* out);
// Stops lending it (no-op if it is not lent). Duplicates already handed
// out stay valid.
void fdReturn(const LentFd& lent);
// A duplicate of the descriptor `lent` describes, as a new descriptor of
// this process (the caller closes it). Gives up after `timeoutMs` if the
// owner does not answer (dead, stuck, another network namespace).
Status fdBorrow(const LentFd& lent, int timeoutMs, int* out);

}  // namespace braid
