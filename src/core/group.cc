#include "core/group.h"

#include <vector>

#include "nccl.h"

namespace braid {
namespace {
thread_local int tlsDepth = 0;
thread_local std::vector<std::function<Status()>>* tlsOps = nullptr;

std::vector<std::function<Status()>>& ops() {
  if (tlsOps == nullptr) tlsOps = new std::vector<std::function<Status()>>();  // one per thread, reused
  return *tlsOps;
}
}  // namespace

void groupDefer(std::function<Status()> op) { ops().push_back(std::move(op)); }

Status groupStart() {
  ++tlsDepth;
  return okStatus();
}

Status groupEnd(GroupSimulation* simulate) {
  if (tlsDepth == 0) {
    return invalidUsage("ncclGroupEnd called without a matching ncclGroupStart on this thread");
  }
  --tlsDepth;
  if (tlsDepth > 0) return okStatus();
  std::vector<std::function<Status()>> pending;
  pending.swap(ops());
  if (simulate != nullptr) {
    // No cost model yet: an estimate we cannot make is not reported as zero.
    simulate->estimatedTimeUs = pending.empty() ? 0.0f : NCCL_UNDEF_FLOAT;
    return okStatus();
  }
  // Operations run in call order; the first failure is reported, and the
  // ones after it still run so that peers waiting on them are not stranded.
  Status first;
  for (auto& op : pending) {
    Status s = op();
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

int groupDepth() { return tlsDepth; }

}  // namespace braid
