// Unique id and communicator life cycle: validate, then forward to core/init.
#include "core/comm.h"

#include "api/api.h"
#include "core/config.h"
#include "core/dev_resources.h"
#include "core/init.h"
#include "core/library.h"

using namespace braid;

namespace {
// Clears *comm first, so that a rejected call leaves no stale handle (as
// NCCL). Atomically, as init publishes it: another thread may be polling it
// to abort the init.
void clearHandle(ncclComm_t* comm) { __atomic_store_n(comm, static_cast<ncclComm_t>(nullptr), __ATOMIC_RELEASE); }

Status checkRankArgs(ncclComm_t* comm, int nranks, int rank) {
  BRAID_CHECK(api::checkNotNull(comm, "comm"));
  clearHandle(comm);
  if (nranks < 1 || nranks > kMaxCommRanks) {
    return invalidArgument("argument 'nranks' is ", nranks, "; it must be in [1, ", kMaxCommRanks, "]");
  }
  if (rank < 0 || rank >= nranks) {
    return invalidArgument("argument 'rank' is ", rank, "; it must be in [0, ", nranks - 1, "]");
  }
  return okStatus();
}

}  // namespace

BRAID_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId* uniqueId) {
  return api::apiGuard("ncclGetUniqueId", [&]() -> Status {
    BRAID_CHECK(api::checkNotNull(uniqueId, "uniqueId"));
    BRAID_CHECK(libraryInit());
    return getUniqueId(uniqueId);
  });
}

BRAID_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
          ncclConfig_t* config) {
  return api::apiGuard("ncclCommInitRankConfig", [&]() -> Status {
    BRAID_CHECK(checkRankArgs(comm, nranks, rank));
    CommConfig parsed;
    BRAID_CHECK(readCommConfig(config, &parsed));
    BRAID_CHECK(libraryInit());
    return commInitRank(comm, nranks, {commId}, rank, parsed);
  });
}

BRAID_API(ncclResult_t, ncclCommInitRank, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return api::apiGuard("ncclCommInitRank", [&]() -> Status {
    BRAID_CHECK(checkRankArgs(comm, nranks, rank));
    BRAID_CHECK(libraryInit());
    return commInitRank(comm, nranks, {commId}, rank, CommConfig());
  });
}

BRAID_API(ncclResult_t, ncclCommInitAll, ncclComm_t* comm, int ndev, const int* devlist) {
  return api::apiGuard("ncclCommInitAll", [&]() -> Status {
    BRAID_CHECK(api::checkNotNull(comm, "comm"));
    if (ndev < 1) return invalidArgument("argument 'ndev' is ", ndev, "; it must be at least 1");
    if (devlist != nullptr) {
      for (int i = 0; i < ndev; ++i) {
        if (devlist[i] < 0) return invalidArgument("argument 'devlist[", i, "]' is ", devlist[i]);
        for (int j = 0; j < i && !gpuSharingAllowed(); ++j) {
          if (devlist[j] == devlist[i]) {
            return invalidArgument("argument 'devlist' names device ", devlist[i], " twice (entries ", j,
                                   " and ", i, "); set BRAID_SHARE_GPU=1 to let ranks share a GPU");
          }
        }
      }
    }
    BRAID_CHECK(libraryInit());
    return commInitAll(comm, ndev, devlist);
  });
}

BRAID_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t* newcomm, int nranks, int myrank, int nId,
          ncclUniqueId* commIds, ncclConfig_t* config) {
  return api::apiGuard("ncclCommInitRankScalable", [&]() -> Status {
    BRAID_CHECK(checkRankArgs(newcomm, nranks, myrank));
    if (nId < 1 || nId > nranks) {
      return invalidArgument("argument 'nId' is ", nId, "; it must be in [1, nranks=", nranks, "]");
    }
    BRAID_CHECK(api::checkNotNull(commIds, "commIds"));
    CommConfig parsed;
    BRAID_CHECK(readCommConfig(config, &parsed));
    BRAID_CHECK(libraryInit());
    return commInitRank(newcomm, nranks, std::vector<ncclUniqueId>(commIds, commIds + nId), myrank, parsed);
  });
}

