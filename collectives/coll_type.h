// The collectives the algorithms implement (point-to-point and what is made
// of it are not here: they are not algorithms over channels).
#pragma once

namespace braid {

enum class CollType { AllReduce, AllGather, ReduceScatter, Broadcast, Reduce };
constexpr int kNumCollTypes = 5;

// Lower-case name as NCCL_ALGO's per-collective syntax spells it.
inline const char* collTypeKey(CollType c) {
  switch (c) {
    case CollType::AllReduce: return "allreduce";
    case CollType::AllGather: return "allgather";
    case CollType::ReduceScatter: return "reducescatter";
    case CollType::Broadcast: return "broadcast";
    default: return "reduce";
  }
}

}  // namespace braid
