// From an API call to a running collective: group collection, then the
// algorithm for the communicator's backend.
//
// GPU backend: the same selection, then one kernel launch on the caller's
// stream (core/gpu_engine.h); the call returns once the work is enqueued.
// Host backend: the selector (src/tuning) picks algorithm, protocol and
// channel count; the buffers are cut into one contiguous part per channel;
// the calling thread runs channel 0 and the communicator's worker threads
// the others, each running the algorithm over host primitives; the call
// returns when the result is in place (any stream argument is treated as
// the null stream). Called from the API thread; a communicator is used by
// one thread at a time, as in NCCL.
//
// With BRAID_CHECK_COLL=1 every collective first compares its arguments and
// sequence number across ranks (one bootstrap all-gather) and fails with a
// message naming the ranks that disagree instead of hanging or corrupting.
#pragma once

#include <cstddef>

#include "collectives/coll_type.h"
#include "core/comm.h"

namespace braid {

// Bytes of one element of `type` (a valid ncclDataType_t).
inline size_t datatypeSize(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}

struct CollArgs {
  CollType type;
  const char* name;  // "ncclAllReduce"
  const void* send;
  void* recv;
  size_t count;  // per rank, as in each API's signature
  ncclDataType_t datatype;
  ncclRedOp_t op;  // reductions only
  int root;        // broadcast and reduce only
  void* stream = nullptr;  // GPU backend: the stream the work goes on (the host ignores it)
  // A PreMulSum operator taken when a call inside a group was made: its
  // scalar, or where a ncclScalarDevice scalar lives. NCCL lets the caller
  // destroy the operator as soon as the call has returned, before the group
  // runs it.
  bool opTaken = false;
  ScalarBits opScalar{};
};

// Validates what needs the communicator (root range, op), then runs the
// collective now or, inside ncclGroupStart/End, at the group's end.
Status enqueueCollective(Communicator* comm, const CollArgs& args);

// The selector's estimate of one collective's time in microseconds, as it
// would run now (ncclGroupSimulateEnd); runs nothing.
double estimateCollectiveUs(Communicator* comm, const CollArgs& args);

// The host output size from which copies stream (BRAID_HOST_STREAM_BYTES; 0:
// never).
size_t hostStreamBytes();

}  // namespace braid
