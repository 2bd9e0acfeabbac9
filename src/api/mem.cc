// ncclMemAlloc / ncclMemFree.
#include "api/api.h"
#include "core/library.h"
#include "core/memory.h"

using namespace braid;

BRAID_API(ncclResult_t, ncclMemAlloc, void** ptr, size_t size) {
  return api::apiGuard("ncclMemAlloc", [&]() -> Status {
    BRAID_CHECK(api::checkNotNull(ptr, "ptr"));
    BRAID_CHECK(libraryInit());
    return memAlloc(ptr, size);
  });
}

BRAID_API(ncclResult_t, ncclMemFree, void* ptr) {
  return api::apiGuard("ncclMemFree", [&]() -> Status {
    if (ptr == nullptr) return okStatus();  // like free(NULL)
    return memFree(ptr);
  });
}