BRAID_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm) {
  return api::apiGuard("ncclCommFinalize", [&]() -> Status {
    Communicator* c = nullptr;
    BRAID_CHECK(lookupComm(comm, &c, /*needReady=*/true));
    return commFinalize(c);
  }, comm);
}

BRAID_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm) {
  return api::apiGuard("ncclCommDestroy", [&]() -> Status {
    if (comm == nullptr) return okStatus();  // as NCCL: destroying NULL is a no-op
    Communicator* c = nullptr;
    BRAID_CHECK(lookupComm(comm, &c, /*needReady=*/false));
    return commDestroy(c);
  }, comm);
}

BRAID_API(ncclResult_t, ncclCommAbort, ncclComm_t comm) {
  return api::apiGuard("ncclCommAbort", [&]() -> Status {
    if (comm == nullptr) return okStatus();
    Communicator* c = nullptr;
    BRAID_CHECK(lookupComm(comm, &c, /*needReady=*/false));
    return commAbort(c);
  }, comm);
}

BRAID_API(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags) {
  return api::apiGuard(
      "ncclCommRevoke",
      [&]() -> Status {
        if (comm == nullptr) return okStatus();  // as NCCL: revoking NULL is a no-op
        Communicator* c = nullptr;
        BRAID_CHECK(lookupComm(comm, &c, /*needReady=*/false));
        if (revokeFlags != NCCL_REVOKE_DEFAULT) {
          return invalidArgument("argument 'revokeFlags' is ", revokeFlags,
                                 "; it must be NCCL_REVOKE_DEFAULT (0)");
        }
        return commRevoke(c);
      },
      comm);
}

BRAID_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
          ncclConfig_t* config) {
  return api::apiGuard(
      "ncclCommSplit",
      [&]() -> Status {
        if (newcomm != nullptr) clearHandle(newcomm);  // no stale handle if rejected
        CommUse use;  // held while the operation runs
        Communicator* parent = nullptr;
        BRAID_CHECK(lookupComm(comm, &parent, /*needReady=*/true, &use));
        BRAID_CHECK(api::checkNotNull(newcomm, "newcomm"));
        if (color < 0 && color != NCCL_SPLIT_NOCOLOR) {
          return invalidArgument("argument 'color' is ", color, "; it must be >= 0 or NCCL_SPLIT_NOCOLOR");
        }
        CommConfig parsed;
        BRAID_CHECK(readCommConfig(config, &parsed));
        return commSplit(parent, color, key, newcomm, config ? &parsed : nullptr);
      },
      comm);
}

BRAID_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
          ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  return api::apiGuard(
      "ncclCommShrink",
      [&]() -> Status {
        // A communicator in error may be shrunk: that is how a job leaves a dead rank behind.
        if (newcomm != nullptr) clearHandle(newcomm);  // no stale handle if rejected
        CommUse use;  // held while the operation runs
        Communicator* c = nullptr;
        BRAID_CHECK(lookupComm(comm, &c, /*needReady=*/false, &use));
        if (c->asyncError() == ncclInProgress) {
          return invalidUsage(
              "the communicator is still initializing (non-blocking init): poll "
              "ncclCommGetAsyncError until it returns ncclSuccess");
        }
        if (c->finalized()) return invalidUsage("the communicator was finalized (ncclCommFinalize)");
        BRAID_CHECK(api::checkNotNull(newcomm, "newcomm"));
        if (excludeRanksCount < 0) return invalidArgument("argument 'excludeRanksCount' is negative");
        if (excludeRanksCount > 0) BRAID_CHECK(api::checkNotNull(excludeRanksList, "excludeRanksList"));
        if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT) {
          return invalidArgument("argument 'shrinkFlags' is ", shrinkFlags,
                                 "; use NCCL_SHRINK_DEFAULT or NCCL_SHRINK_ABORT");
        }
        CommConfig parsed;
        BRAID_CHECK(readCommConfig(config, &parsed));
        return commShrink(c, excludeRanksList, excludeRanksCount, newcomm, config ? &parsed : nullptr,
                          shrinkFlags == NCCL_SHRINK_ABORT);
      },
      comm);
}

