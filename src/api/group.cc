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
    BRAID_CHECK(api::checkNotNull(simInfo, "simInfo"));
    if (simInfo->magic != NCCL_SIM_INFO_MAGIC) {
      return invalidArgument("argument 'simInfo' has magic 0x", std::hex, simInfo->magic,
                             "; initialize it with NCCL_SIM_INFO_INITIALIZER");
    }
    if (simInfo->size < offsetof(ncclSimInfo_t, estimatedTime) + sizeof(float)) {
      return invalidArgument("argument 'simInfo' has size ", simInfo->size,
                             ", too small for an ncclSimInfo_t");
    }
    GroupSimulation sim;
    BRAID_CHECK(groupEnd(&sim));
    simInfo->estimatedTime = sim.estimatedTimeUs;
    return okStatus();
  });
}
