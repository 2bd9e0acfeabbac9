// Communicator life cycle: unique ids, init (blocking or not), init of all
// local devices, split, finalize, destroy, abort. Called from the API layer
// with validated arguments; see core/comm.h for ownership rules.
#pragma once

#include <vector>

#include "core/comm.h"

namespace braid {

// The most ranks a communicator may have: the bootstrap's frames carry at
// most this many (bootstrap/wire.h).
constexpr int kMaxCommRanks = 1 << 20;

// Creates a unique id. Without NCCL_COMM_ID this process starts the root;
// with it the id names that address and rank 0's init hosts the root.
Status getUniqueId(ncclUniqueId* id);

// Joins a communicator. Blocking configs return when init is complete (or
// failed: *out is then NULL); non-blocking ones return an ncclInProgress
// status with *out set. *out is published before init waits, so another
// thread may abort it.
Status commInitRank(ncclComm_t* out, int nranks, const std::vector<ncclUniqueId>& ids, int rank,
                    const CommConfig& config);
// ndev communicators in this process, rank i on devlist[i] (or device i).
Status commInitAll(ncclComm_t* comms, int ndev, const int* devlist);
Status commSplit(Communicator* parent, int color, int key, ncclComm_t* out, const CommConfig* config);
// ncclCommShrink: a communicator of the parent's ranks but `exclude`, in
// parent rank order, made by the remaining ranks only (the excluded ones,
// dead or not, take no part). `abortParent` (NCCL_SHRINK_ABORT) first ends
// the parent's operations in flight, which may wait for an excluded rank.
Status commShrink(Communicator* parent, const int* exclude, int nexclude, ncclComm_t* out,
                  const CommConfig* config, bool abortParent);
Status commFinalize(Communicator* comm);
// ncclCommRevoke (Communicator::revoke); ncclInProgress for a non-blocking one.
Status commRevoke(Communicator* comm);
Status commDestroy(Communicator* comm);
Status commAbort(Communicator* comm);

}  // namespace braid
