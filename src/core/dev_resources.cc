#include "core/dev_resources.h"

#include <cstring>
#include <set>

namespace braid {

namespace {
constexpr size_t kMaxRequirements = 1 << 16;  // a longer list is taken for a cycle
constexpr size_t kMaxResourceBytes = size_t(1) << 40;

Status checkCount(int value, const char* field) {
  if (value < 0)
    return invalidArgument("ncclDevCommRequirements.", field, " is ", value, "; it counts, so >= 0");
  return okStatus();
}

Status noGin(const char* field) {
  return invalidUsage("ncclDevCommRequirements.", field,
                      " asks for GPU-initiated networking (GIN), which Braid does not provide; its device "
                      "communicators reach the LSA team (this node's GPUs) only");
}
}  // namespace

size_t lsaBarrierBytes(int teamRanks, int nBarriers) {
  return (3 + static_cast<size_t>(teamRanks)) * static_cast<size_t>(nBarriers) * sizeof(uint32_t);
}

Status layoutDevResources(const ncclDevCommRequirements& reqs, int lsaSize, DevResourceLayout* out) {
  *out = DevResourceLayout{};
  BRAID_CHECK(checkCount(reqs.barrierCount, "barrierCount"));
  BRAID_CHECK(checkCount(reqs.lsaBarrierCount, "lsaBarrierCount"));
  BRAID_CHECK(checkCount(reqs.railGinBarrierCount, "railGinBarrierCount"));
  BRAID_CHECK(checkCount(reqs.lsaLLA2ABlockCount, "lsaLLA2ABlockCount"));
  BRAID_CHECK(checkCount(reqs.lsaLLA2ASlotCount, "lsaLLA2ASlotCount"));
  BRAID_CHECK(checkCount(reqs.ginContextCount, "ginContextCount"));
  BRAID_CHECK(checkCount(reqs.ginSignalCount, "ginSignalCount"));
  BRAID_CHECK(checkCount(reqs.ginCounterCount, "ginCounterCount"));
  if (reqs.lsaMultimem) {
    return invalidUsage(
        "ncclDevCommRequirements.lsaMultimem asks for NVLink multicast (multimem), which Braid "
        "never uses; LSA barriers and windows work without it");
  }
  if (reqs.ginForceEnable) return noGin("ginForceEnable");
  if (reqs.railGinBarrierCount > 0) return noGin("railGinBarrierCount");
  if (reqs.ginSignalCount > 0) return noGin("ginSignalCount");
  if (reqs.ginCounterCount > 0) return noGin("ginCounterCount");
  if (reqs.barrierCount > 0) {
    // ncclBarrierSession over the world joins an LSA barrier with a GIN
    // barrier across the rail; the LSA part alone is lsaBarrierCount.
    return invalidUsage("ncclDevCommRequirements.barrierCount (", reqs.barrierCount,
                        ") asks for world barriers, which join LSA barriers with GPU-initiated networking "
                        "(GIN) that Braid does not provide; use lsaBarrierCount and ncclLsaBarrierSession");
  }
  size_t n = 0;
  for (const ncclTeamRequirements* t = reqs.teamRequirementsList; t != nullptr; t = t->next) {
    if (++n > kMaxRequirements) {
      return invalidArgument("ncclDevCommRequirements.teamRequirementsList has more than ", kMaxRequirements,
                             " entries (a cycle?)");
    }
    if (t->multimem) {
      return invalidUsage("a team requirement asks for multimem (NVLink multicast), which Braid never uses");
    }
  }
  // lsaLLA2ABlockCount and lsaLLA2ASlotCount allocate nothing: 2.28's
  // ncclDevComm has no handle a kernel could reach such a buffer through
  // (LL all-to-alls come from ncclLLA2ACreateRequirement).
  out->lsaBarriers = reqs.lsaBarrierCount;
  size_t offset = lsaBarrierBytes(lsaSize, reqs.lsaBarrierCount);
  std::set<const ncclDevResourceRequirements*> seen;
  for (const ncclDevResourceRequirements* r = reqs.resourceRequirementsList; r != nullptr; r = r->next) {
    if (!seen.insert(r).second || seen.size() > kMaxRequirements) {
      return invalidArgument("ncclDevCommRequirements.resourceRequirementsList is cyclic or longer than ",
                             kMaxRequirements, " entries");
    }
    if (r->ginSignalCount != 0 || r->ginCounterCount != 0) {
      return invalidUsage("a resource requirement asks for GIN signals or counters (", r->ginSignalCount,
                          ", ", r->ginCounterCount, "), which Braid does not provide");
    }
    const size_t align = r->bufferAlign < kNcclResourceUnit ? kNcclResourceUnit : r->bufferAlign;
    if ((align & (align - 1)) != 0) {
      return invalidArgument("a resource requirement's bufferAlign is ", r->bufferAlign,
                             "; use a power of two");
    }
    if (r->bufferSize > kMaxResourceBytes || align > kMaxResourceBytes) {
      return invalidArgument("a resource requirement asks for ", r->bufferSize, " bytes aligned to ", align,
                             "; at most ", kMaxResourceBytes);
    }
    offset = roundUp(offset, align);
    if (r->outBufferHandle != nullptr) {
      out->handles.emplace_back(r->outBufferHandle,
                                static_cast<ncclDevResourceHandle>(offset / kNcclResourceUnit));
    }
    offset += r->bufferSize;
    if (offset > kMaxResourceBytes) {
      return invalidArgument("the resource requirements add up to more than ", kMaxResourceBytes, " bytes");
    }
  }
  out->bytes = roundUp(offset == 0 ? 1 : offset, kNcclResourceUnit);
  return okStatus();
}

Status lsaBarrierRequirement(ncclTeam team, int nBarriers, ncclLsaBarrierHandle* handle,
                             ncclDevResourceRequirements* req) {
  if (team.nRanks < 1) return invalidArgument("argument 'team' has ", team.nRanks, " ranks");
  if (nBarriers < 0) return invalidArgument("argument 'nBarriers' is ", nBarriers);
  std::memset(req, 0, sizeof(*req));
  *handle = ncclLsaBarrierHandle{0, nBarriers};
  req->bufferSize = lsaBarrierBytes(team.nRanks, nBarriers);
  req->bufferAlign = kNcclResourceUnit;
  req->outBufferHandle = &handle->bufHandle;
  return okStatus();
}

Status llA2ARequirement(int nBlocks, int nSlots, ncclLLA2AHandle* handle, ncclDevResourceRequirements* req) {
  if (nBlocks < 0) return invalidArgument("argument 'nBlocks' is ", nBlocks);
  if (nSlots < 0) return invalidArgument("argument 'nSlots' is ", nSlots);
  std::memset(req, 0, sizeof(*req));
  *handle = ncclLLA2AHandle{0, static_cast<uint32_t>(nSlots)};
  // Per block one line (its epoch) and two halves of nSlots 16-byte slots.
  req->bufferSize = static_cast<size_t>(nBlocks) * (1 + 2 * static_cast<size_t>(nSlots)) * 16;
  req->bufferAlign = 16;
  req->outBufferHandle = &handle->bufHandle;
  return okStatus();
}

}  // namespace braid
