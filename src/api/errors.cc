// Version, error strings, last error, debug re-init.
#include "api/api.h"
#include "braid.h"
#include "util/log.h"
#include "util/param.h"

using namespace braid;

BRAID_API(ncclResult_t, ncclGetVersion, int* version) {
  return api::apiGuard("ncclGetVersion", [&]() -> Status {
    BRAID_CHECK(api::checkNotNull(version, "version"));
    *version = NCCL_VERSION_CODE;
    return okStatus();
  });
}

extern "C" __attribute__((visibility("default"))) ncclResult_t braidGetVersion(int* version) {
  return api::apiGuard("braidGetVersion", [&]() -> Status {
    BRAID_CHECK(api::checkNotNull(version, "version"));
    *version = BRAID_MAJOR * 10000 + BRAID_MINOR * 100 + BRAID_PATCH;
    return okStatus();
  });
}

BRAID_API(const char*, ncclGetErrorString, ncclResult_t result) {
  switch (api::rawEnum(result)) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled GPU runtime error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the Braid developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "operation in progress";
    case ncclNumResults: break;
  }
  return "unknown result code";
}

BRAID_API(const char*, ncclGetLastError, ncclComm_t comm) {
  return api::lastErrorText(comm);
}

namespace {
void resetDebug() {
  try {
    ParamRegistry::instance().reload();
    logReset();
  } catch (...) {
    // Nothing may cross the C API; the previous settings stay.
  }
}
}  // namespace

BRAID_API(void, ncclResetDebugInit, void) {
  resetDebug();
}

// NCCL 2.28's non-deprecated name for the same reset, exported without a
// twin; no header declares it (NCCL's own tests and RCCL's declare it to
// re-read NCCL_DEBUG, NCCL_DEBUG_FILE and the rest after changing them).
extern "C" __attribute__((visibility("default"))) void ncclResetDebugInitInternal(void) {
  resetDebug();
}
