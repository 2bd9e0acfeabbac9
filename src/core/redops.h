// Custom reduction operators of a communicator (ncclRedOpCreatePreMulSum).
//
// An operator is sum over ranks of scalar x input, for one datatype. The
// scalar is either copied at creation (ncclScalarHostImmediate) or read
// from the caller's memory each time a collective using it runs
// (ncclScalarDevice; on the host backend that memory is host memory).
// A destroyed operator's slot is reused (a job may create and destroy one
// per collective, as PyTorch does), but its handle is not at once: a handle
// is ncclNumOps + (generation << 16 | slot), the slot's generation counting
// its reuses, so a stale handle is an error rather than silently naming a
// newer operator until that slot has been reused 32767 times.
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
  static constexpr int kSlotBits = 16;
  static constexpr uint32_t kMaxSlots = 1u << kSlotBits;      // live operators at once
  static constexpr uint32_t kGenerations = (1u << 15) - 1;  // handles stay below ncclMaxRedOp
  struct Entry {
    bool live = false;
    uint32_t generation = 0;
    ncclDataType_t type = ncclFloat32;
    ncclScalarResidence_t residence = ncclScalarHostImmediate;
    ScalarBits value;               // host-immediate
    const void* pointer = nullptr;  // device (read at run time)
  };
  mutable std::mutex mutex_;
  // The live entry `op` names, or null.
  const Entry* find(int op) const;
  std::vector<Entry> ops_;
  std::vector<uint32_t> free_;  // slots of destroyed operators
};

// Makes a scalar that `resolve` left as a pointer (ncclScalarDevice) ready
// for the host: its value is read from there (host memory on the host
// backend).
void loadScalar(ScalarBits* scalar, ncclDataType_t type);

// The name of a datatype as NCCL's docs spell it ("ncclFloat32"), for messages.
const char* datatypeName(ncclDataType_t type);

}  // namespace braid
