#include "core/group.h"

namespace braid {
namespace {
thread_local int tlsDepth = 0;
}  // namespace

Status groupStart() {
  ++tlsDepth;
  return okStatus();
}

Status groupEnd(GroupSimulation* simulate) {
  if (tlsDepth == 0) {
    return invalidUsage("ncclGroupEnd called without a matching ncclGroupStart on this thread");
  }
  --tlsDepth;
  // No operation can be collected yet (collectives need communicators, which
  // come with the communicator layer), so the outermost End has nothing to
  // launch and an estimate of zero time is exact.
  if (simulate != nullptr) simulate->estimatedTimeUs = 0.0f;
  return okStatus();
}

int groupDepth() { return tlsDepth; }

}  // namespace braid
