// The resource window of a device communicator (ncclDevCommCreate): where
// each requested buffer goes, checked before anything is allocated. Plain
// arithmetic over NCCL's requirement structures, so it runs (and is
// tested) without a GPU; core/lsa_space.h allocates and maps the window.
//
// Layout: LSA barriers first (NCCL's lsa_barrier layout: per barrier an
// epoch for multimem and unicast use, a multimem inbox, then one inbox per
// team rank), then every resource requirement in list order, each on its
// alignment (at least 128 bytes: handles count 128-byte units).
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "core/nccl_device_abi.h"
#include "util/status.h"

namespace braid {

struct DevResourceLayout {
  size_t bytes = 0;     // the resource window's size (at least one unit)
  int lsaBarriers = 0;  // at handle 0
  // The handle each requirement's outBufferHandle receives.
  std::vector<std::pair<ncclDevResourceHandle*, ncclDevResourceHandle>> handles;
};

// Checks `reqs` and lays out its resources for a communicator whose LSA
// team has `lsaSize` ranks. What Braid does not provide (GIN,
// multimem) is an ncclInvalidUsage naming the field.
Status layoutDevResources(const ncclDevCommRequirements& reqs, int lsaSize, DevResourceLayout* out);

// `x` rounded up to a multiple of `a`.
inline size_t roundUp(size_t x, size_t a) {
  return (x + a - 1) / a * a;
}

// Bytes of `nBarriers` LSA barriers of a team of `teamRanks`.
size_t lsaBarrierBytes(int teamRanks, int nBarriers);

// ncclLsaBarrierCreateRequirement and ncclLLA2ACreateRequirement: the
// handle (its buffer assigned by ncclDevCommCreate) and the requirement
// the user chains into ncclDevCommRequirements.
Status lsaBarrierRequirement(ncclTeam team, int nBarriers, ncclLsaBarrierHandle* handle,
                             ncclDevResourceRequirements* req);
Status llA2ARequirement(int nBlocks, int nSlots, ncclLLA2AHandle* handle, ncclDevResourceRequirements* req);

}  // namespace braid
