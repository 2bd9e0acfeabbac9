// Group semantics (ncclGroupStart/End), per thread as in NCCL.
//
// Between ncclGroupStart and the matching ncclGroupEnd, operations are
// collected on the calling thread instead of launched; the outermost
// ncclGroupEnd launches them together. Groups nest; an End without a Start is
// ncclInvalidUsage. Called from the API thread only; the state is thread-local.
#pragma once

#include <functional>

#include "util/status.h"

namespace braid {

struct GroupSimulation {
  float estimatedTimeUs = 0.0f;  // estimated time of the group's operations
};

Status groupStart();
// Ends one level. At the outermost level, launches the collected operations,
// or, if `simulate` is given, estimates their time and launches nothing.
Status groupEnd(GroupSimulation* simulate);
// Nesting depth on this thread (0 outside any group).
int groupDepth();
// Inside a group: runs `op` at the outermost ncclGroupEnd, in call order.
void groupDefer(std::function<Status()> op);

}  // namespace braid
