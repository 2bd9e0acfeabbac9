// From an API call to a running collective: group collection, then the
// algorithm for the communicator's backend.
//
// Host backend: the calling thread runs the ring algorithm over host
// primitives and returns when the result is in place (any stream argument is
// treated as the null stream). Called from the API thread; a communicator is
// used by one thread at a time, as in NCCL.
#pragma once

#include <cstddef>

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

enum class CollType { AllReduce, AllGather, ReduceScatter, Broadcast, Reduce };

struct CollArgs {
  CollType type;
  const char* name;  // "ncclAllReduce"
  const void* send;
  void* recv;
  size_t count;  // per rank, as in each API's signature
  ncclDataType_t datatype;
  ncclRedOp_t op;  // reductions only
  int root;        // broadcast and reduce only
};

// Validates what needs the communicator (root range, op), then runs the
// collective now or, inside ncclGroupStart/End, at the group's end.
Status enqueueCollective(Communicator* comm, const CollArgs& args);

}  // namespace braid