BRAID_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t* asyncError) {
  return api::apiGuard("ncclCommGetAsyncError", [&]() -> Status {
    BRAID_CHECK(api::checkNotNull(asyncError, "asyncError"));
    Communicator* c = nullptr;
    BRAID_CHECK(lookupComm(comm, &c, /*needReady=*/false));
    *asyncError = c->pollAsyncError();
    return okStatus();
  }, comm);
}

BRAID_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int* count) {
  return api::apiGuard("ncclCommCount", [&]() -> Status {
    BRAID_CHECK(api::checkNotNull(count, "count"));
    Communicator* c = nullptr;
    BRAID_CHECK(lookupComm(comm, &c, /*needReady=*/false));
    *count = c->nranks();
    return okStatus();
  }, comm);
}

BRAID_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int* device) {
  return api::apiGuard("ncclCommCuDevice", [&]() -> Status {
    BRAID_CHECK(api::checkNotNull(device, "device"));
    Communicator* c = nullptr;
    BRAID_CHECK(lookupComm(comm, &c, /*needReady=*/false));
    *device = c->device();
    return okStatus();
  }, comm);
}

BRAID_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int* rank) {
  return api::apiGuard("ncclCommUserRank", [&]() -> Status {
    BRAID_CHECK(api::checkNotNull(rank, "rank"));
    Communicator* c = nullptr;
    BRAID_CHECK(lookupComm(comm, &c, /*needReady=*/false));
    *rank = c->rank();
    return okStatus();
  }, comm);
}

// Entry points whose feature is not built yet: they validate the handle and
// arguments, then say so.
#define BRAID_COMM_ENTRY(feature, name, params, extraChecks)     \
  BRAID_API(ncclResult_t, name, params) {                        \
    return api::apiGuard(                                        \
        #name,                                                   \
        [&]() -> Status {                                        \
          Communicator* c = nullptr;                             \
          BRAID_CHECK(lookupComm(comm, &c, /*needReady=*/true)); \
          extraChecks;                                           \
          return api::notBuiltYet(#name, feature);               \
        },                                                       \
        comm);                                                   \
  }
#define BRAID_ARGS(...) __VA_ARGS__

BRAID_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void* buff, size_t size, void** handle) {
  return api::apiGuard(
      "ncclCommRegister",
      [&]() -> Status {
        CommUse use;  // held while the operation runs
        Communicator* c = nullptr;
        BRAID_CHECK(lookupComm(comm, &c, /*needReady=*/true, &use));
        BRAID_CHECK(api::checkNotNull(buff, "buff"));
        BRAID_CHECK(api::checkNotNull(handle, "handle"));
        BRAID_CHECK(api::checkRange(buff, size, "buff"));
        return c->registerBuffer(buff, size, handle);
      },
      comm);
}

BRAID_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void* handle) {
  return api::apiGuard(
      "ncclCommDeregister",
      [&]() -> Status {
        CommUse use;  // held while the operation runs
        Communicator* c = nullptr;
        BRAID_CHECK(lookupComm(comm, &c, /*needReady=*/true, &use));
        BRAID_CHECK(api::checkNotNull(handle, "handle"));
        return c->deregisterBuffer(handle);
      },
      comm);
}
// Windows (NCCL 2.27+): collective. On the host backend every rank maps
// every peer's window (core/symmetric.h) and all-reduce, all-gather and
// reduce-scatter on windows run zero-copy; GPU windows are recorded like
// registered buffers.
BRAID_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
          int winFlags) {
  return api::apiGuard(
      "ncclCommWindowRegister",
      [&]() -> Status {
        CommUse use;  // held while the operation runs
        Communicator* c = nullptr;
        BRAID_CHECK(lookupComm(comm, &c, /*needReady=*/true, &use));
        BRAID_CHECK(api::checkNotNull(buff, "buff"));
        BRAID_CHECK(api::checkNotNull(win, "win"));
        *win = nullptr;
        BRAID_CHECK(api::checkRange(buff, size, "buff"));
        if ((winFlags & ~NCCL_WIN_COLL_SYMMETRIC) != 0) {
          return invalidArgument("argument 'winFlags' is ", winFlags,
                                 "; use NCCL_WIN_DEFAULT or NCCL_WIN_COLL_SYMMETRIC");
        }
        if ((winFlags & NCCL_WIN_COLL_SYMMETRIC) != 0 &&
            reinterpret_cast<uintptr_t>(buff) % NCCL_WIN_REQUIRED_ALIGNMENT != 0) {
          return invalidArgument("argument 'buff' (", buff, ") is not aligned to ",
                                 NCCL_WIN_REQUIRED_ALIGNMENT,
                                 " bytes (NCCL_WIN_REQUIRED_ALIGNMENT), which a symmetric window needs; "
                                 "allocate it with ncclMemAlloc");
        }
        return c->registerWindow(buff, size, win);
      },
      comm);
}

