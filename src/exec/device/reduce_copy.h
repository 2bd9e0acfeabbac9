// Reduce-copy on the GPU: dst[i] = op(a[i], b[i]) for i < count, with 16-byte
// vector loads and stores where all three buffers allow it. The building
// block of every reducing primitive; exposed as a launchable kernel so the
// toolchains and the kernel table are proven independently of collectives.
//
// Built in the cuda and hip flavors only. Called from host threads; the
// launch is asynchronous on `stream`.
#pragma once

#include <cstddef>

#include "nccl.h"
#include "util/status.h"

namespace braid::device {

// True if the kernel table of this build holds (type, op).
bool reduceCopyAvailable(ncclDataType_t type, ncclRedOp_t op);

Status launchReduceCopy(ncclDataType_t type, ncclRedOp_t op, void* dst, const void* a,
                        const void* b, size_t count, void* stream);

}  // namespace braid::device
