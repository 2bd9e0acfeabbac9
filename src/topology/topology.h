// This machine's topology and schedule, as the rest of Braid asks for them.
//
// localTopology() loads NCCL_TOPO_FILE when it is set, else probes the
// machine (topology/probe/), and writes NCCL_TOPO_DUMP_FILE when that is set.
// ringsOverride() is NCCL_RINGS. Called at communicator init and by
// braid-topo; any thread (no shared state besides the parameters).
#pragma once

#include <string>
#include <vector>

#include "topology/model.h"
#include "topology/search.h"
#include "util/status.h"

namespace braid {

// `notes` receives what the probe could not learn (missing libraries...).
Status localTopology(TopoSystem* sys, std::vector<std::string>* notes);
std::string ringsOverride();

// NCCL's INFO lines for a schedule: "Channel 00/02 : 0 1 2 3" per channel,
// and "Trees [0] 1/-1/-1->0->-1" per rank of `ranks` (empty: every rank).
std::vector<std::string> scheduleLogLines(const Schedule& s, const std::vector<int>& ranks);

}  // namespace braid