BRAID_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win) {
  return api::apiGuard(
      "ncclCommWindowDeregister",
      [&]() -> Status {
        CommUse use;  // held while the operation runs
        Communicator* c = nullptr;
        BRAID_CHECK(lookupComm(comm, &c, /*needReady=*/true, &use));
        BRAID_CHECK(api::checkNotNull(win, "win"));
        return c->deregisterWindow(win);
      },
      comm);
}

// NCCL 2.28's device API (nccl_device/*.h, not nccl.h): device
// communicators for user kernels built against NCCL's device headers, over
// the LSA team (core/lsa_space.h); GIN and multimem are refused.
BRAID_API(ncclResult_t, ncclDevCommCreate, ncclComm_t comm, const ncclDevCommRequirements* reqs,
          ncclDevComm* outDevComm) {
  return api::apiGuard(
      "ncclDevCommCreate",
      [&]() -> Status {
        CommUse use;  // held while the operation runs
        Communicator* c = nullptr;
        BRAID_CHECK(lookupComm(comm, &c, /*needReady=*/true, &use));
        BRAID_CHECK(api::checkNotNull(reqs, "reqs"));
        BRAID_CHECK(api::checkNotNull(outDevComm, "outDevComm"));
        return c->devCommCreate(*reqs, outDevComm);
      },
      comm);
}
BRAID_API(ncclResult_t, ncclDevCommDestroy, ncclComm_t comm, const ncclDevComm* devComm) {
  return api::apiGuard(
      "ncclDevCommDestroy",
      [&]() -> Status {
        CommUse use;  // held while the operation runs
        Communicator* c = nullptr;
        BRAID_CHECK(lookupComm(comm, &c, /*needReady=*/true, &use));
        BRAID_CHECK(api::checkNotNull(devComm, "devComm"));
        return c->devCommDestroy(*devComm);
      },
      comm);
}

// Teams are rank arithmetic on the communicator.
namespace {
// The communicator, or null after recording why (no team can be an error code).
Communicator* teamComm(const char* func, ncclComm_t comm) {
  Communicator* c = nullptr;
  Status s = lookupComm(comm, &c, /*needReady=*/true);
  if (s.ok()) return c;
  (void)api::finishCall(func, s, nullptr);
  return nullptr;
}
}  // namespace

