// Groups: ncclGroupStart / ncclGroupEnd / ncclGroupSimulateEnd.
#include "api/api.h"
#include "core/group.h"

using namespace braid;

BRAID_API(ncclResult_t, ncclGroupStart) {
  return api::apiGuard("ncclGroupStart", [&]() -> Status { return groupStart(); });
}

BRAID_API(ncclResult_t, ncclGroupEnd) {
  return api::apiGuard("ncclGroupEnd", [&]() -> Status { return groupEnd(nullptr); });
}

BRAID_API(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t* simInfo) {
  return api::apiGuard("ncclGroupSimulateEnd", [&]() -> Status {
    Status valid = api::checkNotNull(simInfo, "simInfo");
    if (valid.ok() && simInfo->magic != NCCL_SIM_INFO_MAGIC) {
      valid = invalidArgument("argument 'simInfo' has magic 0x", std::hex, simInfo->magic,
                              "; initialize it with NCCL_SIM_INFO_INITIALIZER");
    } else if (valid.ok() && simInfo->size < offsetof(ncclSimInfo_t, estimatedTime) + sizeof(float)) {
      valid = invalidArgument("argument 'simInfo' has size ", simInfo->size, ", too small for an ncclSimInfo_t");
    }
    // The group ends either way, its operations not run (a simulation runs
    // none): left open, the caller's next operations would be queued in it
    // and return success without running.
    GroupSimulation sim;
    Status ended = valid.ok() || groupDepth() > 0 ? groupEnd(&sim) : okStatus();
    BRAID_CHECK(valid);
    BRAID_CHECK(ended);
    simInfo->estimatedTime = sim.estimatedTimeUs;
    return okStatus();
  });
}
