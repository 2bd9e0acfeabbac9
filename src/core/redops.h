// Custom reduction operators of a communicator (ncclRedOpCreatePreMulSum).
//
// An operator is sum over ranks of scalar x input, for one datatype. The
// scalar is either copied at creation (ncclScalarHostImmediate) or read
// from the caller's memory each time a collective using it runs
// (ncclScalarDevice; on the host backend that memory is host memory).
// Handles are ncclNumOps + index and are never reused, so a destroyed
// operator stays an error rather than silently naming a newer one.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "nccl.h"
#include "util/status.h"

namespace braid {

// A scalar's bytes (the datatype's width, at most 8).
struct ScalarBits {
  alignas(8) unsigned char bytes[8] = {};
  const void* pointer = nullptr;  // ncclScalarDevice read by the GPU: where the kernel reads it
};

class RedOpTable {
 public:
  Status create(const void* scalar, ncclDataType_t type, ncclScalarResidence_t residence, ncclRedOp_t* out);
  Status destroy(ncclRedOp_t op);
  // Checks that `op` is live and made for `type`; with `scalar`, also reads
  // its scalar now (a collective about to run).
  // With `leavePointer`, a ncclScalarDevice scalar is not read but its
  // pointer returned (the GPU reads it when the kernel runs).
  Status resolve(ncclRedOp_t op, ncclDataType_t type, ScalarBits* scalar = nullptr, bool leavePointer = false) const {
    if (static_cast<int>(op) < ncclNumOps) return okStatus();  // built in: the hot path
    return resolveCustom(op, type, scalar, leavePointer);
  }

 private:
  Status resolveCustom(ncclRedOp_t op, ncclDataType_t type, ScalarBits* scalar, bool leavePointer) const;
  struct Entry {
    bool live = false;
    ncclDataType_t type = ncclFloat32;
    ncclScalarResidence_t residence = ncclScalarHostImmediate;
    ScalarBits value;               // host-immediate
    const void* pointer = nullptr;  // device (read at run time)
  };
  mutable std::mutex mutex_;
  std::vector<Entry> ops_;
};

// Makes a scalar that `resolve` left as a pointer (ncclScalarDevice) ready
// for the host: its value is read from there (host memory on the host
// backend).
void loadScalar(ScalarBits* scalar, ncclDataType_t type);

// The name of a datatype as NCCL's docs spell it ("ncclFloat32"), for messages.
const char* datatypeName(ncclDataType_t type);

}  // namespace braid