BRAID_API(ncclTeam, ncclTeamWorld, ncclComm_t comm) {
  const Communicator* c = teamComm("ncclTeamWorld", comm);
  return c == nullptr ? ncclTeam{0, 0, 1} : ncclTeam{c->nranks(), c->rank(), 1};
}
BRAID_API(ncclTeam, ncclTeamLsa, ncclComm_t comm) {
  const Communicator* c = teamComm("ncclTeamLsa", comm);
  return c == nullptr ? ncclTeam{0, 0, 1} : ncclTeam{c->lsaSize(), c->rank() % c->lsaSize(), 1};
}
BRAID_API(ncclTeam, ncclTeamRail, ncclComm_t comm) {  // this rank's place in every node's LSA team
  const Communicator* c = teamComm("ncclTeamRail", comm);
  return c == nullptr ? ncclTeam{0, 0, 1}
                      : ncclTeam{c->nranks() / c->lsaSize(), c->rank() / c->lsaSize(), c->lsaSize()};
}
BRAID_API(int, ncclTeamRankToWorld, ncclComm_t comm, ncclTeam team, int rank) {
  const Communicator* c = teamComm("ncclTeamRankToWorld", comm);
  return c == nullptr ? -1 : c->rank() + (rank - team.rank) * team.stride;
}
BRAID_API(int, ncclTeamRankToLsa, ncclComm_t comm, ncclTeam team, int rank) {
  const Communicator* c = teamComm("ncclTeamRankToLsa", comm);
  return c == nullptr ? -1 : c->rank() % c->lsaSize() + (rank - team.rank) * team.stride;
}
BRAID_API(int, ncclLLA2ACalcSlots, int maxElts, int maxEltSize) {  // 8 bytes of payload per slot
  if (maxElts < 0 || maxEltSize < 0) return 0;
  const int64_t slots = int64_t(maxElts) * ((int64_t(maxEltSize) + 7) / 8);
  return slots > INT32_MAX ? INT32_MAX : static_cast<int>(slots);
}
BRAID_API(ncclResult_t, ncclLLA2ACreateRequirement, int nBlocks, int nSlots, ncclLLA2AHandle* outHandle,
          ncclDevResourceRequirements* outReq) {
  return api::apiGuard("ncclLLA2ACreateRequirement", [&]() -> Status {
    BRAID_CHECK(api::checkNotNull(outHandle, "outHandle"));
    BRAID_CHECK(api::checkNotNull(outReq, "outReq"));
    return llA2ARequirement(nBlocks, nSlots, outHandle, outReq);
  });
}
BRAID_API(ncclResult_t, ncclLsaBarrierCreateRequirement, ncclTeam team, int nBarriers,
          ncclLsaBarrierHandle* outHandle, ncclDevResourceRequirements* outReq) {
  return api::apiGuard("ncclLsaBarrierCreateRequirement", [&]() -> Status {
    BRAID_CHECK(api::checkNotNull(outHandle, "outHandle"));
    BRAID_CHECK(api::checkNotNull(outReq, "outReq"));
    return lsaBarrierRequirement(team, nBarriers, outHandle, outReq);
  });
}
BRAID_COMM_ENTRY("GPU-initiated networking (GIN) of NCCL's device API", ncclGinBarrierCreateRequirement,
                 BRAID_ARGS(ncclComm_t comm, ncclTeam /*team*/, int /*nBarriers*/,
                            ncclGinBarrierHandle* outHandle, ncclDevResourceRequirements* outReq),
                 {
                   BRAID_CHECK(api::checkNotNull(outHandle, "outHandle"));
                   BRAID_CHECK(api::checkNotNull(outReq, "outReq"));
                 })
BRAID_API(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
          ncclScalarResidence_t residence, ncclComm_t comm) {
  return api::apiGuard("ncclRedOpCreatePreMulSum", [&]() -> Status {
    Communicator* c = nullptr;
    BRAID_CHECK(lookupComm(comm, &c, /*needReady=*/true));
    BRAID_CHECK(api::checkNotNull(op, "op"));
    BRAID_CHECK(api::checkNotNull(scalar, "scalar"));
    BRAID_CHECK(api::checkDatatype(api::rawEnum(datatype)));
    int res = api::rawEnum(residence);
    if (res != ncclScalarDevice && res != ncclScalarHostImmediate) {
      return invalidArgument("argument 'residence' is ", res, "; use ncclScalarDevice or ncclScalarHostImmediate");
    }
    return c->redOps().create(scalar, datatype, residence, op);
  }, comm);
}

BRAID_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm) {
  return api::apiGuard("ncclRedOpDestroy", [&]() -> Status {
    Communicator* c = nullptr;
    BRAID_CHECK(lookupComm(comm, &c, /*needReady=*/true));
    return c->redOps().destroy(op);
  }, comm);
}
