// ncclMemAlloc / ncclMemFree: memory suited to communication on the active
// backend. GPU backend: device memory of the current GPU. Host backend:
// page-aligned host memory (the host engine maps buffers into shared memory
// and uses vector loads, so page alignment matters). Thread-safe.
#pragma once

#include <cstddef>

#include "util/status.h"

namespace braid {

Status memAlloc(void** ptr, size_t bytes);
// Frees memory from memAlloc; anything else is ncclInvalidArgument.
Status memFree(void* ptr);

}  // namespace braid
