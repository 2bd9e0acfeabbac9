// Unique id and communicator life cycle. Arguments are validated here; the
// communicator layer itself is not built yet, so valid calls report that.
#include "api/api.h"
#include "core/config.h"
#include "core/library.h"

using namespace braid;

namespace {
constexpr const char* kCommunicators = "communicators (bootstrap, init, split, destroy)";

Status checkRankArgs(ncclComm_t* comm, int nranks, int rank) {
  BRAID_CHECK(api::checkNotNull(comm, "comm"));
  if (nranks < 1) return invalidArgument("argument 'nranks' is ", nranks, "; it must be at least 1");
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
    return api::notBuiltYet("ncclGetUniqueId", kCommunicators);
  });
}

BRAID_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t* comm, int nranks, ncclUniqueId commId,
          int rank, ncclConfig_t* config) {
  return api::apiGuard("ncclCommInitRankConfig", [&]() -> Status {
    BRAID_CHECK(checkRankArgs(comm, nranks, rank));
    CommConfig parsed;
    BRAID_CHECK(readCommConfig(config, &parsed));
    BRAID_CHECK(libraryInit());
    return api::notBuiltYet("ncclCommInitRankConfig", kCommunicators);
  });
}

BRAID_API(ncclResult_t, ncclCommInitRank, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return api::apiGuard("ncclCommInitRank", [&]() -> Status {
    BRAID_CHECK(checkRankArgs(comm, nranks, rank));
    BRAID_CHECK(libraryInit());
    return api::notBuiltYet("ncclCommInitRank", kCommunicators);
  });
}

BRAID_API(ncclResult_t, ncclCommInitAll, ncclComm_t* comm, int ndev, const int* devlist) {
  return api::apiGuard("ncclCommInitAll", [&]() -> Status {
    BRAID_CHECK(api::checkNotNull(comm, "comm"));
    if (ndev < 1) return invalidArgument("argument 'ndev' is ", ndev, "; it must be at least 1");
    if (devlist != nullptr) {
      for (int i = 0; i < ndev; ++i) {
        if (devlist[i] < 0) return invalidArgument("argument 'devlist[", i, "]' is ", devlist[i]);
        for (int j = 0; j < i; ++j) {
          if (devlist[j] == devlist[i]) {
            return invalidArgument("argument 'devlist' names device ", devlist[i], " twice (entries ",
                                   j, " and ", i, ")");
          }
        }
      }
    }
    BRAID_CHECK(libraryInit());
    return api::notBuiltYet("ncclCommInitAll", kCommunicators);
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
    return api::notBuiltYet("ncclCommInitRankScalable", kCommunicators);
  });
}

// Entry points that take an existing communicator. None can exist in this
// release, so after the handle checks they report the missing feature.
#define BRAID_COMM_ENTRY(name, params, extraChecks)                    \
  BRAID_API(ncclResult_t, name, params) {                              \
    return api::apiGuard(#name, [&]() -> Status {                      \
      BRAID_CHECK(api::checkCommHandle(comm));                  \
      extraChecks;                                                     \
      return api::notBuiltYet(#name, kCommunicators);                  \
    });                                                                \
  }
#define BRAID_ARGS(...) __VA_ARGS__

BRAID_COMM_ENTRY(ncclCommFinalize, ncclComm_t comm, {})
BRAID_COMM_ENTRY(ncclCommDestroy, ncclComm_t comm, {})
BRAID_COMM_ENTRY(ncclCommAbort, ncclComm_t comm, {})
BRAID_COMM_ENTRY(ncclCommRevoke, BRAID_ARGS(ncclComm_t comm, int revokeFlags), {
  if (revokeFlags != NCCL_REVOKE_DEFAULT) {
    return invalidArgument("argument 'revokeFlags' is ", revokeFlags, "; it must be NCCL_REVOKE_DEFAULT (0)");
  }
})
BRAID_COMM_ENTRY(ncclCommSplit, BRAID_ARGS(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                           ncclConfig_t* config), {
  BRAID_CHECK(api::checkNotNull(newcomm, "newcomm"));
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR) {
    return invalidArgument("argument 'color' is ", color, "; it must be >= 0 or NCCL_SPLIT_NOCOLOR");
  }
  CommConfig parsed;
  BRAID_CHECK(readCommConfig(config, &parsed));
})
BRAID_COMM_ENTRY(ncclCommShrink, BRAID_ARGS(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                            ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags), {
  BRAID_CHECK(api::checkNotNull(newcomm, "newcomm"));
  if (excludeRanksCount < 0) return invalidArgument("argument 'excludeRanksCount' is negative");
  if (excludeRanksCount > 0) BRAID_CHECK(api::checkNotNull(excludeRanksList, "excludeRanksList"));
  if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT) {
    return invalidArgument("argument 'shrinkFlags' is ", shrinkFlags,
                           "; use NCCL_SHRINK_DEFAULT or NCCL_SHRINK_ABORT");
  }
  CommConfig parsed;
  BRAID_CHECK(readCommConfig(config, &parsed));
})
BRAID_COMM_ENTRY(ncclCommGetAsyncError, BRAID_ARGS(ncclComm_t comm, ncclResult_t* asyncError),
                 { BRAID_CHECK(api::checkNotNull(asyncError, "asyncError")); })
BRAID_COMM_ENTRY(ncclCommCount, BRAID_ARGS(const ncclComm_t comm, int* count),
                 { BRAID_CHECK(api::checkNotNull(count, "count")); })
BRAID_COMM_ENTRY(ncclCommCuDevice, BRAID_ARGS(const ncclComm_t comm, int* device),
                 { BRAID_CHECK(api::checkNotNull(device, "device")); })
BRAID_COMM_ENTRY(ncclCommUserRank, BRAID_ARGS(const ncclComm_t comm, int* rank),
                 { BRAID_CHECK(api::checkNotNull(rank, "rank")); })
BRAID_COMM_ENTRY(ncclCommRegister, BRAID_ARGS(const ncclComm_t comm, void* buff, size_t size, void** handle), {
  BRAID_CHECK(api::checkNotNull(buff, "buff"));
  BRAID_CHECK(api::checkNotNull(handle, "handle"));
})
BRAID_COMM_ENTRY(ncclCommDeregister, BRAID_ARGS(const ncclComm_t comm, void* handle),
                 { BRAID_CHECK(api::checkNotNull(handle, "handle")); })
BRAID_COMM_ENTRY(ncclCommWindowRegister,
                 BRAID_ARGS(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags), {
  BRAID_CHECK(api::checkNotNull(buff, "buff"));
  BRAID_CHECK(api::checkNotNull(win, "win"));
  if ((winFlags & ~NCCL_WIN_COLL_SYMMETRIC) != 0) {
    return invalidArgument("argument 'winFlags' is ", winFlags, "; use NCCL_WIN_DEFAULT or NCCL_WIN_COLL_SYMMETRIC");
  }
})
BRAID_COMM_ENTRY(ncclCommWindowDeregister, BRAID_ARGS(ncclComm_t comm, ncclWindow_t win),
                 { BRAID_CHECK(api::checkNotNull(win, "win")); })
BRAID_COMM_ENTRY(ncclRedOpCreatePreMulSum,
                 BRAID_ARGS(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                            ncclScalarResidence_t residence, ncclComm_t comm), {
  BRAID_CHECK(api::checkNotNull(op, "op"));
  BRAID_CHECK(api::checkNotNull(scalar, "scalar"));
  BRAID_CHECK(api::checkDatatype(api::rawEnum(datatype)));
  int res = api::rawEnum(residence);
  if (res != ncclScalarDevice && res != ncclScalarHostImmediate) {
    return invalidArgument("argument 'residence' is ", res);
  }
})
BRAID_COMM_ENTRY(ncclRedOpDestroy, BRAID_ARGS(ncclRedOp_t op, ncclComm_t comm), {
  if (api::rawEnum(op) < ncclNumOps) {
    return invalidArgument("argument 'op' is built-in operator ", api::rawEnum(op),
                           "; only operators from ncclRedOpCreatePreMulSum can be destroyed");
  }
})
